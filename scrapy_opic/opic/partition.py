"""One crawl over many partitions: the paper's distributed OPIC (its section 4.1), each
partition's pages in a :class:`~.frontier.MemoryFrontier` of their own, the cash that crosses
partitions carried by messages, and the virtual page split over the partitions and a pool.

Nothing here does I/O: a backend (:mod:`scrapy_opic._backends.redis`) stores each partition's
journal and checkpoints, carries the messages and decides which process owns which partition.
Every rule of the crawl is the one engine's and the one frontier's; this module only says where
the money goes between them.

Partitions. A crawl has ``P`` partitions, fixed when it starts. A page belongs to the
partition of its URL's host (:func:`partition_of`; with ``by="key"``, of its key): a host's
pages, its download slot and the links between its pages (most links) stay in one partition,
owned by one process at a time, whose downloader then keeps the host's politeness as Scrapy does.

Money between partitions. A visit pays the links to pages of its own partition as any frontier
does; the shares of links to pages of other partitions (:meth:`OpicEngine.visit_out
<scrapy_opic.opic.engine.OpicEngine.visit_out>`), and a redirect's cash to a page of another
partition, leave in a *message* to that partition (a transfer), which credits and files the
pages there. A message is numbered per pair of partitions (1, 2...): its destination applies
each pair's messages once and in order (:class:`Mailbox`), so a message delivered twice (a
sender that died before it knew its message arrived, and whose successor sends it again) or
early (after a later one) changes nothing.

The virtual page in parts. Each partition's engine is *pooled*: its virtual page collects the
partition's income (the epsilon shares, dangling pages, closed pages), and before each pop pays
the partition's own share of it, by its live pages against the rest of the crawl's (and its
pages never fetched, for the discovery share), to its own pages; the rest goes in a report to
the crawl's :class:`Pool`, which pays each other partition its share by the same counts, with
the whole amount as teleport credit, so that every page of the crawl is paid as one virtual page
would pay it. A crawl whose pages are all in one partition is exactly one engine.

One clock. A partition's clock is what it absorbed and paid itself plus the rest of the crawl's
clock as the pool last told it (:meth:`OpicEngine.set_clock
<scrapy_opic.opic.engine.OpicEngine.set_clock>`); with the pool's payouts come the crawl's sums
that tell a page's importance (:class:`~scrapy_opic.opic.engine.CrawlView`).

Invariant (tested): the crawl's cash, the pages' and virtual pages' of every partition, the
pool's, and the messages not yet applied, is 1.

Durability. Every change of a partition is a *record* of its :attr:`Member.journal` (a page
filed, a visit with its links, an outcome, a message applied, a payout...), made in the order
the changes happened: a partition's checkpoint (:meth:`Partition.state`) plus the records since,
applied again by :meth:`Partition.replay` through the same frontier, rebuild its state exactly
(the same operations in the same order give the same floats), the messages it sent included. A
message may leave only once the record that made it is durable (:attr:`Member.durable`), or
with it in one atomic write (:attr:`Fleet.atomic`), so no partition ever holds money that a
message also carries; its source forgets it only once the record of its application is durable.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import numpy as np

from .constants import (
    CLOSED,
    DUPLICATE,
    ERROR,
    FILTERED,
    FORBIDDEN,
    FORWARDED,
    IN_FLIGHT,
    LOCAL,
    NEEDS_PAYLOAD,
    OK,
    PENDING,
    STATUSES,
)
from .engine import CrawlView, DictKeys, OpicEngine, importance_of_parts
from .frontier import (
    Entry,
    Lease,
    Link,
    MemoryFrontier,
    Visit,
    discovery_step,
    require_payload,
)
from .refresh import COLUMNS, Planner, Refresher, pick

#: The number of the crawl's pool, as a message's source or destination.
POOL = -1
#: Keys a process remembers as sent to their partitions with their requests (see
#: :meth:`Fleet.visit`): the set starts afresh past this size, which only costs some encoding.
FORWARDED_LIMIT = 500_000


def _bytes_only(payload: Any, url: str | None) -> bytes | None:
    return payload if isinstance(payload, bytes) else None


def partition_of(url: str | None, key: Hashable, parts: int, by: str = "host") -> int:
    """The partition of a page: a hash of its URL's host (``by="host"``) or of its key
    (``by="key"``), modulo ``parts``. BLAKE2b: the same in every process and every Python, and
    spread evenly for similar names (www1, www2...). A URL without a host goes by its text."""
    if by == "host" and url is not None:
        head = url.split("/", 3)  # ("scheme:", "", "user@host:port", "path...")
        netloc = head[2] if len(head) > 2 and not head[1] else ""
        return _host_partition(netloc, url, parts)
    data = key if isinstance(key, bytes) else str(key).encode("utf-8", "surrogatepass")
    return _hashed(data) % parts


def _hashed(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@functools.lru_cache(maxsize=65_536)
def _netloc_partition(netloc: str, parts: int) -> int | None:
    host = netloc.rpartition("@")[2]
    if host.startswith("[") or not host:
        return None  # (an IPv6 literal, or no host: the URL parser's answer)
    return _hashed(host.partition(":")[0].lower().encode("utf-8", "surrogatepass")) % parts


def _host_partition(netloc: str, url: str, parts: int) -> int:
    got = _netloc_partition(netloc, parts)
    if got is not None:
        return got
    try:
        text = urlsplit(url).hostname or url
    except ValueError:  # (a malformed URL, e.g. a bad IPv6 literal: its text)
        text = url
    return _hashed(text.encode("utf-8", "surrogatepass")) % parts


def keys_of(engine: OpicEngine, n: int) -> list[Hashable]:
    """The keys of an engine's first ``n`` pages (a partition's engine keeps them in a dict)."""
    keys = engine.keys
    if not isinstance(keys, DictKeys):
        raise TypeError("a partition's engine keeps its keys in a DictKeys")
    return keys.listing(n)


class Message(NamedTuple):
    """Money (and what comes with it) from one partition, or the pool, to another.

    ``kind``: ``"t"`` transfers (``body``: items ``(key, url, cash, credit, payload, priority,
    slot, again)``, one per page paid; a payload files the page), ``"r"`` a report to the pool
    (``body``: :meth:`Partition.report`'s), ``"p"`` a payout of the pool (``body``: ``(to all,
    to never fetched, the crawl's teleport credit, the clock of the rest of the crawl, crawl
    view)``)."""

    src: int
    dst: int
    seq: int
    kind: str
    body: Any


class Note(NamedTuple):
    """A request about a page of a partition this process does not own, with no money in it
    (nothing is lost or created if it is lost or comes twice): ``"s"`` file entries (``body``:
    ``(entries, again)``), ``"d"`` drop a page (``body``: ``(key, outcome)``)."""

    dst: int
    kind: str
    body: Any


class Mailbox:
    """A partition's (or the pool's) numbered messages, both ways.

    Sending: :meth:`stamp` numbers a message for its destination and keeps it as *unconfirmed*
    until :meth:`confirm` (its delivery is known); :attr:`delivered` is, per destination, the
    last number known delivered. Receiving: :meth:`accept` applies each source's messages once,
    in order of their numbers: one already applied is a duplicate, one ahead of a gap waits."""

    def __init__(self) -> None:
        self.next_seq: dict[int, int] = {}  # destination -> last number given
        self.applied: dict[int, int] = {}  # source -> last number applied
        self.delivered: dict[int, int] = {}  # destination -> last number known delivered
        self.unconfirmed: dict[tuple[int, int], Message] = {}  # (destination, seq) -> message
        self.waiting: dict[int, dict[int, Message]] = {}  # source -> seq -> message

    def stamp(self, src: int, dst: int, kind: str, body: Any) -> Message:
        seq = self.next_seq.get(dst, 0) + 1
        self.next_seq[dst] = seq
        m = Message(src, dst, seq, kind, body)
        self.unconfirmed[(dst, seq)] = m
        return m

    def confirm(self, dst: int, seq: int) -> None:
        if seq > self.delivered.get(dst, 0):
            self.delivered[dst] = seq
        for s in [s for (d, s) in self.unconfirmed if d == dst and s <= seq]:
            del self.unconfirmed[(dst, s)]

    def drop_delivered(self) -> None:
        """Forget the unconfirmed messages that :attr:`delivered` says arrived (after a
        replay, which makes every message again)."""
        gone = [k for k in self.unconfirmed if k[1] <= self.delivered.get(k[0], 0)]
        for k in gone:
            del self.unconfirmed[k]

    def accept(self, m: Message) -> list[Message]:
        """The messages to apply now, in order: ``m`` and those that waited behind it, if ``m``
        is the next of its source; none if it is a duplicate or early (it waits)."""
        done = self.applied.get(m.src, 0)
        if m.seq <= done:
            return []
        if m.seq > done + 1:
            self.waiting.setdefault(m.src, {})[m.seq] = m
            return []
        out = [m]
        later = self.waiting.get(m.src)
        seq = m.seq
        while later and seq + 1 in later:
            seq += 1
            out.append(later.pop(seq))
        self.applied[m.src] = seq
        return out

    def is_new(self, m: Message) -> bool:
        """``m`` is neither applied already nor waiting."""
        return m.seq > self.applied.get(m.src, 0) and m.seq not in self.waiting.get(m.src, {})

    def state(self) -> dict:
        return {
            "next_seq": dict(self.next_seq),
            "applied": dict(self.applied),
            "delivered": dict(self.delivered),
            "unconfirmed": sorted(self.unconfirmed.values()),
        }

    def load(self, state: dict) -> None:
        self.next_seq = dict(state["next_seq"])
        self.applied = dict(state["applied"])
        self.delivered = dict(state["delivered"])
        self.unconfirmed = {(m.dst, m.seq): Message(*m) for m in state["unconfirmed"]}
        self.waiting = {}


class Member:
    """What a partition and the pool share: a number, a mailbox, the messages made since the
    transport last took them (each with the journal length at its making: it may leave once
    the journal is durable that far), the records since the backend last took them, and how
    many records are durable."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.box = Mailbox()
        #: Messages made and not handed to the transport yet: ``(message, records)``, the
        #: message sendable once :attr:`durable` reaches ``records``.
        self.outbox: list[tuple[Message, int]] = []
        #: Records made since the backend took them (:meth:`take_journal`).
        self.journal: list[tuple] = []
        #: Records made so far (in this member's life: from its checkpoint on) and of those,
        #: durable (the backend counts them in as it stores them).
        self.records = 0
        self.durable = 0
        #: Bumped by every change (a cached best page is stale).
        self.version = 0
        self.replaying = False
        #: Told this member's number when it makes a message (its fleet's senders), and when
        #: it changes (its fleet's cached best pages).
        self.on_send: Callable[[int], None] | None = None
        self.on_change: Callable[[int], None] | None = None

    def _send(self, dst: int, kind: str, body: Any) -> Message:
        m = self.box.stamp(self.k, dst, kind, body)
        self.outbox.append((m, self.records + 1))  # (sendable with the record that makes it)
        if self.on_send is not None:
            self.on_send(self.k)
        return m

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change(self.k)

    def _record(self, *rec: Any) -> None:
        self._changed()
        if not self.replaying:
            self.journal.append(rec)
        self.records += 1

    def receive(self, m: Message) -> int:
        """Apply message ``m`` if it is the next of its source (with those that waited behind
        it); how many were applied. Each kind of member applies its own kinds."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Everything to rebuild this member (a checkpoint)."""
        raise NotImplementedError

    def take_journal(self) -> list[tuple]:
        """The records made since the last call, for the backend to store in order."""
        out, self.journal = self.journal, []
        return out

    def sendable(self, every: bool = False) -> list[Message]:
        """The messages whose records are durable (``every``: all, their records being
        written in the same atomic step as they are sent), taken from the outbox."""
        if every:
            ready = [m for m, _ in self.outbox]
            self.outbox = []
            return ready
        ready = [m for m, at in self.outbox if at <= self.durable]
        self.outbox = [(m, at) for m, at in self.outbox if at > self.durable]
        return ready

    def resend(self) -> list[Message]:
        """Every message not known delivered (after a takeover: its new owner sends them again;
        their destinations drop those they have), in order; the outbox starts afresh."""
        self.outbox = []
        return sorted(self.box.unconfirmed.values(), key=lambda m: (m.dst, m.seq))

    def confirm(self, dst: int, seq: int) -> None:
        """The transport delivered message ``seq`` to ``dst`` (and every one before it)."""
        if seq > self.box.delivered.get(dst, 0):
            self.box.confirm(dst, seq)
            self._record("c", dst, seq)


