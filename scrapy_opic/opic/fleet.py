"""The partitions of a crawl that one process owns (and maybe the crawl's pool), driven as one
frontier: what a crawl's store and the Scrapy scheduler see.

A pop takes the best page of all the partitions owned (priority, then cash; in a continuous
crawl the discovery share is the process's); an outcome goes to the partition of its lease;
pages of partitions this process does not own are filed there by a note
(:class:`~.messages.FileNote`). Messages between members this process owns are applied here at
once (:meth:`Fleet.deliver_local`); the others leave through the store (:meth:`Fleet.outgoing`,
:meth:`Fleet.deliver`). Nothing here does I/O.

Invariant (tested): the crawl's cash, the pages' and virtual pages' of every partition, the
pool's, and the messages not yet applied, is 1.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from .config import CrawlConfig
from .constants import (
    DUPLICATE,
    ERROR,
    FILTERED,
    FORBIDDEN,
    FORWARDED,
    LOCAL,
    NEEDS_PAYLOAD,
    OK,
    PENDING,
    STATUSES,
)
from .contract import Entry, Lease, Link, Visit, discovery_step, require_payload
from .heads import Heads
from .importance import importance_of_parts
from .journal import (
    Failed,
    Forfeited,
    Member,
    Redirected,
    Released,
    Retried,
    Unchanged,
    Visited,
)
from .messages import POOL, DropNote, FileNote, LateNote, Message, Note, in_transit
from .partition import Partition
from .pool import Pool
from .refresh import Planner, pick
from .routing import partition_of

#: Keys a process remembers as sent to their partitions with their requests: the set starts
#: afresh past this size, which only costs some encoding.
FORWARDED_LIMIT = 500_000

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
    "relay_visits",
    "backed_off_pages",
    "backed_off_slots",
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


class Fleet:
    """The partitions of a crawl that one process owns, as one frontier (see the module
    docstring). A store gives it members (:meth:`adopt`, :meth:`abandon`), keeps their journals
    and carries the messages.

    :param config: the crawl's parameters (the ``random`` and ``cycle`` strategies: one
        partition only).
    :param encode: ``encode(payload, url)``, a payload as bytes (``None`` if it cannot be),
        for a crawl whose partitions keep their payloads as bytes (``None``: kept as given).
    """

    def __init__(
        self,
        config: CrawlConfig,
        *,
        encode: Callable[[Any, str | None], bytes | None] | None = None,
        time_fn: Callable[[], float] = time.time,
        claim: Callable[[int], Partition | None] | None = None,
        atomic: bool = True,
        record_leases: bool = False,
    ) -> None:
        if config.strategy != "greedy" and config.partitions != 1:
            raise ValueError(f"the {config.strategy} strategy needs a crawl of one partition")
        self.config = config
        self.P, self.by, self.continuous = config.partitions, config.by, config.continuous
        #: A crawl that refetches by change: its partitions' refetches planned together.
        self.refetch = config.refetches_by_change
        self.planner = Planner()
        self.encode = encode
        self.time_fn = time_fn
        #: ``claim(k)``: the store's, makes partition ``k`` this process's now if it may.
        self.claim = claim
        #: The store writes all the records of this process's members in one atomic step: a
        #: message between two of them is applied at once (else once its record is durable).
        self.atomic = atomic
        #: Pages handed out are records (:meth:`Partition.leased
        #: <.partition.Partition.leased>`): a crawl shared by processes, whose next owner of a
        #: partition holds them in doubt.
        self.record_leases = record_leases
        #: The pages handed out on a record here, and not settled: key -> the number of
        #: records of its partition that must be durable before its request goes out.
        self._lease_records: dict[Hashable, int] = {}
        #: Outcomes of pages in doubt applied here from late notes, and pages whose doubt
        #: ended with none (fetched again).
        self.late_outcomes = 0
        self.doubts_ended = 0
        self.parts: dict[int, Partition] = {}
        #: Each partition's adoption number here, in its leases' tokens (older ones are stale).
        self.epochs: dict[int, int] = {}
        self.pool: Pool | None = None
        self.notes: list[Note] = []
        #: The discovery debt of this process's pops (see :func:`~.frontier.discovery_step`).
        self.discovery_debt = 0.0
        self._adoptions = 0
        #: Keys of pages of other partitions whose request this process sent already; bounded.
        self._forwarded: set[Hashable] = set()
        #: Messages applied here between members this process owns, to confirm to their
        #: sources: ``(src, dst, seq, records of dst once applied)``.
        self._local: list[tuple[int, int, int, int]] = []
        self._senders: set[int] = set()  # members that made messages since deliver_local
        self.heads = Heads()  # the best page of each partition, for pops

    # -- partitions ---------------------------------------------------------------------------
    def route(self, url: str | None, key: Hashable) -> int:
        return partition_of(url, key, self.P, self.by)

    def teleport(self) -> float:
        """The teleport credit every page of the crawl was given, as far as this process
        knows (its pool's, or the most its partitions were told)."""
        if self.pool is not None:
            return self.pool.teleport
        views = [p.frontier.engine.view for p in self.parts.values()]
        return max([0.0, *(v.teleport for v in views if v is not None)])

    def adopt(self, part: Partition) -> None:
        """Partition ``part`` is this process's from now on (leases of an earlier time it was
        are stale: a lease's token holds the adoption's number), on this process's clock."""
        part.time_fn = self.time_fn
        part.records_leases = self.record_leases
        r = part.frontier.refresher
        if r is not None:  # (one plan for all: its pages' frequencies come with the next)
            r.planner = self.planner
            self.planner.budget += part.refetch_share
            self.planner.wanted = True
        self._adoptions += 1
        self.epochs[part.k] = self._adoptions
        self.parts[part.k] = part
        self.heads.joined(part.k)
        self._touched(part)

    def adopt_pool(self, pool: Pool) -> None:
        """The crawl's pool is this process's from now on."""
        self.pool = pool
        if pool.outbox:
            self._senders.add(POOL)

    def abandon(self, k: int) -> Member | None:
        """Member ``k`` is no longer this process's (its leases are stale from now on)."""
        if k == POOL:
            pool, self.pool = self.pool, None
            return pool
        part = self.parts.pop(k, None)
        if part is not None:
            self.epochs.pop(k, None)
            self.heads.forget(k)
        return part

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
        return fr.engine.is_closed(i), fr.schedulable(i, again)

    def _touched(self, member: Member) -> None:
        """A call changed ``member``: its best page is stale, and it may have messages."""
        if member.k != POOL:
            self.heads.mark(member.k)
        if member.outbox:
            self._senders.add(member.k)

    def owner_of(self, k: int) -> Partition | None:
        """The partition ``k`` if this process owns it (or may make it its own now)."""
        part = self.parts.get(k)
        if part is None and self.claim is not None:
            part = self.claim(k)
        return part

    def _data(self, payload: Any, url: str | None) -> tuple[Any, bool]:
        """A payload as its partition keeps it (bytes, if :attr:`encode`), and whether it
        could not be encoded."""
        if payload is None or self.encode is None or isinstance(payload, bytes):
            return payload, False
        data = self.encode(payload, url)
        return data, data is None

    # -- the contract ------------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        if self.P == 1 and self.encode is None and 0 in self.parts:  # (every page here)
            only = self.parts[0]
            codes = only.schedule(entries, again)
            self._touched(only)
            return codes
        codes = [DUPLICATE] * len(entries)
        bad: set[int] = set()  # entries whose payload cannot be shared: LOCAL
        for k, batch in self._batches(entries, again, bad).items():
            part = self.owner_of(k)
            if part is None:
                got = _file_elsewhere(self, k, batch, again, bad)
            else:
                got = part.schedule([e for _, e in batch], again)
                self._touched(part)
            for (n, _e), code in zip(batch, got):
                codes[n] = LOCAL if n in bad and code == NEEDS_PAYLOAD else code
        return codes

    def _batches(
        self, entries: Sequence[Entry], again: bool, bad: set[int]
    ) -> dict[int, list[tuple[int, Entry]]]:
        """The entries by partition, numbered, their payloads as the partitions keep them (the
        numbers of those that cannot be kept added to ``bad``), less those sent to a partition
        of another process before (filed there, or known)."""
        batches: dict[int, list[tuple[int, Entry]]] = {}
        for n, e in enumerate(entries):
            k = self.route(e.url, e.key)
            if not again and e.key in self._forwarded and self.owner_of(k) is None:
                continue
            data, unencodable = self._data(e.payload, e.url)
            if unencodable:
                bad.add(n)
            batches.setdefault(k, []).append((n, e._replace(payload=data)))
        return batches

    def _forwarded_add(self, keys: Iterable[Hashable]) -> None:
        if len(self._forwarded) > FORWARDED_LIMIT:
            self._forwarded.clear()
        self._forwarded.update(keys)

    def pop(
        self, full_slots: Collection[Hashable] = (), exclude: Collection[int] = ()
    ) -> Lease | None:
        """The best page of the partitions owned but those of ``exclude``: the highest
        priority, then (in a continuous crawl's discovery turn, a page never fetched first)
        the fewest turns of its slot and the most votes in the web order, then the most cash,
        among the slots with room (:class:`~.heads.Heads`: O(log P) heap
        operations). A crawl that refetches by change pops as :meth:`_choose` says, and after
        a refetch makes one relay visit in the refetched page's partition."""
        self.deliver_local()
        if self.config.strategy != "greedy":
            return self._pop_any(exclude)
        share = self.config.discovery if self.continuous else 0.0
        while True:
            got = self._choose(
                full_slots, exclude, bool(share) and self.discovery_debt + share >= 1
            )
            if got is None:
                return None
            part, i = got
            lease = part.take(i)
            self.heads.mark(part.k)
            if lease is None:  # (its request was lost: the page was given up)
                continue
            leased = self._leased(part, lease)
            fetched = part.frontier.fetched(i)
            if share:
                self.discovery_debt = discovery_step(self.discovery_debt, share, fetched)
            if self.refetch and fetched:
                part.relay_after(i)
                self._touched(part)
            return leased

    def _choose(
        self, full_slots: Collection[Hashable], exclude: Collection[int], turn: bool
    ) -> tuple[Partition, int] | None:
        """The page to pop, ``turn`` telling whether it is discovery's. A crawl that refetches
        by change (see :mod:`~.refresh`): discovery's share for pages never fetched, else the
        refetch due first of all the partitions (their schedules planned together:
        :meth:`replan`), else the richest page."""
        if not self.refetch:
            best = self.heads.best(self.parts, self.pool, full_slots, exclude, turn)
            return None if best is None else (best[1], best[2])
        now = self.time_fn()
        planner = self.planner
        if planner.due(sum(p.frontier.engine.n for p in self.parts.values()), now):
            self.replan(now)
        best = self.heads.best(self.parts, self.pool, full_slots, exclude, True)
        return pick(
            None if best is None else (best[1], best[2]),
            best is not None and not best[1].frontier.fetched(best[2]),
            turn,
            lambda early: self._due(full_slots, exclude, early, now),
            lambda: planner.count_refetch(now),
        )

    def _leased(self, part: Partition, lease: Lease) -> Lease:
        self.heads.mark(part.k)
        if self.record_leases:
            self._lease_records[lease.key] = part.leased(lease)
            self._touched(part)
        return lease._replace(token=(part.k, self.epochs[part.k], lease.token))

    def durable(self, lease: Lease) -> bool | None:
        """Whether the request of ``lease`` may go out as far as the records go: True once the
        record of its handing out is durable (or if there is none), None while it is not yet,
        False if the lease is stale."""
        k = self.holder(lease)
        if k is None:
            return False
        n = self._lease_records.get(lease.key)
        return n is None or self.parts[k].durable >= n or None

    def _pop_any(self, exclude: Collection[int]) -> Lease | None:
        """A pop of the random or cycle strategy (one partition)."""
        for k, part in self.parts.items():
            if k not in exclude:
                part.pay_out()
                lease = part.frontier.pop()
                if lease is not None:
                    return self._leased(part, lease)
        return None

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

    def holder(self, lease: Lease) -> int | None:
        """The partition of ``lease`` if this process has owned it since the lease was handed
        out (else None: the lease is stale)."""
        token = lease.token
        if not isinstance(token, tuple) or len(token) != 3:
            return None
        k = token[0]
        return k if k in self.parts and self.epochs.get(k) == token[1] else None

    def _part_of(self, lease: Lease) -> tuple[Partition | None, Lease]:
        k = self.holder(lease)
        if k is None:
            return None, lease
        if self._lease_records:
            self._lease_records.pop(lease.key, None)
        self.heads.mark(k)
        return self.parts[k], lease._replace(token=lease.token[2])

    def _settle(
        self,
        lease: Lease,
        stale: Any,
        act: Callable[[Partition, Lease], Any],
        late: Callable[[float], NamedTuple] | None = None,
    ) -> Any:
        """``act(partition, its lease)`` for the partition of ``lease``; ``stale`` if the lease
        is not of a partition this process owns since it was handed out (then ``late(now)``,
        the outcome's record, goes to the partition: see :meth:`_late`)."""
        part, own = self._part_of(lease)
        if part is None:
            self._late(lease, late)
            return stale
        got = act(part, own)
        self._touched(part)
        return got

    def _late(self, lease: Lease, late: Callable[[float], NamedTuple] | None) -> None:
        """An outcome of a page handed out on a record, whose partition this process lost
        since: its record to the partition in a :class:`~.messages.LateNote` (its next owner
        holds the page in doubt, waiting for it)."""
        if self._lease_records.pop(lease.key, None) is not None and late is not None:
            self.notes.append(LateNote(lease.token[0], (late(self.time_fn()),)))

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        data = self._data(payload, lease.url)[0]
        return self._settle(
            lease,
            None,
            lambda part, own: part.unchanged(own, data),
            lambda at: Unchanged(at, lease.key, data),
        )

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
        """The partition's visit, each link routed once (:func:`_route`)."""
        part, own = self._part_of(lease)
        data = self._data(payload, lease.url)[0]
        if part is None:
            self._late(
                lease,
                lambda at: Visited(
                    at, lease.key, tuple(links), virtual_weight, data, outcome, changed, modified
                ),
            )
            return None
        if self.P == 1:  # (every page here)
            visit = part.visit(
                own, links, virtual_weight, importance, data, outcome, changed, modified
            )
            self._touched(part)
            return visit
        kept, routes, codes, virtual_weight = _route(self, part.k, links, virtual_weight)
        visit = part.visit(
            own, kept, virtual_weight, importance, data, outcome, changed, modified, routes=routes
        )
        self._touched(part)
        if visit is None:
            return None
        theirs = iter(visit.codes)
        out = []
        for code in codes:
            if code is None:
                out.append(DUPLICATE)
                continue
            got = next(theirs)
            # (A link routed here that the partition sent on leads to a page that moved away
            # for good: its request is of no use.)
            out.append(code if code != -1 else DUPLICATE if got == FORWARDED else got)
        return Visit(out, visit.importance)

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        data = self._data(payload, lease.url)[0]
        return self._settle(
            lease,
            False,
            lambda part, own: part.fail(own, outcome, data),
            lambda at: Failed(at, lease.key, outcome, data),
        )

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        return self._settle(
            lease,
            False,
            lambda part, own: part.forfeit(own, outcome),
            lambda at: Forfeited(at, lease.key, outcome),
        )

    def forget_lies(self, slot: Hashable, *, unchanged: bool = True, dated: bool = False) -> int:
        """:meth:`Partition.forget_lies <.partition.Partition.forget_lies>` in every partition
        this process owns (a host's pages are in one, when partitioned by host)."""
        n = 0
        for part in self.parts.values():
            if got := part.forget_lies(slot, unchanged=unchanged, dated=dated):
                n += got
                self._touched(part)
        return n

    def drop(self, key: Hashable, outcome: int = FILTERED, url: str | None = None) -> bool:
        if url is None and self.by == "host":
            # (A key alone: its page is in at most one partition this process owns.)
            for p in self.parts.values():
                if p.drop(key, outcome):
                    self._touched(p)
                    return True
            return False
        k = self.route(url, key)
        part = self.owner_of(k)
        if part is None:
            self.notes.append(DropNote(k, key, outcome))
            return True
        done = part.drop(key, outcome)
        self._touched(part)
        return done

    def _refile(
        self,
        lease: Lease,
        entry: Entry,
        act: Callable[[Partition, Lease, Entry], int | None],
        late: Callable[[float, Entry], NamedTuple],
    ) -> int | None:
        """A retry's or redirect's ``act`` with ``entry``'s payload as its partition keeps it;
        :data:`LOCAL` (the page forfeited) if it cannot be kept."""
        require_payload(entry)
        data, bad = self._data(entry.payload, entry.url)
        if bad:

            def forfeit(part: Partition, own: Lease) -> int:
                part.forfeit(own, ERROR)
                return LOCAL

            return self._settle(lease, None, forfeit, lambda at: Forfeited(at, lease.key, ERROR))
        entry = entry._replace(payload=data)
        return self._settle(
            lease, None, lambda part, own: act(part, own, entry), lambda at: late(at, entry)
        )

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        return self._refile(
            lease,
            entry,
            lambda part, own, e: part.retry(own, e),
            lambda at, e: Retried(at, lease.key, e),
        )

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        code = self._refile(
            lease,
            entry,
            lambda part, own, e: part.redirect(own, e, permanent),
            lambda at, e: Redirected(at, lease.key, e, permanent),
        )
        if code == FORWARDED:
            seen = self.look(self.route(entry.url, entry.key), entry.key, False)
            code = DUPLICATE if seen is not None and not seen[1] else FORWARDED
        return code

    def release(self, leases: Iterable[Lease]) -> int:
        n = 0
        for lease in leases:
            part, own = self._part_of(lease)
            if part is not None:
                n += part.release([own])
            else:
                self._late(lease, functools.partial(Released, key=lease.key))
        return n

    def end_doubts(self, ks: Iterable[int]) -> int:
        """The pages in doubt of partitions ``ks`` pending again
        (:meth:`Partition.end_doubt <.partition.Partition.end_doubt>`); how many."""
        n = 0
        for k in ks:
            part = self.parts.get(k)
            if part is not None and part.doubt:
                n += part.end_doubt()
                self._touched(part)
        self.doubts_ended += n
        return n

    # -- messages ------------------------------------------------------------------------------
    def members(self) -> list[Member]:
        out: list[Member] = list(self.parts.values())
        if self.pool is not None:
            out.append(self.pool)
        return out

    def member(self, k: int) -> Member | None:
        return self.pool if k == POOL else self.parts.get(k)

    def reports(self) -> None:
        """Each partition's report to the pool, if it has anything new, and the pool's
        payouts, at the transport's pace; a partition with no page to pop pays its virtual
        cash out here (else at its pops). (A crawl of one partition has no pool.)"""
        if self.P == 1:
            return
        for part in self.parts.values():
            if not part.frontier.counts[PENDING]:
                part.pay_out()
            part.report()
            self._touched(part)
        self.deliver_local()
        if self.pool is not None:
            self.pool.pay()
            self._touched(self.pool)
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
        """Apply the messages between members this process owns without the transport, each
        that may be (its source's record durable, or :attr:`atomic`) and is the next of its
        pair; its source keeps it until the application is durable (:meth:`confirm_local`).
        Returns how many were applied."""
        applied = 0
        while self._senders:  # (an application may make messages: a page that moved on)
            senders = [self.member(k) for k in sorted(self._senders)]
            self._senders.clear()
            for member in senders:
                if member is None:
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
                    self._touched(dst)
                    self._local.append((m.src, m.dst, m.seq, dst.records))
                member.outbox = keep
        return applied

    def durable_now(self) -> None:
        """The store made records durable: the applications of local messages are confirmed,
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
        n = member.receive(m)
        self._touched(member)
        return n

    def note(self, n: Note) -> None:
        part = self.parts[n.dst]
        if isinstance(n, FileNote):
            part.schedule(n.entries, n.again)
        elif isinstance(n, LateNote):
            self.late_outcomes += part.late(n.records)
        else:
            part.drop(n.key, n.outcome)
        self._touched(part)

    def destinations(self) -> set[int]:
        """The members this process's messages and notes go to."""
        out = {n.dst for n in self.notes}
        for member in self.members():
            out.update(m.dst for m, _ in member.outbox)
        return out

    def applied_here(self) -> int:
        """Messages applied here between members this process owns, whose confirmation to
        their sources waits for the store to make the application durable."""
        return len(self._local)

    def in_motion(self) -> bool:
        """Messages or notes of this process on their way, or applied here and not confirmed."""
        return bool(self.notes or self._local or any(m.outbox for m in self.members()))

    # -- figures ---------------------------------------------------------------------------
    def has_pending(self) -> bool:
        """Pages pending here, or messages and notes still to leave (pages in flight here are
        Scrapy's to finish)."""
        return (
            any(p.frontier.counts[PENDING] for p in self.parts.values())
            or any(m.outbox for m in self.members())
            or bool(self.notes)
        )

    def __len__(self) -> int:
        return sum(p.frontier.counts[PENDING] for p in self.parts.values())

    def add_figures(self, out: dict[str, float]) -> None:
        """Add the figures of the members this process owns to ``out``."""
        self.deliver_local()
        for member in self.members():
            add_figures(out, member.figures_dict())  # type: ignore[attr-defined]

    def figures(self) -> dict[str, float]:
        """The figures of the members this process owns: pages, fetched, closed, visits, G,
        the virtual cash (the pool's included), records made, messages not known delivered,
        the pages per status; the refetch plans; one partition's engine figures."""
        out: dict[str, float] = dict.fromkeys(FIGURES, 0)
        self.add_figures(out)
        if self.refetch:
            out["refetch_budget"] = self.planner.budget
            out["refetch_plans"] = self.planner.plans
        if len(self.parts) == 1:
            (part,) = self.parts.values()
            out["cash_at_visit_x_n"] = part.frontier.engine.stats()["cash_at_visit_x_n"]
        return finish_figures(out)

    def known_figures(self) -> dict[str, float]:
        """The crawl's figures as this process knows them: its pool's (:meth:`Pool.known_figures
        <.pool.Pool.known_figures>`), or its own with one partition."""
        return self.figures() if self.pool is None else self.pool.known_figures()

    def _find(self, key: Hashable) -> tuple[Partition, int] | None:
        for part in self.parts.values():
            i = part.frontier.engine.id_of(key)
            if i is not None:
                return part, i
        return None

    def status_of(self, key: Hashable) -> str | None:
        self.deliver_local()
        found = self._find(key)
        return None if found is None else STATUSES[found[0].frontier.status[found[1]]]

    def cash_of(self, key: Hashable) -> float | None:
        self.deliver_local()
        found = self._find(key)
        return None if found is None else found[0].frontier.engine.cash_of(found[1])

    def total_cash(self) -> float:
        """The cash of the members this process owns and of their messages not yet sent (the
        whole crawl's when it owns every partition and the pool and nothing is in transit)."""
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


def _route(
    fleet: Fleet, k: int, links: Sequence[Link], virtual_weight: float
) -> tuple[list[Link], list[int], list[int | None], float]:
    """The links of a page of partition ``k`` of ``fleet``, each routed once: those it pays,
    their partitions, a code per link (-1: the partition's to give; None: a link to a closed
    page of a partition this process owns, no link as a closed page of ``k`` is none; else
    :data:`NEEDS_PAYLOAD` unless this process knows the page's request would not be filed
    there), and the virtual weight with those (``closed_links_virtual``)."""
    kept: list[Link] = []
    routes: list[int] = []
    codes: list[int | None] = []
    for link in links:
        to = fleet.route(link.url, link.key)
        code: int | None = -1
        if to != k:
            seen = fleet.look(to, link.key, link.again)
            if seen is None:
                filed = link.again or link.key not in fleet._forwarded
            elif seen[0] and not link.again:
                if fleet.config.closed_links_virtual:
                    virtual_weight += link.weight
                codes.append(None)
                continue
            else:
                filed = seen[1]
            code = NEEDS_PAYLOAD if filed else DUPLICATE
        kept.append(link)
        routes.append(to)
        codes.append(code)
    return kept, routes, codes, virtual_weight


def _file_elsewhere(
    fleet: Fleet, k: int, batch: list[tuple[int, Entry]], again: bool, bad: set[int]
) -> list[int]:
    """File the numbered entries ``batch`` of partition ``k``, another process's, there by a
    note, but those whose payload cannot be shared (``bad``); their codes as a partition here
    gives them: :data:`FORWARDED`, or :data:`NEEDS_PAYLOAD` for those not sent."""
    sent = tuple(e for n, e in batch if n not in bad)
    if sent:
        fleet.notes.append(FileNote(k, sent, again))
        fleet._forwarded_add(e.key for e in sent)
    return [NEEDS_PAYLOAD if n in bad else FORWARDED for n, _e in batch]
