"""One partition of a crawl: its pages' :class:`~.frontier.MemoryFrontier`, on a *pooled*
engine (the paper's distributed OPIC, its section 4.1), the money that leaves it for other
partitions, the messages it applies, and the journal of every change.

Money between partitions. A visit pays the links to pages of its own partition as any frontier
does; the shares of links to pages of other partitions (:meth:`OpicEngine.visit_out
<scrapy_opic.opic.engine.OpicEngine.visit_out>`), and a redirect's cash to a page of another
partition, leave in a :class:`~.messages.Transfer` to that partition, which credits its pages.

The virtual page in parts. A pooled engine's virtual page collects the partition's income (the
epsilon shares, dangling pages, closed pages) and, before each pop, pays the partition's own
share of it, by its live pages against the rest of the crawl's (and its pages never fetched,
for the discovery share); the rest goes in a :class:`~.messages.Report` to the crawl's
:class:`~.pool.Pool`, which pays each other partition its share by the same counts, with the
whole amount as teleport credit, so that every page of the crawl is paid as one virtual page
would pay it. A crawl whose pages are all in one partition is exactly one engine.

One clock. A partition's clock is what it absorbed and paid itself plus the rest of the crawl's
clock as the pool last told it (:meth:`OpicEngine.receive_pool
<scrapy_opic.opic.engine.OpicEngine.receive_pool>`).

Durability. Every change is a record of the journal (:mod:`.journal`), made in the order the
changes happened; :meth:`Partition.replay` applies records again on the checkpoint they follow,
through the same frontier. A message may leave only once the record that made it is durable,
or with it in one atomic write, so no partition ever holds money that a message also carries.

Pages in doubt. A partition shared by processes records each page it hands out
(:meth:`Partition.leased`; its request goes out only once that record is durable). Its next
owner replays a page handed out and never settled as *in doubt* (:attr:`Partition.doubt`): in
flight, its request perhaps fetched by a process that stalled past its lease. It is not
fetched again while the process that sent it may still tell its outcome
(:meth:`Partition.late`); :meth:`Partition.end_doubt` makes it pending again when that time is
over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .config import CrawlConfig
from .constants import FILTERED, FORBIDDEN, FORWARDED, IN_FLIGHT, OK, PENDING, STATUSES
from .contract import Entry, Lease, Link, Visit, require_payload
from .engine import Share
from .frontier import MemoryFrontier, MemoryRows
from .importance import CrawlView, normaliser
from .index import DictKeys
from .journal import (
    Applied,
    Confirmed,
    Dropped,
    Endowed,
    Failed,
    Filed,
    Forfeited,
    Forgot,
    Leased,
    Member,
    PaidOut,
    Redirected,
    Relayed,
    Released,
    Reported,
    Retried,
    Started,
    Unchanged,
    Visited,
)
from .messages import POOL, Figures, Message, Payment, Payout, Report, Transfer
from .refresh import Refresher
from .routing import partition_of
from .selection import Pick
from .snapshot import engine_arrays, engine_from_header, engine_header, restore_frontier


class Remote(NamedTuple):
    """A kept link (or a redirect) to a page of another partition."""

    key: Hashable
    url: str
    k: int
    weight: float = 1.0


class Partition(Member):
    """One partition of a crawl (see the module docstring). Pages are leased by key and token
    as in any frontier; every method that changes the partition appends its record. ``now``,
    where a method takes it, is the wall-clock time its operation reads (a replay's, the
    record's); by default ``time_fn()``."""

    def __init__(
        self,
        k: int,
        parts: int,
        frontier: MemoryFrontier,
        by: str = "host",
        time_fn: Callable[[], float] = time.time,
        journaled: bool = True,
    ) -> None:
        super().__init__(k, journaled)
        self.parts = parts
        self.by = by
        self.frontier = frontier
        engine = frontier.engine
        engine.pooled = parts > 1  # (one partition: one engine, no pool)
        self.time_fn = time_fn
        self._t = time_fn()
        # The engine (and the refresher) read the time of the operation under way: the one
        # its record keeps.
        engine.time_fn = self.now
        if frontier.refresher is not None:
            frontier.refresher.wall = self.now
        #: A crawl that refetches by change: per page id, its kept links to pages of other
        #: partitions (see :meth:`unchanged`).
        self.remote_kept: dict[int, list[Remote]] = {}
        #: The refetch budget of this partition's pages in the last plan before its checkpoint
        #: (refetches per second): what its next owner's budget starts with.
        self.refetch_share = 0.0
        #: page id -> the page of another partition it permanently redirects to (a link to it
        #: pays that page, as an alias does within a partition).
        self.remote_alias: dict[int, Remote] = {}
        #: The partition received the crawl's endowment (its first virtual cash).
        self.endowed = False
        #: The clock reported to the pool so far (what this partition absorbed and paid).
        self.reported_g = 0.0
        self._reported: Figures | None = None
        #: Pages in doubt (see the module docstring): key -> the lease that holds them in
        #: flight here.
        self.doubt: dict[Hashable, Lease] = {}
        #: Pages handed out are recorded (:meth:`leased`): a partition shared by processes.
        self.records_leases = False

    def now(self) -> float:
        """The time of the operation under way."""
        return self._t

    # -- building --------------------------------------------------------------------------
    @classmethod
    def new(
        cls,
        k: int,
        config: CrawlConfig,
        journaled: bool = True,
        time_fn: Callable[[], float] = time.time,
    ) -> Partition:
        """An empty partition ``k`` (no cash: the endowment comes with :meth:`endow`)."""
        engine = config.new_engine(capacity=64)
        engine.virtual_cash = 0.0
        frontier = config.new_frontier(engine)
        return cls(k, config.partitions, frontier, config.by, time_fn, journaled)

    def state(self) -> dict[str, Any]:
        """Everything to rebuild this partition (a checkpoint): the engine's header and page
        arrays, the frontier's page arrays, tiers, aliases, payloads, URLs and keys, and the
        partition's own state (mailbox, remote aliases...). Arrays are views of the live ones
        (cut to the pages): the caller copies or packs them before the partition changes."""
        fr = self.frontier
        e = fr.engine
        n = e.n
        arrays = {name: a[:n] for name, a in engine_arrays(e).items()}
        r = fr.refresher
        kept: dict[int, tuple] = {}
        if r is not None:
            arrays.update(r.columns(n))
            for i, links in r.kept():
                weights = None if links.weights is None else links.weights.tolist()
                kept[i] = (links.ids.tobytes(), weights, links.virtual_weight)
        keys, rows = e.keys, fr.rows
        if not isinstance(keys, DictKeys) or not isinstance(rows, MemoryRows):
            raise TypeError("a partition checkpointed whole keeps its keys and rows in memory")
        return {
            **self.own_state(),
            "engine": engine_header(e),
            "arrays": arrays,
            "status": bytes(fr.status[:n]),
            "outcome": fr.outcome[:n].tobytes(),
            "tier": fr.tier[:n].tobytes(),
            "tiers": fr.tiers.as_list(),
            "alias": dict(fr.alias),
            "payloads": dict(rows.payloads),
            "urls": rows.urls[:n],
            "keys": keys.listing(n),
            "kept": kept,
            # (Pages handed out: in doubt for the next owner. None kept by a partition that
            # is not shared: in flight, they are pending again, as their fetch may not have
            # happened.)
            "in_flight": (
                [
                    keys.key_of(int(i))
                    for i in np.flatnonzero(np.frombuffer(fr.status, np.uint8, n) == IN_FLIGHT)
                ]
                if self.records_leases
                else []
            ),
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        config: CrawlConfig,
        *,
        time_fn: Callable[[], float] = time.time,
        journaled: bool = True,
    ) -> Partition:
        """The partition of a checkpoint (:meth:`state`): pages that were in flight are pending
        again (their fetch may not have happened), or in doubt if handed out by a process that
        shared the partition."""
        engine = engine_from_header(state["engine"], keys=DictKeys(state["keys"]))
        n = engine.n
        engine.reserve(n)
        arrays = state["arrays"]
        for name, a in engine_arrays(engine).items():
            a[:n] = arrays[name]
        rows = MemoryRows()
        rows.urls = list(state["urls"])
        rows.payloads = dict(state["payloads"])
        refresher = None
        if config.refetches_by_change:
            refresher = Refresher()
            refresher.load({name: arrays[name] for name in arrays if name.startswith("r.")}, 0.0)
        fr = config.new_frontier(engine, rows, refresher)
        kept = np.zeros(n, bool)
        kept[np.fromiter(rows.payloads, np.int64, len(rows.payloads))] = True
        restore_frontier(
            fr,
            np.frombuffer(state["status"], np.uint8),
            np.frombuffer(state["outcome"], np.uint16),
            np.frombuffer(state["tier"], np.uint32),
            state["tiers"],
            state["alias"],
            kept,
        )
        part = cls(state["k"], config.partitions, fr, config.by, time_fn, journaled)
        part.load_own(state)
        for key in state["in_flight"]:
            i = engine.id_of(key)
            if i is not None and (lease := fr.take(i)) is not None:
                part.doubt[key] = lease
        if refresher is not None:
            for i, (ids, weights, vw) in state["kept"].items():
                refresher.keep(i, np.frombuffer(ids, np.int32), weights, vw)
        return part

    def own_state(self) -> dict[str, Any]:
        """The partition's own state (beside its frontier's): its mailbox, remote aliases and
        kept links, endowment, reports and refetch budget (its pages' share of the last plan:
        what its next owner's budget starts with)."""
        fr = self.frontier
        r = fr.refresher
        share = 0.0
        if r is not None:
            n = fr.engine.n
            share = float(r.schedule.freq[:n][fr.refetchable()].sum())
            # (The links of a page closed since are no links: they go with the checkpoint.)
            self.remote_kept = {i: x for i, x in self.remote_kept.items() if r.links_of(i)}
        return {
            "k": self.k,
            "box": self.box.state(),
            "remote_alias": dict(self.remote_alias),
            "remote_kept": dict(self.remote_kept),
            "endowed": self.endowed,
            "reported_g": self.reported_g,
            "reported": self._reported,
            "refetch_share": share,
        }

    def load_own(self, state: dict[str, Any]) -> None:
        """Take :meth:`own_state` back."""
        self.box.load(state["box"])
        self.remote_alias = dict(state["remote_alias"])
        self.remote_kept = dict(state["remote_kept"])
        self.endowed = bool(state["endowed"])
        self.reported_g = float(state["reported_g"])
        self._reported = state["reported"]
        self.refetch_share = float(state["refetch_share"])

    # -- where pages live ---------------------------------------------------------------------
    def route(self, url: str | None, key: Hashable) -> int:
        return partition_of(url, key, self.parts, self.by)

    def _begin(self, now: float | None) -> float:
        self._t = self.time_fn() if now is None else now
        return self._t

    def _held(self, key: Hashable) -> Lease:
        """A lease on the page ``key`` that a replayed (or late) record settles: the page's in
        doubt, else the page pending again since its checkpoint (a pop not recorded)."""
        lease = self.doubt.pop(key, None)
        if lease is not None:
            return lease
        fr = self.frontier
        i = fr.engine.id_of(key)
        if i is None:
            raise ValueError(f"partition {self.k}: a record names a page it does not have")
        if fr.status[i] == PENDING and (lease := fr.take(i)) is not None:
            return lease
        raise ValueError(
            f"partition {self.k}: a record settles page {i}, {STATUSES[fr.status[i]]}, not pending"
        )

    # -- the frontier, recorded ----------------------------------------------------------------
    def schedule(
        self, entries: Sequence[Entry], again: bool = False, now: float | None = None
    ) -> list[int]:
        at = self._begin(now)
        codes = self.frontier.schedule(entries, again)
        self._log(Filed, at, tuple(entries), again)
        return codes

    def pay_out(self, others: tuple[int, int] | None = None) -> None:
        """The virtual page pays its partition's share out (before a pop: see the module
        docstring), recorded; ``others``: the live pages and those never fetched of the
        other partitions, if the caller knows them better than the pool last said."""
        e = self.frontier.engine
        if e.virtual_cash > 0.0 and e.n > e.n_closed:
            if others is not None and e.view is not None:
                e.view = e.view._replace(live_others=others[0], unfetched_others=others[1])
            elif others is not None:
                e.view = CrawlView(*others, e.n, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
            e.payout()
            self._log(PaidOut, others)

    def peek(self, full_slots: Collection[Hashable] = (), discover: bool = False) -> Pick | None:
        return self.frontier.peek(full_slots, discover)

    def take(self, i: int) -> Lease | None:
        self.version += 1
        return self.frontier.take(i)

    def visit(
        self,
        lease: Lease,
        links: Sequence[Link],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
        outcome: int = OK,
        changed: bool | None = None,
        modified: float | None = None,
        *,
        routes: Sequence[int] | None = None,
        now: float | None = None,
    ) -> Visit | None:
        """The frontier's visit; the shares of links to pages of other partitions leave as
        transfers (``routes``: each link's partition, if the caller knows them), their code
        :data:`FORWARDED`. A crawl that refetches by change keeps those links too
        (:attr:`remote_kept`)."""
        at = self._begin(now)
        local, remote = self._split(links, routes)
        fr = self.frontier
        outside = [r.weight for r in remote.values()]
        got = fr.visit_out(
            lease, local, outside, virtual_weight, importance, payload, outcome, changed, modified
        )
        if got is None:
            return None
        visit, shares = got
        self._transfer(list(remote.values()), shares)
        if fr.refresher is not None:
            i = fr.engine.id_of(lease.key)
            assert i is not None
            if remote:
                self.remote_kept[i] = list(remote.values())
            else:
                self.remote_kept.pop(i, None)
        self._log(
            Visited,
            at,
            lease.key,
            tuple(links),
            virtual_weight,
            payload,
            outcome,
            changed,
            modified,
        )
        if len(local) == len(links):
            return visit
        codes = iter(visit.codes)
        local_ids = {id(link) for link in local}
        out = [next(codes) if id(link) in local_ids else FORWARDED for link in links]
        return Visit(out, visit.importance)

    def _split(
        self, links: Sequence[Link], routes: Sequence[int] | None
    ) -> tuple[list[Link], dict[Hashable, Remote]]:
        """A visit's links to pages of this partition, and those to pages of others by key (a
        page linked twice once, with the largest weight; a page here that moved to
        another partition for good stands for that page)."""
        if self.parts == 1:
            return list(links), {}
        local: list[Link] = []
        remote: dict[Hashable, Remote] = {}
        for n, link in enumerate(links):
            key, url = link.key, link.url
            k = routes[n] if routes is not None else self.route(url, key)
            if k == self.k and self.remote_alias:
                i = self.frontier.engine.id_of(key)
                moved = self.remote_alias.get(i) if i is not None else None
                if moved is not None:
                    key, url, k = moved.key, moved.url, moved.k
            if k == self.k:
                local.append(link)
                continue
            r = remote.setdefault(key, Remote(key, url, k, link.weight))
            if link.weight > r.weight:  # (the page linked before: a heavier link)
                remote[key] = r._replace(weight=link.weight)
        return local, remote

    def _transfer(
        self,
        remote: Sequence[Remote],
        shares: Sequence[Share],
        entry: Entry | None = None,
    ) -> None:
        """Send the ``shares`` of ``remote`` links to their partitions (with ``entry``, the
        request that files the page there)."""
        by_dst: dict[int, list[Payment]] = {}
        for r, share in zip(remote, shares):
            by_dst.setdefault(r.k, []).append(Payment(r.key, r.url, share, entry))
        for k, payments in by_dst.items():
            self._send(Transfer, k, tuple(payments))

    def _outside(self, i: int) -> tuple[list[float], list[Remote]]:
        """Page ``i``'s kept links to pages of other partitions (none if it has no kept links
        any more: closed), as weights and as the links they pay."""
        r = self.frontier.refresher
        remote = self.remote_kept.get(i) if self.remote_kept else None
        if r is None or not remote or r.links_of(i) is None:
            return [], []
        return [x.weight for x in remote], remote

    def unchanged(
        self, lease: Lease, payload: Any = None, now: float | None = None
    ) -> Visit | None:
        """The frontier's :meth:`~.frontier.MemoryFrontier.unchanged`; the shares of the kept
        links to pages of other partitions leave as transfers."""
        at = self._begin(now)
        fr = self.frontier
        i = fr.engine.id_of(lease.key)
        outside, remote = self._outside(i) if i is not None else ([], [])
        got = fr.unchanged_out(lease, outside, payload)
        if got is None:
            return None
        self._transfer(remote, got[1])
        self._log(Unchanged, at, lease.key, payload)
        return got[0]

    def relay_after(self, popped: int) -> None:
        """The relay visit that follows the refetch pop of page ``popped`` (see
        :mod:`~.refresh`), if there is one to make, recorded."""
        j = self.frontier.relay_pick(popped)
        if j is not None:
            self._relay(self._begin(None), j)

    def _relay(self, at: float, j: int) -> None:
        outside, remote = self._outside(j)
        self._transfer(remote, self.frontier.relay(j, outside))
        if self.journaled:  # (a stored key is read back: not for nothing)
            self._log(Relayed, at, self.frontier.engine.key_of(j))
        else:
            self._count()

    def fail(
        self, lease: Lease, outcome: int, payload: Any = None, now: float | None = None
    ) -> bool:
        at = self._begin(now)
        done = self.frontier.fail(lease, outcome, payload)
        if done:
            self._log(Failed, at, lease.key, outcome, payload)
        return done

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN, now: float | None = None) -> bool:
        at = self._begin(now)
        done = self.frontier.forfeit(lease, outcome)
        if done:
            self._log(Forfeited, at, lease.key, outcome)
        return done

    def drop(self, key: Hashable, outcome: int = FILTERED, now: float | None = None) -> bool:
        at = self._begin(now)
        done = self.frontier.drop(key, outcome)
        if done:
            self._log(Dropped, at, key, outcome)
        return done

    def forget_lies(
        self,
        slot: Hashable,
        now: float | None = None,
        *,
        unchanged: bool = True,
        dated: bool = False,
    ) -> int:
        """The frontier's :meth:`~.frontier.MemoryFrontier.forget_lies`, recorded."""
        at = self._begin(now)
        n = self.frontier.forget_lies(slot, unchanged=unchanged, dated=dated)
        if n:
            self._log(Forgot, at, slot, unchanged, dated)
        return n

    def retry(self, lease: Lease, entry: Entry, now: float | None = None) -> int | None:
        at = self._begin(now)
        code = self.frontier.retry(lease, entry)
        if code is not None:
            self._log(Retried, at, lease.key, entry)
        return code

    def redirect(
        self, lease: Lease, entry: Entry, permanent: bool = False, now: float | None = None
    ) -> int | None:
        """The frontier's redirect; to a page of another partition, the cash leaves in a
        transfer that files the target there (:data:`FORWARDED`)."""
        require_payload(entry)
        at = self._begin(now)
        k = self.route(entry.url, entry.key)
        code: int | None
        if k == self.k:
            code = self.frontier.redirect(lease, entry, permanent)
            if code is None:
                return None
        else:
            moved = self.frontier.redirect_out(lease, permanent)
            if moved is None:
                return None
            i = self.frontier.engine.id_of(lease.key)
            assert i is not None  # (the page stays: closed, or an alias)
            target = Remote(entry.key, entry.url, k)
            if permanent:
                self.remote_alias[i] = target
            else:
                self.remote_alias.pop(i, None)
            self._transfer([target], [moved], entry)
            code = FORWARDED
        self._log(Redirected, at, lease.key, entry, permanent)
        return code

    def release(self, leases: Iterable[Lease], now: float | None = None) -> int:
        self.version += 1
        if not self.records_leases:
            return self.frontier.release(leases)
        at = self._begin(now)
        n = 0
        for lease in leases:
            if self.frontier.release([lease]):
                n += 1
                self._log(Released, at, lease.key)
        return n

    # -- pages handed out, and in doubt --------------------------------------------------------
    def leased(self, lease: Lease, now: float | None = None) -> int:
        """Record that the page of ``lease`` was handed out; the number of records that must be
        durable before its request goes out."""
        self._log(Leased, self._begin(now), lease.key)
        return self.records

    def _doubt(self, rec: Leased) -> None:
        """A replayed :class:`~.journal.Leased`: the page in doubt."""
        fr = self.frontier
        i = fr.engine.id_of(rec.key)
        if i is None or fr.status[i] != PENDING or rec.key in self.doubt:
            raise ValueError(f"partition {self.k}: a lease record names no page waiting")
        lease = fr.take(i)
        if lease is not None:  # (else its request was lost: given up, as at the pop)
            self.doubt[rec.key] = lease
        self._log(Leased, rec.at, rec.key)

    def _undoubt(self, rec: Released) -> None:
        """A replayed (or late) :class:`~.journal.Released`: its page, if in doubt, pending
        again."""
        lease = self.doubt.pop(rec.key, None)
        if lease is not None:
            self.frontier.release([lease])
        self._log(Released, rec.at, rec.key)

    def end_doubt(self, now: float | None = None) -> int:
        """The pages in doubt pending again (the process that sent their requests had its time
        to tell their outcomes), recorded; how many."""
        at = self._begin(now)
        n = len(self.doubt)
        for key in list(self.doubt):
            self._undoubt(Released(at, key))
        return n

    def late(self, records: Iterable[Any], now: float | None = None) -> int:
        """Apply the records of another process that handed pages of this partition out and
        lost the partition before they were durable (a :class:`~.messages.LateNote`): each
        outcome settles its page if the page is in doubt here, or waits again (fetched once,
        whatever this process did not fetch yet); an outcome of a page this process fetched
        or sent meanwhile is dropped, as are records that settle nothing. The requests they
        filed are filed. Applied now, recorded as this partition's own; how many outcomes."""
        fr = self.frontier
        n = 0
        for rec in records:
            kind = type(rec)
            if kind is Filed:
                self.schedule(rec.entries, rec.again, now)
                continue
            if kind is Dropped:
                self.drop(rec.key, rec.outcome, now)
                continue
            if kind not in _LATE:
                continue
            key = rec.key
            if key not in self.doubt:
                i = fr.engine.id_of(key)
                if kind in (Released, Retried) or i is None or fr.status[i] != PENDING:
                    continue
                if (lease := fr.take(i)) is None:
                    continue
                self.doubt[key] = lease
            _LATE[kind](self, rec._replace(at=self._begin(now)))
            n += 1
        return n

    # -- messages --------------------------------------------------------------------------
    def _apply(self, m: Message, at: float | None = None) -> None:
        at = self._begin(at)
        fr = self.frontier
        e = fr.engine
        if isinstance(m, Transfer):
            for p in m.payments:
                j = fr.page(p.key, p.url)
                target = fr.target(j)
                moved = self.remote_alias.get(target) if self.remote_alias else None
                if moved is not None and e.is_closed(target):
                    # (a page that moved to another partition: the money follows it)
                    self._send(Transfer, moved.k, (Payment(moved.key, moved.url, p.share),))
                else:
                    e.receive(target, p.share)
                if p.entry is not None:
                    fr.schedule([p.entry])
        elif isinstance(m, Payout):
            e.view = m.view
            e.receive_pool(m.others, m.to_all, m.to_unfetched, m.teleport)
        else:
            raise ValueError(f"partition {self.k}: a message {type(m).__name__}")
        self._log(Applied, at, m)

    def start(self, teleport: float) -> None:
        """A partition made while the crawl runs: its pages are owed the teleport credit that
        every page of the crawl was given before (their back pay, as in one engine)."""
        self.frontier.engine.credit_base = teleport
        self._log(Started, teleport)

    def endow(self, cash: float = 1.0) -> None:
        """The crawl's endowment (its first virtual cash) comes to this partition, once."""
        if not self.endowed:
            self.frontier.engine.virtual_cash += cash
            self.endowed = True
            self._log(Endowed, cash)

    def figures(self) -> Figures:
        """What the pool adds up (:class:`~.messages.Figures`)."""
        fr = self.frontier
        e = fr.engine
        norm = e.window.normaliser()
        return Figures(
            e.n - e.n_closed,
            e.n_unfetched,
            e.n,
            e.credit_total,
            e.b_total,
            e.d_total,
            e.credit_passed,
            e.credit_dangling,
            float(normaliser(e) if norm is None else norm),
            e.visit_count,
            discovered=fr.counts[0],
            pending=fr.counts[1],
            in_flight=fr.counts[2],
            visited=fr.counts[3],
            fetched=fr.n_ok,
        )

    def figures_dict(self) -> dict[str, float]:
        """This partition's figures, by the names of :data:`~.fleet.FIGURES`."""
        fr = self.frontier
        e = fr.engine
        out: dict[str, float] = dict(zip(STATUSES, fr.counts))
        out.update(
            pages=e.n,
            fetched=fr.n_ok,
            failed_visits=fr.failed_visits,
            closed=e.n_closed,
            visits=e.visit_count,
            G=e.G,
            virtual_cash=e.virtual_cash + e.pool_all + e.pool_unfetched,
            records=self.records,
            unconfirmed=len(self.box.unconfirmed),
            relay_visits=fr.refresher.relays if fr.refresher is not None else 0,
            backed_off_pages=len(fr.backoff.parked),
            backed_off_slots=len(fr.backoff.slots),
        )
        return out

    def report(self, force: bool = False, now: float | None = None) -> Message | None:
        """A report to the pool, if there is anything new to tell: the virtual cash left for
        it (:meth:`OpicEngine.take_pooled <scrapy_opic.opic.engine.OpicEngine.take_pooled>`),
        the clock this partition made since the last report, and its figures."""
        e = self.frontier.engine
        at = self._begin(now)
        made = e.G - e.g_others
        figures = self.figures()
        pooled = e.pool_all or e.pool_unfetched or e.pool_credit
        if not (force or pooled or made != self.reported_g or figures != self._reported):
            return None
        to_all, to_unfetched, credit = e.take_pooled()
        clock, self.reported_g = made - self.reported_g, made
        self._reported = figures
        m = self._send(Report, POOL, to_all, to_unfetched, credit, clock, figures)
        self._log(Reported, at)
        return m

    # -- replay --------------------------------------------------------------------------------
    def replay(self, records: Iterable[NamedTuple]) -> None:
        """Apply the records of a journal again, in order, on this partition as it was when
        the first of them was made (its checkpoint): the same changes, the same messages."""
        self.replaying = True
        try:
            for rec in records:
                _REPLAY[type(rec)](self, rec)
        finally:
            self.replaying = False
        self.durable = self.records
        self.box.drop_delivered()
        self.outbox = []


def _replay_relay(part: Partition, rec: Relayed) -> None:
    j = part.frontier.engine.id_of(rec.key)
    if j is None or part.frontier.status[j] != PENDING:
        raise ValueError(f"partition {part.k}: a relay record names no page waiting")
    part._t = rec.at
    part._relay(rec.at, j)


def _replay_applied(part: Partition, rec: Applied) -> None:
    part.box.accept(rec.message)  # (in order in the journal: never a duplicate or early)
    part._apply(rec.message, rec.at)


def _replay_confirmed(part: Partition, rec: Confirmed) -> None:
    part.box.confirm(rec.dst, rec.seq)
    part._record(rec)


_REPLAY: dict[type, Callable[[Partition, Any], object]] = {
    Filed: lambda p, r: p.schedule(r.entries, r.again, r.at),
    Visited: lambda p, r: p.visit(
        p._held(r.key),
        r.links,
        r.virtual_weight,
        False,
        r.payload,
        r.outcome,
        r.changed,
        r.modified,
        now=r.at,
    ),
    Unchanged: lambda p, r: p.unchanged(p._held(r.key), r.payload, r.at),
    Relayed: _replay_relay,
    Failed: lambda p, r: p.fail(p._held(r.key), r.outcome, r.payload, r.at),
    Forfeited: lambda p, r: p.forfeit(p._held(r.key), r.outcome, r.at),
    Dropped: lambda p, r: p.drop(r.key, r.outcome, r.at),
    Forgot: lambda p, r: p.forget_lies(r.slot, r.at, unchanged=r.unchanged, dated=r.dated),
    Retried: lambda p, r: p.retry(p._held(r.key), r.entry, r.at),
    Redirected: lambda p, r: p.redirect(p._held(r.key), r.entry, r.permanent, r.at),
    PaidOut: lambda p, r: p.pay_out(r.others),
    Applied: _replay_applied,
    Reported: lambda p, r: p.report(force=True, now=r.at),
    Started: lambda p, r: p.start(r.teleport),
    Endowed: lambda p, r: p.endow(r.cash),
    Confirmed: _replay_confirmed,
    Leased: lambda p, r: p._doubt(r),
    Released: lambda p, r: p._undoubt(r),
}

#: The records that settle a page handed out, as :meth:`Partition.late` applies them.
_LATE = {
    kind: _REPLAY[kind]
    for kind in (Visited, Unchanged, Failed, Forfeited, Retried, Redirected, Released)
}
#: The records :meth:`Partition.late` takes.
LATE_RECORDS = frozenset((*_LATE, Filed, Dropped))