class Partition(Member):
    """One partition of a crawl: its pages' :class:`~.frontier.MemoryFrontier` (on a pooled
    engine), the links and redirects that lead out of it, the messages it receives, and the
    journal of every change (see the module docstring).

    Pages are leased by key and token as in any frontier; every method that changes the
    partition appends its record. Payloads are bytes (the backend stores them)."""

    def __init__(
        self,
        k: int,
        parts: int,
        frontier: MemoryFrontier,
        by: str = "host",
        time_fn: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(k)
        self.parts = parts
        self.by = by
        self.frontier = frontier
        frontier.lease_urls = True
        engine = frontier.engine
        engine.pooled = True
        self.time_fn = time_fn
        self._t = time_fn()
        # Every wall-clock reading of an operation is the one its record keeps: a replay reads
        # the same.
        engine.time_fn = lambda: self._t
        if frontier.refresher is not None:
            frontier.refresher.wall = engine.time_fn  # (change observations: the same time)
        #: A crawl that refetches by change: per page id, its kept links to pages of other
        #: partitions, ``(key, url, partition, weight, boost)`` (see :meth:`unchanged`).
        self.remote_kept: dict[int, list[tuple]] = {}
        #: The refetch budget of this partition's pages in the last plan before its checkpoint
        #: (refetches per second): what its next owner's budget starts with.
        self.refetch_share = 0.0
        #: page id -> ``(key, url, partition)`` of the page of another partition it permanently
        #: redirects to (a link to it pays that page, as an alias does within a partition).
        self.remote_alias: dict[int, tuple[Hashable, str, int]] = {}
        #: The partition received the crawl's endowment (its first virtual cash).
        self.endowed = False
        #: The clock reported to the pool so far (what this partition absorbed and paid).
        self.reported_g = 0.0
        self._reported: tuple = ()
        #: The number of the process's adoption of this partition (see Fleet.adopt).
        self.epoch = 0
        #: ``look(partition, key, again)``: for a page of another partition that this process
        #: owns, whether it is closed (a link to it is no link) and whether a request for it
        #: would be filed; ``None`` when it cannot tell (see :meth:`Fleet.look`).
        self.look: Callable[[int, Hashable, bool], tuple[bool, bool] | None] | None = None

    # -- building --------------------------------------------------------------------------
    @classmethod
    def new(
        cls,
        k: int,
        parts: int,
        *,
        epsilon: float,
        refresh: float,
        window: str,
        continuous: bool = False,
        by: str = "host",
        time_fn: Callable[[], float] = time.time,
        refetch: bool = False,
    ) -> Partition:
        """An empty partition (no cash: the endowment comes with :meth:`endow`); ``refetch``:
        a continuous crawl that refetches by change (a :class:`~.refresh.Refresher`)."""
        engine = OpicEngine(epsilon=epsilon, refresh=refresh, window=window, capacity=64)
        engine.virtual_cash = 0.0
        refresher = Refresher() if refetch and continuous else None
        frontier = MemoryFrontier(engine, "greedy", continuous, refresher=refresher)
        return cls(k, parts, frontier, by, time_fn)

    def state(self) -> dict[str, Any]:
        """Everything to rebuild this partition (a checkpoint): the engine's header and page
        arrays, the frontier's page arrays, tiers, aliases, payloads, URLs and keys, and the
        partition's own state (mailbox, remote aliases...). Arrays are views of the live ones
        (cut to the pages): the caller copies or packs them before the partition changes."""
        fr = self.frontier
        e = fr.engine
        n = e.n
        arrays = {name: a[:n] for name, a in e.page_arrays().items()}
        r = fr.refresher
        kept: dict[int, tuple] = {}
        share = 0.0
        if r is not None:
            arrays.update(r.columns(n))
            for i, links in r.kept():
                weights = None if links.weights is None else links.weights.tolist()
                boosts = None if links.boosts is None else links.boosts.tolist()
                kept[i] = (links.ids.tobytes(), weights, boosts, links.virtual_weight)
            share = float(r.schedule.freq[:n][fr.refetchable()].sum())
            # (The links of a page closed since are no links: they go with the checkpoint.)
            self.remote_kept = {i: x for i, x in self.remote_kept.items() if i in kept}
        return {
            "k": self.k,
            "engine": e.header(),
            "arrays": arrays,
            "status": bytes(fr.status[:n]),
            "outcome": fr.outcome[:n].tobytes(),
            "tier": fr.tier[:n].tobytes(),
            "tiers": fr.tiers.as_list(),
            "alias": dict(fr.alias),
            "payloads": dict(fr.payloads),
            "urls": fr.urls[:n],
            "keys": keys_of(e, n),
            "debt": fr.discovery_debt,
            "box": self.box.state(),
            "remote_alias": dict(self.remote_alias),
            "endowed": self.endowed,
            "reported_g": self.reported_g,
            "reported": self._reported,
            "kept": kept,
            "remote_kept": dict(self.remote_kept),
            "refetch_share": share,
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        parts: int,
        *,
        continuous: bool = False,
        by: str = "host",
        time_fn: Callable[[], float] = time.time,
    ) -> Partition:
        """The partition of a checkpoint (:meth:`state`): pages that were in flight are pending
        again (their fetch may not have happened)."""
        keys = state["keys"]
        engine = OpicEngine.from_header(state["engine"], keys=DictKeys(keys))
        n = engine.n
        engine._grow(n)
        for name, a in engine.page_arrays().items():
            a[:n] = state["arrays"][name]
        arrays = state["arrays"]
        refresher = None
        if continuous and f"r.{COLUMNS[-1]}" in arrays:
            refresher = Refresher()
            refresher.load({name: arrays[name] for name in arrays if name.startswith("r.")}, 0.0)
        fr = MemoryFrontier(engine, "greedy", continuous, refresher=refresher)
        fr.restore(
            np.frombuffer(state["status"], np.uint8),
            np.frombuffer(state["outcome"], np.uint16),
            np.frombuffer(state["tier"], np.uint32),
            state["tiers"],
            state["alias"],
            state["payloads"],
            state["urls"],
        )
        fr.discovery_debt = float(state["debt"])
        part = cls(state["k"], parts, fr, by, time_fn)
        part.box.load(state["box"])
        part.remote_alias = dict(state["remote_alias"])
        part.endowed = bool(state["endowed"])
        part.reported_g = float(state["reported_g"])
        part._reported = tuple(state["reported"])
        if refresher is not None:
            for i, (ids, weights, boosts, vw) in state["kept"].items():
                refresher.keep(i, np.frombuffer(ids, np.int32), weights, boosts, vw)
            part.remote_kept = dict(state["remote_kept"])
            part.refetch_share = float(state["refetch_share"])
        return part

    # -- where pages live ---------------------------------------------------------------------
    def route(self, url: str | None, key: Hashable) -> int:
        return partition_of(url, key, self.parts, self.by)

    def _place(self, key: Hashable, url: str) -> tuple[int, Hashable, str, bool]:
        """``(partition, key, url, aliased)`` of the page a link to ``(key, url)`` pays: its
        own, or, for a page of this partition that permanently redirects to a page of
        another, that page."""
        k = self.route(url, key)
        if k == self.k and self.remote_alias:
            i = self.frontier.engine.id_of(key)
            if i is not None and i in self.remote_alias:
                tkey, turl, tk = self.remote_alias[i]
                return tk, tkey, turl, True
        return k, key, url, False

    def _begin(self, now: float | None = None) -> float:
        self._t = self.time_fn() if now is None else now
        return self._t

    def _held(self, key: Hashable) -> Lease:
        """During a replay: a lease on the page ``key`` that a record settles (pending again
        since its checkpoint: its pop is not a record)."""
        fr = self.frontier
        i = fr.engine.id_of(key)
        if i is None:
            raise ValueError(f"partition {self.k}: a record names a page it does not have")
        if fr.status[i] == PENDING:
            return fr.take(i)
        raise ValueError(
            f"partition {self.k}: a record settles page {i}, {STATUSES[fr.status[i]]}, not pending"
        )

    # -- the frontier, recorded ----------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        self._begin()
        codes = self.frontier.schedule(entries, again)
        self._record("s", self._t, [tuple(e) for e in entries], again)
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
            self._record("o", others)

    def peek(
        self, full_slots: Collection[Hashable] = (), discover: bool = False
    ) -> tuple[int, int, float] | None:
        return self.frontier.peek(full_slots, discover)

    def take(self, i: int) -> Lease:
        self._changed()
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
    ) -> Visit | None:
        """The frontier's visit; the links to pages of other partitions leave as transfers
        (their code: :data:`FORWARDED` with a payload, else :data:`DUPLICATE`). A crawl that
        refetches by change keeps those links too (:attr:`remote_kept`)."""
        now = self._begin()
        local, where, remote, kept, virtual_weight = self._route(links, virtual_weight)
        outside = [(r[2], r[3]) for r in remote.values()]
        fr = self.frontier
        got = fr.visit_out(
            lease, local, outside, virtual_weight, importance, payload, outcome, changed, modified
        )
        if got is None:
            return None
        visit, shares = got
        self._transfers(remote, shares)
        if fr.refresher is not None:
            i = fr.engine.id_of(lease.key)
            assert i is not None
            if remote:
                self.remote_kept[i] = [(key, *r[:4]) for key, r in remote.items()]
            else:
                self.remote_kept.pop(i, None)
        links_kept = [tuple(x) for x in kept]
        rec = ("v", now, lease.key, links_kept, virtual_weight, payload, outcome)
        self._record(*rec, changed, modified)
        codes = iter(visit.codes)
        rows = list(remote.values())
        out = [
            next(codes) if w == -1 else DUPLICATE if w == -2 or rows[w][4] is None else FORWARDED
            for w in where
        ]
        return Visit(out, visit.importance)

    def _route(
        self, links: Sequence[Link], virtual_weight: float
    ) -> tuple[list[Link], list[int], dict[Hashable, list], list[Link], float]:
        """Where a visit's links go: those of this partition (``local``), per link where it
        went (-1: local; -2: nowhere, or merged into an earlier one; else its transfer's
        index), the transfers by page key (``[partition, url, weight, boost, payload,
        priority, slot, again]``: a page linked twice once, with the largest weight and
        boost), the links the record keeps (less those to closed pages of other partitions
        this process sees), and the virtual weight with the share of those closed pages."""
        local: list[Link] = []
        where: list[int] = []
        remote: dict[Hashable, list] = {}
        kept: list[Link] = []
        for link in links:
            k, key, url, aliased = self._place(link.key, link.url)
            seen = self.look(k, key, link.again) if k != self.k and self.look else None
            if seen is not None and seen[0] and not link.again:
                # A closed page of another partition this process can see: no page, as a
                # closed page of this one is (left out, or the virtual page's share).
                where.append(-2)
                if self.frontier.engine.closed_links_virtual:
                    virtual_weight += link.weight
                continue
            kept.append(link)
            if k == self.k:
                where.append(-1)
                local.append(link)
                continue
            data = None if aliased else link.payload
            r = remote.get(key)
            if r is None:
                # (Filed there, unless this process owns that partition and sees it will not be.)
                where.append(len(remote) if seen is None or seen[1] else -2)
                remote[key] = [k, url, link.weight, link.boost, data, link.priority, link.slot]
                remote[key].append(link.again)
            else:
                where.append(-2)
                r[2], r[3] = max(r[2], link.weight), max(r[3], link.boost)
                r[4] = r[4] if r[4] is not None else data
                r[7] = r[7] or link.again
        return local, where, remote, kept, virtual_weight

    def _transfers(
        self, remote: dict[Hashable, list], shares: Sequence[tuple[float, float]]
    ) -> None:
        by_dst: dict[int, list] = {}
        for (key, r), (cash, credit) in zip(remote.items(), shares):
            k, url, _w, _b, data, priority, slot, again = r
            by_dst.setdefault(k, []).append((key, url, cash, credit, data, priority, slot, again))
        for k, items in by_dst.items():
            self._send(k, "t", items)

    def _outside(self, i: int) -> tuple[list[tuple[float, float]], dict[Hashable, list]]:
        """Page ``i``'s kept links to pages of other partitions (none if it has no kept links
        any more: closed), as ``(weight, boost)`` pairs and as the transfers they pay."""
        r = self.frontier.refresher
        remote = self.remote_kept.get(i) if self.remote_kept else None
        if r is None or not remote or r.links_of(i) is None:
            return [], {}
        out = [(w, b) for _key, _k, _url, w, b in remote]
        items = {key: [k, url, w, b, None, 0, "", False] for key, k, url, w, b in remote}
        return out, items

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        """The frontier's :meth:`~.frontier.MemoryFrontier.unchanged`; the shares of the kept
        links to pages of other partitions leave as transfers."""
        now = self._begin()
        fr = self.frontier
        i = fr.engine.id_of(lease.key)
        outside, items = self._outside(i) if i is not None else ([], {})
        got = fr.unchanged_out(lease, outside, payload)
        if got is None:
            return None
        self._transfers(items, got[1])
        self._record("u", now, lease.key, payload)
        return got[0]

    def settle_after(self, popped: int) -> None:
        """The settle visit that follows the refetch pop of page ``popped`` (see
        :mod:`~.refresh`), if there is one to make, recorded."""
        fr = self.frontier
        j = fr.settle_pick(popped)
        if j is not None:
            self._settle(self._begin(), j)

    def _settle(self, now: float, j: int) -> None:
        outside, items = self._outside(j)
        self._transfers(items, self.frontier.settle(j, outside))
        self._record("k", now, self.frontier.engine.key_of(j))

    def fail(self, lease: Lease, outcome: int, payload: Any = None) -> bool:
        now = self._begin()
        done = self.frontier.fail(lease, outcome, payload)
        if done:
            self._record("f", now, lease.key, outcome, payload)
        return done

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        self._begin()
        done = self.frontier.forfeit(lease, outcome)
        if done:
            self._record("x", lease.key, outcome)
        return done

    def drop(self, key: Hashable, outcome: int = FILTERED) -> bool:
        self._begin()
        done = self.frontier.drop(key, outcome)
        if done:
            self._record("d", key, outcome)
        return done

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        now = self._begin()
        code = self.frontier.retry(lease, entry)
        if code is not None:
            self._record("y", now, lease.key, tuple(entry))
        return code

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        """The frontier's redirect; to a page of another partition, the cash leaves in a
        transfer that files the target there (:data:`FORWARDED`)."""
        require_payload(entry)
        now = self._begin()
        k = self.route(entry.url, entry.key)
        if k == self.k:
            code = self.frontier.redirect(lease, entry, permanent)
        else:
            moved = self.frontier.redirect_out(lease, permanent)
            if moved is None:
                return None
            i = self.frontier.engine.id_of(lease.key)
            assert i is not None  # (the page stays: closed, or an alias)
            if permanent:
                self.remote_alias[i] = (entry.key, entry.url, k)
            else:
                self.remote_alias.pop(i, None)
            e = entry
            item = (e.key, e.url, moved[0], moved[1], e.payload, e.priority, e.slot, False)
            self._send(k, "t", [item])
            seen = self.look(k, e.key, False) if self.look else None
            code = FORWARDED if seen is None or seen[1] else DUPLICATE
        if code is not None:
            self._record("z", now, lease.key, tuple(entry), permanent)
        return code

    def release(self, leases: Iterable[Lease]) -> int:
        self._changed()
        return self.frontier.release(leases)

    # -- messages --------------------------------------------------------------------------
    def receive(self, m: Message) -> int:
        """Apply ``m`` and those that waited for it (see :class:`Mailbox`); how many."""
        ready = self.box.accept(m)
        for r in ready:
            self._apply(r, self._begin())
        return len(ready)

    def _apply(self, m: Message, now: float) -> None:
        self._t = now
        fr = self.frontier
        e = fr.engine
        if m.kind == "t":
            for key, url, cash, credit, data, priority, slot, again in m.body:
                j = fr.page(key, url)
                target = fr._target(j) if fr.alias else j
                alias = self.remote_alias.get(target) if self.remote_alias else None
                if alias is not None and e._flags_mv[target] & CLOSED:
                    tkey, turl, tk = alias  # (a page that moved to another partition)
                    self._send(tk, "t", [(tkey, turl, cash, credit, None, 0, "", False)])
                else:
                    e.receive(target, cash, credit)
                if data is not None:
                    fr.schedule([Entry(key, url, priority, slot, data)], again)
        elif m.kind == "p":
            to_all, to_unfetched, teleport, others, view = m.body
            e.view = CrawlView(*view)
            e.set_clock(others)
            e.receive_payout(to_all, to_unfetched, 0.0)
            e.teleport_to(teleport)
        else:
            raise ValueError(f"partition {self.k}: a message of kind {m.kind!r}")
        self._record("m", now, m)

    def start(self, teleport: float) -> None:
        """A partition made while the crawl runs: its pages are owed the teleport credit that
        every page of the crawl was given before (their back pay, as in one engine)."""
        self._begin()
        self.frontier.engine.credit_base = teleport
        self._record("b", teleport)

    def endow(self, cash: float = 1.0) -> None:
        """The crawl's endowment (its first virtual cash) comes to this partition, once."""
        if not self.endowed:
            self._begin()
            self.frontier.engine.virtual_cash += cash
            self.endowed = True
            self._record("e", cash)

    def figures(self) -> tuple:
        """What the pool adds up: live pages, never fetched, pages, the credit sums, the
        window's normaliser, visits, and the pages per status."""
        e = self.frontier.engine
        fr = self.frontier
        norm = e.window.normaliser()
        if norm is None:
            norm = e._normaliser(e._now())
        return (
            e.n - e.n_closed,
            e.n_unfetched,
            e.n,
            e.credit_total,
            e.b_total,
            e.d_total,
            e.credit_passed,
            e.credit_dangling,
            float(norm),
            e.visit_count,
            *fr.counts,
            fr.n_ok,
        )

    def figures_dict(self) -> dict[str, float]:
        """This partition's figures, by the names of :data:`FIGURES`."""
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
            settle_visits=fr.refresher.settles if fr.refresher is not None else 0,
        )
        return out

    def report(self, force: bool = False, now: float | None = None) -> Message | None:
        """A report to the pool, if there is anything new to tell: the virtual cash left for
        it (:meth:`OpicEngine.take_pooled <scrapy_opic.opic.engine.OpicEngine.take_pooled>`),
        the clock this partition made since the last report, and its figures."""
        e = self.frontier.engine
        now = self._begin(now)
        made = e.G - e.g_others
        figures = self.figures()
        pooled = e.pool_all or e.pool_unfetched or e.pool_credit
        if not (force or pooled or made != self.reported_g or figures != self._reported):
            return None
        cash = e.take_pooled()
        dg, self.reported_g = made - self.reported_g, made
        self._reported = figures
        m = self._send(POOL, "r", (*cash, dg, figures))
        self._record("r", now)
        return m

    # -- replay --------------------------------------------------------------------------------
    def replay(self, records: Iterable[tuple]) -> None:
        """Apply the records of a journal again, in order, on this partition as it was when
        the first of them was made (its checkpoint): the same changes, the same messages."""
        self.replaying = True
        try:
            for rec in records:
                self._replay_one(rec)
        finally:
            self.replaying = False
        self.durable = self.records
        self.box.drop_delivered()
        self.outbox = []

    def _replay_one(self, rec: tuple) -> None:
        op = rec[0]
        if op == "s":
            self._t = rec[1]
            self.frontier.schedule([Entry(*e) for e in rec[2]], rec[3])
            self._record(*rec)
        elif op == "v":
            _, now, key, links, vw, payload, outcome, changed, modified = rec
            self.time_fn, fn = (lambda: now), self.time_fn
            try:
                lease = self._held(key)
                got = [Link(*x) for x in links]
                self.visit(lease, got, vw, False, payload, outcome, changed, modified)
            finally:
                self.time_fn = fn
        elif op == "u":
            _, now, key, payload = rec
            self.time_fn, fn = (lambda: now), self.time_fn
            try:
                self.unchanged(self._held(key), payload)
            finally:
                self.time_fn = fn
        elif op == "k":
            self._t = rec[1]
            j = self.frontier.engine.id_of(rec[2])
            if j is None or self.frontier.status[j] != PENDING:
                raise ValueError(f"partition {self.k}: a settle record names no page waiting")
            self._settle(rec[1], j)
        elif op == "f":
            self._t = rec[1]
            self.frontier.fail(self._held(rec[2]), rec[3], rec[4])
            self._record(*rec)
        elif op == "x":
            self.frontier.forfeit(self._held(rec[1]), rec[2])
            self._record(*rec)
        elif op == "d":
            self.frontier.drop(rec[1], rec[2])
            self._record(*rec)
        elif op == "y":
            self._t = rec[1]
            self.frontier.retry(self._held(rec[2]), Entry(*rec[3]))
            self._record(*rec)
        elif op == "z":
            _, now, key, entry, permanent = rec
            self.time_fn, fn = (lambda: now), self.time_fn
            try:
                self.redirect(self._held(key), Entry(*entry), permanent)
            finally:
                self.time_fn = fn
        elif op == "o":
            self.pay_out(rec[1])
        elif op == "m":
            m = Message(*rec[2])
            self.box.accept(m)  # (in order in the journal: never a duplicate or early)
            self._apply(m, rec[1])
        elif op == "r":
            self._t = rec[1]
            self.report(force=True, now=rec[1])
        elif op == "c":
            self.box.confirm(rec[1], rec[2])
            self._record(*rec)
        elif op == "b":
            self.frontier.engine.credit_base = rec[1]
            self._record(*rec)
        elif op == "e":
            self.frontier.engine.virtual_cash += rec[1]
            self.endowed = True
            self._record(*rec)
        else:
            raise ValueError(f"partition {self.k}: a record of unknown kind {op!r}")


class Pool(Member):
    """The crawl's pool: the part of every partition's virtual cash that belongs to the pages
    of the other partitions, paid to them (see the module docstring).

    A report from partition ``k`` brings ``(to all, to never fetched, credit)``: the first is
    owed to the other partitions by their live pages, the second by their pages never fetched
    (by their live pages where none has any), the teleport credit to each of them whole. What a
    partition is owed waits in :attr:`owed` until :meth:`pay`, which sends it in one message
    with the crawl's clock and sums (:class:`~scrapy_opic.opic.engine.CrawlView`)."""

    def __init__(self) -> None:
        super().__init__(POOL)
        #: The endowment until a partition takes it, and what no partition can be paid yet.
        self.cash = 0.0
        #: Per partition: its last figures (:meth:`Partition.figures`) and the clock it made.
        self.figures: dict[int, tuple] = {}
        self.made: dict[int, float] = {}
        #: What the pool paid out (the virtual page's history beyond the partitions' own).
        self.paid = 0.0
        #: Per partition: ``[to all, to never fetched]`` owed and not yet sent.
        self.owed: dict[int, list[float]] = {}
        #: Per partition: ``[to all, to never fetched]`` it reported and the pool has not
        #: shared out yet (at its next :meth:`pay`).
        self.pending: dict[int, list[float]] = {}
        #: The teleport credit every page of the crawl has been given: what every
        #: partition's virtual page gave, as their reports said.
        self.teleport = 0.0
        #: Per partition: the crawl's clock when the pool last paid it.
        self.told: dict[int, float] = {}

    def state(self) -> dict[str, Any]:
        return {
            "cash": self.cash,
            "figures": dict(self.figures),
            "made": dict(self.made),
            "paid": self.paid,
            "owed": {k: list(v) for k, v in self.owed.items()},
            "pending": {k: list(v) for k, v in self.pending.items()},
            "teleport": self.teleport,
            "told": dict(self.told),
            "box": self.box.state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Pool:
        pool = cls()
        pool.cash = float(state["cash"])
        pool.figures = {int(k): tuple(v) for k, v in state["figures"].items()}
        pool.made = {int(k): float(v) for k, v in state["made"].items()}
        pool.paid = float(state["paid"])
        pool.owed = {int(k): list(v) for k, v in state["owed"].items()}
        pool.pending = {int(k): list(v) for k, v in state["pending"].items()}
        pool.teleport = float(state["teleport"])
        pool.told = {int(k): float(v) for k, v in state["told"].items()}
        pool.box.load(state["box"])
        return pool

    @property
    def clock(self) -> float:
        """The crawl's clock as the pool knows it: what every partition reported it made, and
        what the pool paid."""
        return sum(self.made.values()) + self.paid

    def receive(self, m: Message) -> int:
        ready = self.box.accept(m)
        for r in ready:
            self._apply(r)
        return len(ready)

    def _apply(self, m: Message) -> None:
        if m.kind != "r":
            raise ValueError(f"the pool received a message of kind {m.kind!r}")
        to_all, to_unfetched, credit, dg, figures = m.body
        self.made[m.src] = self.made.get(m.src, 0.0) + dg
        self.figures[m.src] = tuple(figures)
        self.teleport += credit
        if to_all or to_unfetched:
            pending = self.pending.setdefault(m.src, [0.0, 0.0])
            pending[0] += to_all
            pending[1] += to_unfetched
        self._record("m", m)

    def _share(self) -> None:
        """Owe what the partitions reported (:attr:`pending`), and the pool's own cash, to
        the other partitions: partition ``k``'s ``to all`` by their live pages, its ``to never
        fetched`` by their pages never fetched (by their live pages if none has any); what a
        partition reported while no other is live waits. O(partitions) for all the reports
        together: with ``L_k`` the live pages of the partitions but ``k``, partition ``j`` is
        owed ``live_j * sum(a_k / L_k for k != j)`` (and likewise for pages never fetched);
        the rounding's remainder goes to the partition owed most, so that no cash is made or
        lost."""
        if self.cash > 0.0:
            pending = self.pending.setdefault(POOL, [0.0, 0.0])
            pending[0] += self.cash
            self.cash = 0.0
        figures = self.figures
        live = {k: f[0] for k, f in figures.items() if f[0] > 0}
        total_live = sum(live.values())
        if not self.pending or not total_live:
            return
        unf = {k: figures[k][1] for k in live if figures[k][1] > 0}
        total_unf = sum(unf.values())
        sum_a = sum_u = total = 0.0
        own: dict[int, tuple[float, float]] = {}
        waiting = {}
        for src, (a, u) in sorted(self.pending.items()):
            others = total_live - live.get(src, 0)
            if others <= 0:
                waiting[src] = [a, u]
                continue
            others_unf = total_unf - unf.get(src, 0)
            if others_unf <= 0:
                a, u = a + u, 0.0
            total += a + u
            x, y = a / others, (u / others_unf if u else 0.0)
            sum_a += x
            sum_u += y
            if src in live:
                own[src] = (x, y)
        self.pending = waiting
        if not total:
            return
        shared = 0.0
        most, most_k = -1.0, None
        for k in sorted(live):
            x, y = own.get(k, (0.0, 0.0))
            a = max(0.0, live[k] * (sum_a - x))
            u = max(0.0, unf.get(k, 0) * (sum_u - y))
            if not (a or u):
                continue
            owed = self.owed.setdefault(k, [0.0, 0.0])
            owed[0] += a
            owed[1] += u
            shared += a + u
            if a + u > most:
                most, most_k = a + u, k
        if most_k is not None:
            self.owed[most_k][0] += total - shared
        self.paid += total

    def pay(self, only: Collection[int] | None = None) -> list[Message]:
        """Send what each partition is owed (of ``only``, if given), with the crawl's clock
        without that partition's part, and its view."""
        self._share()
        out: list[Message] = []
        clock = self.clock
        # Also to a live partition owed nothing whose clock lags the crawl's by 1%: a window
        # reads the crawl's clock.
        late = {k for k, f in self.figures.items() if f[0] and self.told.get(k, 0.0) < 0.99 * clock}
        due = set(self.owed) | late
        if only is not None:
            due &= set(only)
        if not due:
            return out
        # The crawl's sums, once: a partition's view is them, with the other partitions'
        # live pages and pages never fetched.
        sums = [0.0] * 9
        for f in self.figures.values():
            for x in range(9):
                sums[x] += f[x]
        live, unf = int(sums[0]), int(sums[1])
        for k in sorted(due):
            a, u = self.owed.pop(k, (0.0, 0.0))
            fig = self.figures.get(k)
            mine = (fig[0], fig[1]) if fig is not None else (0, 0)
            view = (live - mine[0], unf - mine[1], int(sums[2]), *sums[3:9], self.teleport)
            body = (a, u, self.teleport, clock - self.made.get(k, 0.0), view)
            self.told[k] = clock
            out.append(self._send(k, "p", body))
        self._record("p")
        return out

    def figures_dict(self) -> dict[str, float]:
        """The pool's figures (see :data:`FIGURES`): its cash, records, messages."""
        return {
            "virtual_cash": self.total_cash(),
            "records": self.records,
            "unconfirmed": len(self.box.unconfirmed),
        }

    def total_cash(self) -> float:
        """The pool's cash: what it holds and owes."""
        return (
            self.cash
            + sum(a + u for a, u in self.owed.values())
            + sum(a + u for a, u in self.pending.values())
        )


#: The figures of a crawl's members, added up over the members (:func:`add_figures`).
FIGURES = (
    "pages",
    "fetched",
    "failed_visits",
    "closed",
    "visits",
    "G",
    "G_low",
    "virtual_cash",
    "records",
    "unconfirmed",
    "settle_visits",
    *STATUSES,
)


def add_figures(out: dict[str, float], f: dict[str, float]) -> None:
    """Add a member's figures ``f`` to ``out`` (the clock: the largest; ``G_low``: the
    smallest clock of a partition that has one, 0 for none)."""
    for name in FIGURES:
        if name == "G":
            out["G"] = max(out.get("G", 0.0), f.get("G", 0.0))
        elif name == "G_low":
            low, mine = out.get("G_low", 0.0), f.get("G", 0.0)
            if mine > 0:
                out["G_low"] = mine if not low else min(low, mine)
        else:
            out[name] = out.get(name, 0) + f.get(name, 0)


def finish_figures(out: dict[str, float]) -> dict[str, float]:
    """The figures derived from the sums: the error factor, the leases (pages in flight)."""
    out["error_factor"] = 1.0 / out["G"] if out["G"] > 0 else float("inf")
    out["leases"] = out["in_flight"]
    out.setdefault("cash_at_visit_x_n", 0.0)
    return out


def in_transit(messages: Iterable[Message]) -> float:
    """The cash that ``messages`` carry."""
    total = 0.0
    for m in messages:
        if m.kind == "t":
            total += sum(item[2] for item in m.body)
        elif m.kind in ("r", "p"):
            total += m.body[0] + m.body[1]
    return total


class Fleet:
    """The partitions of a crawl that one process owns (and maybe its pool), as one
    :class:`~.frontier.Frontier`: what the Scrapy scheduler drives. No I/O: a backend makes
    partitions and the pool its own (:meth:`adopt`), gives them up (:meth:`abandon`), stores
    their journals and carries the messages (:meth:`outgoing`, :meth:`deliver`).

    A pop takes the best page of all the partitions it owns (priority, then cash; in a
    continuous crawl the discovery share is the process's); an outcome goes to the partition
    of its lease; pages of partitions it does not own are filed there by a :class:`Note`.

    :param parts: the crawl's partition count; ``by``: pages go by ``"host"`` or ``"key"``.
    :param encode: ``encode(payload, url)``, a payload as bytes (``None`` if it cannot be).
    """

    shared = True
    lease_urls = True
    location: str | None = None
    maintain_interval = 0.1
    round_trips = 0
    #: Whether the backend writes every record of this process's members in one atomic step:
    #: then a message between two of them is applied as soon as it is made (the record that
    #: made it and the one that applied it become durable together); else once the first is
    #: durable (see :meth:`deliver_local`).
    atomic = False

    def __init__(
        self,
        parts: int,
        *,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        window: str = "unbounded",
        continuous: bool = False,
        by: str = "host",
        encode: Callable[[Any, str | None], bytes | None] | None = None,
        time_fn: Callable[[], float] = time.time,
    ) -> None:
        if parts < 1:
            raise ValueError(f"a crawl has at least one partition, not {parts}")
        self.P = parts
        self.by = by
        self.epsilon, self.refresh, self.window = epsilon, refresh, window
        self.continuous = continuous
        #: What orders a continuous crawl's refetches: ``"cash"`` or ``"freshness"`` (each
        #: partition a refresher, their plans one: :attr:`planner`).
        self.refetch = "cash"
        self.planner = Planner()
        self.encode = encode or _bytes_only
        self.time_fn = time_fn
        self.parts: dict[int, Partition] = {}
        self.pool: Pool | None = None
        self.notes: list[Note] = []
        #: The share of pops owed to pages never fetched (continuous crawls), and the debt.
        self.discovery = 0.0
        self.discovery_debt = 0.0
        #: The backoff of pages and hosts that keep failing (see MemoryFrontier).
        self.backoff, self.backoff_max = 0.0, 600.0
        self.closed_links_virtual = False
        self._adoptions = 0
        #: Keys of pages of other partitions whose request this process sent (no need to send
        #: it again: the partition filed it, or holds it visited); bounded.
        self._forwarded: set[Hashable] = set()
        #: Messages applied here between members this process owns, not yet confirmed to
        #: their sources: ``(src, dst, seq, records of dst once applied)``.
        self._local: list[tuple[int, int, int, int]] = []
        self._senders: set[int] = set()  # members that made messages since deliver_local
        # The best page of each partition, for pops (see _refresh_heads): per ``discover``,
        # partition -> (its version, (rank, page, slot) or None), a heap of the ranks, and
        # the partitions changed since; those whose candidates change with time alone.
        self._heads: tuple[dict, dict] = ({}, {})
        self._heap: tuple[list, list] = ([], [])
        self._dirty: list[set[int]] = [set(), set(), set()]  # heads (twice), counts
        self._volatile: set[int] = set()
        # The live pages and pages never fetched of each partition owned, and their sums.
        self._count_of: dict[int, tuple[int, int]] = {}
        self._totals = [0, 0]
        self._exact: tuple[Any, bool] = (None, False)

    # -- partitions ---------------------------------------------------------------------------
    def route(self, url: str | None, key: Hashable) -> int:
        return partition_of(url, key, self.P, self.by)

    def new_partition(self, k: int) -> Partition:
        return Partition.new(
            k,
            self.P,
            epsilon=self.epsilon,
            refresh=self.refresh,
            window=self.window,
            continuous=self.continuous,
            by=self.by,
            time_fn=self.time_fn,
            refetch=self.refetch == "freshness",
        )

    def teleport(self) -> float:
        """The teleport credit every page of the crawl was given, as far as this process
        knows (its pool's, or the most its partitions were told)."""
        if self.pool is not None:
            return self.pool.teleport
        views = [p.frontier.engine.view for p in self.parts.values()]
        return max([0.0, *(v.teleport for v in views if v is not None)])

    def adopt(self, part: Partition) -> None:
        """Partition ``part`` is this process's from now on (leases of an earlier time it was
        are stale: a lease's token holds the adoption's number)."""
        part.frontier.discovery = self.discovery
        part.frontier.backoff, part.frontier.backoff_max = self.backoff, self.backoff_max
        part.frontier.engine.closed_links_virtual = self.closed_links_virtual
        r = part.frontier.refresher
        if r is not None:  # (one plan for all: its pages' frequencies come with the next)
            r.planner = self.planner
            self.planner.budget += part.refetch_share
            self.planner.wanted = True
        self._adoptions += 1
        part.epoch = self._adoptions
        part.look = self.look
        part.on_send = self._senders.add
        part.on_change = self._mark
        self.parts[part.k] = part
        self._mark(part.k)
        if part.outbox:
            self._senders.add(part.k)

    def adopt_pool(self, pool: Pool) -> None:
        """The crawl's pool is this process's from now on."""
        pool.on_send = self._senders.add
        self.pool = pool
        if pool.outbox:
            self._senders.add(POOL)

    def look(self, k: int, key: Hashable, again: bool) -> tuple[bool, bool] | None:
        """For page ``key`` of partition ``k``, if this process owns it: whether the page is
        closed, and whether a request for it would be filed (unknown or schedulable);
        ``None`` if this process does not own the partition."""
        part = self.parts.get(k)
        if part is None:
            return None
        fr = part.frontier
        i = fr.engine.id_of(key)
        if i is None:
            return False, True
        return bool(fr.engine._flags_mv[i] & CLOSED), fr._schedulable(i, again)

    def abandon(self, k: int) -> Partition | None:
        """Partition ``k`` is no longer this process's (its leases are stale from now on)."""
        part = self.parts.pop(k, None)
        if part is not None:
            part.on_change = part.on_send = None
            self._mark(k)
            self._volatile.discard(k)
        return part

    def _mark(self, k: int) -> None:
        """Partition ``k`` changed (or came, or left): its best page and counts are stale."""
        for dirty in self._dirty:
            dirty.add(k)

    def owner_of(self, k: int) -> Partition | None:
        """The partition ``k`` if this process owns it; a backend may make it its own now
        (one that no other process owns)."""
        return self.parts.get(k)

    def _data(self, payload: Any, url: str | None) -> tuple[Any, bool]:
        """A payload as bytes, and whether it could not be encoded."""
        if payload is None or isinstance(payload, bytes):
            return payload, False
        data = self.encode(payload, url)
        return data, data is None

    # -- the contract ------------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        codes = [DUPLICATE] * len(entries)
        local: dict[int, list[tuple[int, Entry]]] = {}
        for n, e in enumerate(entries):
            data, unencodable = self._data(e.payload, e.url)
            if unencodable:
                codes[n] = -1  # (known below: LOCAL, or what the partition says)
            local.setdefault(self.route(e.url, e.key), []).append((n, e._replace(payload=data)))
        for k, batch in local.items():
            part = self.owner_of(k)
            if part is None:
                self.notes.append(Note(k, "s", ([tuple(e) for _, e in batch], again)))
                for n, _e in batch:
                    codes[n] = LOCAL if codes[n] == -1 else FORWARDED
                continue
            got = part.schedule([e for _, e in batch], again)
            for (n, _e), code in zip(batch, got):
                codes[n] = LOCAL if codes[n] == -1 and code == NEEDS_PAYLOAD else code
        return codes

    def pop(
        self, full_slots: Collection[Hashable] = (), exclude: Collection[int] = ()
    ) -> Lease | None:
        """The best page of the partitions owned but those of ``exclude``: the highest
        priority, then (in a continuous crawl's discovery turn, a page never fetched first)
        the most cash, among the slots with room. Each partition's best page is cached until
        the partition changes (its :attr:`Member.version`): a pop costs O(log P) heap
        operations plus one look at each partition's version, and a peek of each partition
        changed or whose best page's slot is full. A crawl that refetches by change pops as
        one frontier with a refresher does (:meth:`_pop_refetch`)."""
        if self._senders:
            self.deliver_local()
        if self.refetch == "freshness" and self.continuous:
            return self._pop_refetch(full_slots, exclude)
        share = self.discovery if self.continuous else 0.0
        discover = bool(share) and self.discovery_debt + share >= 1.0
        best = self._best(full_slots, exclude, discover)
        if best is None:
            return None
        _, part, i = best
        lease = part.take(i)
        if share:
            self.discovery_debt = discovery_step(
                self.discovery_debt, share, part.frontier._fetched(i)
            )
        return lease._replace(token=(part.k, part.epoch, lease.token))

    def _pop_refetch(
        self, full_slots: Collection[Hashable], exclude: Collection[int]
    ) -> Lease | None:
        """A pop of a crawl that refetches by change, over the partitions owned as
        :meth:`MemoryFrontier._refresh_pop <.frontier.MemoryFrontier._refresh_pop>` over its
        pages: discovery's share for pages never fetched, else the refetch due first of all
        the partitions (their schedules planned together: :meth:`replan`), else the richest
        page; after a refetch, one settle visit in the refetched page's partition."""
        now = self.time_fn()
        planner = self.planner
        if planner.due(sum(p.frontier.engine.n for p in self.parts.values()), now):
            self.replan(now)
        share = self.discovery
        best = self._best(full_slots, exclude, True)
        got = pick(
            None if best is None else (best[1], best[2]),
            best is not None and not best[1].frontier._fetched(best[2]),
            bool(share) and self.discovery_debt + share >= 1.0,
            lambda early: self._due(full_slots, exclude, early, now),
            lambda: planner.count_refetch(now),
        )
        if got is None:
            return None
        part, i = got
        lease = part.take(i)
        fetched = part.frontier._fetched(i)
        if share:
            self.discovery_debt = discovery_step(self.discovery_debt, share, fetched)
        if fetched:
            part.settle_after(i)
        return lease._replace(token=(part.k, part.epoch, lease.token))

    def _due(
        self, full_slots: Collection[Hashable], exclude: Collection[int], early: bool, now: float
    ) -> tuple[Partition, int] | None:
        """The refetch due first over the partitions owned but ``exclude`` (see
        :meth:`MemoryFrontier.due_page <.frontier.MemoryFrontier.due_page>`): the partitions
        by the due time of their first page, until one has a page a pop may take."""
        tops = []
        for k, part in self.parts.items():
            r = part.frontier.refresher
            if r is None or k in exclude:
                continue
            top = r.schedule.peek()
            if top is not None and (early or top[1] <= now):
                tops.append((top[1], k))
        for _due, k in sorted(tops):
            part = self.parts[k]
            i = part.frontier.due_page(full_slots, early, now)
            if i is not None:
                return part, i
        return None

    def replan(self, now: float | None = None) -> None:
        """Re-plan the refetch frequencies of the pages of all the partitions owned, together
        (one budget, the process's: :class:`~.refresh.Planner`), from their importance in the
        crawl and their change rates."""
        started = time.perf_counter()
        now = self.time_fn() if now is None else now
        owned = [
            (p.frontier, r) for p in self.parts.values() if (r := p.frontier.refresher) is not None
        ]
        if not owned:
            return
        imps = importance_of_parts([fr.engine for fr, _r in owned])
        parts = [(r, imp, fr.refetchable()) for (fr, r), imp in zip(owned, imps)]
        self.planner.plan(parts, now)
        self.planner.plan_cost = time.perf_counter() - started

    def _best(
        self, full_slots: Collection[Hashable], exclude: Collection[int], discover: bool
    ) -> tuple | None:
        """``(rank, partition, page)`` of the best page of the partitions owned but
        ``exclude`` (see :meth:`pop`), left pending."""
        self._refresh_heads(discover)
        heads, heap = self._heads[discover], self._heap[discover]
        best: tuple | None = None
        for k in list(self._volatile):  # (pages that wake up with time: peeked every pop)
            part = self.parts[k]
            if k not in exclude:
                best = self._better(best, part, part.peek(full_slots, discover), discover)
            if not part.frontier.wakes():  # (none waits any more: cached again)
                self._volatile.discard(k)
                self._mark(k)
        aside = []
        while heap:
            entry = heap[0]
            k, version = entry[3], entry[4]
            owner = self.parts.get(k)
            cached = heads.get(k)
            if owner is None or cached is None or cached[0] != version or owner.version != version:
                heapq.heappop(heap)  # (stale: the partition changed, or left)
                continue
            rank = (-entry[0], -entry[1], -entry[2])
            if best is not None and rank <= best[0]:
                break  # (no partition's best can beat it)
            aside.append(heapq.heappop(heap))
            if k in exclude:
                continue
            _rank, i, slot = cached[1]
            if full_slots and slot in full_slots:  # its best page waits: its next best?
                best = self._better(best, owner, owner.peek(full_slots, discover), discover)
            else:
                best = self._better(best, owner, (i, rank[1], rank[2]), discover)
        for entry in aside:
            heapq.heappush(heap, entry)
        return best

    @staticmethod
    def _better(best: tuple | None, part: Partition, got: Any, discover: bool) -> tuple | None:
        if got is None:
            return best
        i, priority, cash = got
        rank = (discover and not part.frontier._fetched(i), priority, cash)
        return (rank, part, i) if best is None or rank > best[0] else best

    def _refresh_heads(self, discover: bool) -> None:
        """Bring the cached best pages up to date: each partition changed since pays its
        virtual page's share out first (by the crawl's counts when this process owns every
        partition, see :meth:`_update_counts`) and is peeked; one whose candidates change
        with time alone (pages parked, slots backing off) is not cached but
        :attr:`_volatile`, peeked at every pop."""
        dirty = self._dirty[discover]
        if not dirty:
            return
        heads, heap = self._heads[discover], self._heap[discover]
        exact = self._update_counts()
        changed = sorted(dirty)
        dirty.clear()
        for k in changed:
            part = self.parts.get(k)
            if part is None:
                heads.pop(k, None)
                continue
            fr = part.frontier
            if fr.counts[PENDING]:
                if exact:
                    live, unf = self._count_of[k]
                    part.pay_out((self._totals[0] - live, self._totals[1] - unf))
                else:
                    part.pay_out()
            if fr.wakes():
                heads[k] = (-1, None)  # (never current)
                self._volatile.add(k)
                continue
            got = part.peek((), discover) if fr.counts[PENDING] else None
            if got is None:
                heads[k] = (part.version, None)
                continue
            i, priority, cash = got
            fresh = discover and not fr._fetched(i)
            heads[k] = (part.version, ((fresh, priority, cash), i, fr.slot_of(i)))
            heapq.heappush(heap, (-fresh, -priority, -cash, k, part.version))
        # (The changes of the partitions paying out now are theirs: no need to look again.)
        dirty.difference_update(
            k for k in changed if k in self.parts and heads[k][0] == self.parts[k].version
        )
        if len(heap) > 4 * len(self.parts) + 64:  # (stale entries: rebuilt)
            heap[:] = [
                (-h[0][0], -h[0][1], -h[0][2], k, v)
                for k, (v, h) in heads.items()
                if h is not None and k in self.parts
            ]
            heapq.heapify(heap)

    def _update_counts(self) -> bool:
        """Keep the crawl's live pages and pages never fetched summed over the partitions
        (exact when this process owns them all and its pool knows no other); whether exact."""
        pool = self.pool
        if pool is None:
            return False
        key = (id(pool), len(pool.figures), self._adoptions, len(self.parts))
        if self._exact[0] != key:
            self._exact = (key, set(pool.figures) <= set(self.parts))
            self._dirty[2].update(self.parts)
            self._dirty[2].update(self._count_of)
        if not self._exact[1]:
            return False
        count_of, totals = self._count_of, self._totals
        dirty = self._dirty[2]
        for k in dirty:
            old = count_of.pop(k, None)
            if old is not None:
                totals[0] -= old[0]
                totals[1] -= old[1]
            part = self.parts.get(k)
            if part is not None:
                e = part.frontier.engine
                count_of[k] = (e.n - e.n_closed, e.n_unfetched)
                totals[0] += count_of[k][0]
                totals[1] += count_of[k][1]
        dirty.clear()
        return True

    def _part_of(self, lease: Lease) -> tuple[Partition | None, Lease]:
        token = lease.token
        if not isinstance(token, tuple) or len(token) != 3:
            return None, lease
        part = self.parts.get(token[0])
        if part is None or part.epoch != token[1]:
            return None, lease
        return part, lease._replace(token=token[2])

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        part, own = self._part_of(lease)
        if part is None:
            return None
        return part.unchanged(own, self._data(payload, lease.url)[0])

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
    ) -> Visit | None:
        part, own = self._part_of(lease)
        if part is None:
            return None
        unencodable = []
        ready = []
        sent = []  # keys of pages of other partitions whose request leaves now
        for link in links:
            if link.payload is None or isinstance(link.payload, bytes):
                ready.append(link)
                unencodable.append(False)
                continue
            k = self.route(link.url, link.key)
            if not self._needs_payload(part, k, link):
                # (A page known not to want it: encoding the request would be wasted.)
                ready.append(link._replace(payload=None))
                unencodable.append(False)
                continue
            data, bad = self._data(link.payload, link.url)
            unencodable.append(bad)
            ready.append(link._replace(payload=data))
            if k != part.k and not bad:
                sent.append(link.key)
        data, _ = self._data(payload, lease.url)
        visit = part.visit(own, ready, virtual_weight, importance, data, outcome, changed, modified)
        if visit is not None and sent:
            if len(self._forwarded) > FORWARDED_LIMIT:
                self._forwarded.clear()
            self._forwarded.update(sent)
        if visit is None or not any(unencodable):
            return visit
        # A request that cannot be encoded is fetched by this process, outside the frontier:
        # a page of its own partition that needs it, or any page of another partition (whose
        # owner could not be sent it).
        codes = [
            LOCAL
            if bad and (code == NEEDS_PAYLOAD or self.route(link.url, link.key) != part.k)
            else code
            for code, bad, link in zip(visit.codes, unencodable, links)
        ]
        return Visit(codes, visit.importance)

    def _needs_payload(self, part: Partition, k: int, link: Link) -> bool:
        """Whether a link of a page of ``part`` needs its request: the page it leads to is new
        or may be filed again (``again``, a continuous crawl...); for a page of another
        partition, unless this process sent its request there already (see the module
        docstring: a page once filed stays so) or owns it and sees it will not be filed."""
        if k == part.k:
            fr = part.frontier
            i = fr.engine.id_of(link.key)
            return i is None or fr._schedulable(i, link.again)
        if link.again:
            return True
        seen = self.look(k, link.key, False)
        if seen is not None:
            return seen[1]
        return link.key not in self._forwarded

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        part, own = self._part_of(lease)
        if part is None:
            return False
        return part.fail(own, outcome, self._data(payload, lease.url)[0])

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        part, own = self._part_of(lease)
        return part is not None and part.forfeit(own, outcome)

    def drop(self, key: Hashable, outcome: int = FILTERED, url: str | None = None) -> bool:
        if url is None and self.by == "host":
            # (A key alone: its page is in at most one partition this process owns.)
            return any(p.drop(key, outcome) for p in self.parts.values())
        k = self.route(url, key)
        part = self.owner_of(k)
        if part is None:
            self.notes.append(Note(k, "d", (key, outcome)))
            return True
        return part.drop(key, outcome)

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        require_payload(entry)
        part, own = self._part_of(lease)
        if part is None:
            return None
        data, bad = self._data(entry.payload, entry.url)
        if bad:
            part.forfeit(own, ERROR)
            return LOCAL
        return part.retry(own, entry._replace(payload=data))

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        require_payload(entry)
        part, own = self._part_of(lease)
        if part is None:
            return None
        data, bad = self._data(entry.payload, entry.url)
        if bad:
            part.forfeit(own, ERROR)
            return LOCAL
        return part.redirect(own, entry._replace(payload=data), permanent)

    def release(self, leases: Iterable[Lease]) -> int:
        n = 0
        for lease in leases:
            part, own = self._part_of(lease)
            if part is not None:
                n += part.release([own])
        return n

    def maintain(self, leases: Collection[Lease]) -> None:
        pass

    def close(self, leases: Collection[Lease]) -> None:
        self.release(leases)

    # -- messages ------------------------------------------------------------------------------
    def members(self) -> list[Member]:
        out: list[Member] = list(self.parts.values())
        if self.pool is not None:
            out.append(self.pool)
        return out

    def member(self, k: int) -> Member | None:
        return self.pool if k == POOL else self.parts.get(k)

    def reports(self) -> None:
        """Each partition's report to the pool, if it has anything new (see
        :meth:`Partition.report`), and the pool's payouts: at the transport's pace. A partition
        with no page to pop pays its virtual cash out here (else at its pops), so that the
        pool gets its part."""
        for part in self.parts.values():
            if not part.frontier.counts[PENDING]:
                part.pay_out()
            part.report()
        self.deliver_local()
        if self.pool is not None:
            self.pool.pay()
        self.deliver_local()

    def outgoing(self) -> tuple[list[Message], list[Note]]:
        """The messages that may leave (see :meth:`Member.sendable` and :attr:`atomic`), and
        the notes, taken."""
        out: list[Message] = []
        for member in self.members():
            out.extend(member.sendable(self.atomic))
        notes, self.notes = self.notes, []
        return out, notes

    def deliver_local(self) -> int:
        """Apply the messages between members this process owns without the transport: each
        that may be applied (its source's record durable, or :attr:`atomic`) and is the next
        of its pair (one behind a message still in transport goes the same way). The source
        is told of the delivery once the record of its application is durable
        (:meth:`confirm_local`); until then it keeps the message, to send again if the
        destination is lost. Returns how many were applied."""
        applied = 0
        while self._senders:  # (an application may make messages: a page that moved on)
            senders = [self.member(k) for k in sorted(self._senders)]
            self._senders.clear()
            for member in senders:
                if member is None or not member.outbox:
                    continue
                keep = []
                for m, at in member.outbox:
                    dst = self.member(m.dst)
                    if (
                        dst is None
                        or not (self.atomic or at <= member.durable)
                        or m.seq != dst.box.applied.get(m.src, 0) + 1
                    ):
                        keep.append((m, at))
                        continue
                    applied += dst.receive(m)
                    self._local.append((m.src, m.dst, m.seq, dst.records))
                member.outbox = keep
        return applied

    def durable_now(self) -> None:
        """The backend made records durable: the applications of local messages are confirmed,
        and (not :attr:`atomic`) the messages they held back are applied here."""
        self.confirm_local()
        if not self.atomic:
            self._senders.update(m.k for m in self.members() if m.outbox)
            self.deliver_local()

    def confirm_local(self) -> None:
        """Confirm to their sources the messages applied by :meth:`deliver_local` whose
        applications are durable now; forget those whose source or destination left."""
        waiting = []
        for src, dst, seq, at in self._local:
            s, d = self.member(src), self.member(dst)
            if s is None or d is None:
                continue  # (their new owners settle it: a resend, dropped if applied)
            if d.durable >= at:
                s.confirm(dst, seq)
            else:
                waiting.append((src, dst, seq, at))
        self._local = waiting

    def deliver(self, m: Message) -> int:
        """A message for a member this process owns: applied (with those it unblocks), or a
        duplicate, or early; returns how many were applied."""
        member = self.member(m.dst)
        if member is None:
            raise KeyError(f"no member {m.dst} here")
        return member.receive(m)

    def note(self, n: Note) -> None:
        part = self.parts[n.dst]
        if n.kind == "s":
            part.schedule([Entry(*e) for e in n.body[0]], n.body[1])
        elif n.kind == "d":
            part.drop(*n.body)
        else:
            raise ValueError(f"a note of kind {n.kind!r}")

    # -- figures ---------------------------------------------------------------------------
    def has_pending(self) -> bool:
        return (
            any(
                p.frontier.counts[PENDING] or p.frontier.counts[IN_FLIGHT]
                for p in self.parts.values()
            )
            or any(m.outbox for m in self.members())
            or bool(self.notes)
        )

    def __len__(self) -> int:
        return sum(p.frontier.counts[PENDING] for p in self.parts.values())

    def figures(self) -> dict[str, float]:
        """The figures of the members this process owns: pages, fetched, closed, visits, G,
        the virtual cash (the pool's included), records made, messages not known delivered,
        and the pages per status."""
        if self._senders:
            self.deliver_local()
        out: dict[str, float] = dict.fromkeys(FIGURES, 0)
        for part in self.parts.values():
            add_figures(out, part.figures_dict())
        if self.pool is not None:
            add_figures(out, self.pool.figures_dict())
        return finish_figures(out)

    def _find(self, key: Hashable) -> tuple[Partition, int] | None:
        for part in self.parts.values():
            i = part.frontier.engine.id_of(key)
            if i is not None:
                return part, i
        return None

    def status_of(self, key: Hashable) -> str | None:
        if self._senders:
            self.deliver_local()
        found = self._find(key)
        return None if found is None else STATUSES[found[0].frontier.status[found[1]]]

    def cash_of(self, key: Hashable) -> float | None:
        if self._senders:
            self.deliver_local()
        found = self._find(key)
        return None if found is None else found[0].frontier.engine.cash_of(found[1])

    def total_cash(self) -> float:
        """The cash of the members this process owns and of their messages not yet sent (the
        whole crawl's when it owns every partition and the pool and nothing is in transit)."""
        if self._senders:
            self.deliver_local()
        total = sum(p.frontier.engine.total_cash() for p in self.parts.values())
        if self.pool is not None:
            total += self.pool.total_cash()
        return total + in_transit(m for member in self.members() for m, _ in member.outbox)

    def top_page(self) -> tuple[str, float] | None:
        best = None
        for part in self.parts.values():
            got = part.frontier.top_page()
            if got is not None and (best is None or got[1] > best[1]):
                best = got
        return best


__all__ = [
    "FIGURES",
    "POOL",
    "Fleet",
    "Mailbox",
    "Member",
    "Message",
    "Note",
    "Partition",
    "Pool",
    "add_figures",
    "finish_figures",
    "in_transit",
    "partition_of",
]
