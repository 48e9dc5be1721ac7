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

import heapq
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any

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
from .frontier import Entry, Lease, Link, Visit, discovery_step, require_payload
from .importance import importance_of_parts
from .journal import Member
from .messages import POOL, DropNote, FileNote, Message, Note, in_transit
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
    docstring). A store makes partitions and the pool this process's (:meth:`adopt`), gives them
    up (:meth:`abandon`), keeps their journals and carries the messages.

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
    ) -> None:
        if config.strategy != "greedy" and config.partitions != 1:
            raise ValueError(f"the {config.strategy} strategy needs a crawl of one partition")
        self.config = config
        self.P = config.partitions
        self.by = config.by
        self.continuous = config.continuous
        #: A continuous crawl that refetches by change: each partition a refresher, their
        #: plans one (:attr:`planner`, the process's budget).
        self.refetch = config.refetches_by_change
        self.planner = Planner()
        self.encode = encode
        self.time_fn = time_fn
        #: ``claim(k)``: the store's, makes partition ``k`` this process's now if it may (a
        #: process alone in its crawl owns every partition it meets), returning it.
        self.claim = claim
        #: Whether the store writes every record of this process's members in one atomic
        #: step: then a message between two of them is applied as soon as it is made (the
        #: record that made it and the one that applied it become durable together); else once
        #: the first is durable (see :meth:`deliver_local`).
        self.atomic = atomic
        self.parts: dict[int, Partition] = {}
        #: The number of each partition's adoption here: a lease's token holds it (a lease of
        #: an earlier ownership is stale).
        self.epochs: dict[int, int] = {}
        self.pool: Pool | None = None
        self.notes: list[Note] = []
        #: The discovery debt of this process's pops (see :func:`~.frontier.discovery_step`).
        self.discovery_debt = 0.0
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
        r = part.frontier.refresher
        if r is not None:  # (one plan for all: its pages' frequencies come with the next)
            r.planner = self.planner
            self.planner.budget += part.refetch_share
            self.planner.wanted = True
        self._adoptions += 1
        self.epochs[part.k] = self._adoptions
        self.parts[part.k] = part
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
            self._mark(k)
            self._volatile.discard(k)
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

    def _mark(self, k: int) -> None:
        """Partition ``k`` changed (or came, or left): its best page and counts are stale."""
        for dirty in self._dirty:
            dirty.add(k)

    def _touched(self, member: Member) -> None:
        """A call changed ``member``: its best page is stale, and it may have messages."""
        if member.k != POOL:
            self._mark(member.k)
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
        batches: dict[int, list[tuple[int, Entry]]] = {}
        bad: set[int] = set()
        for n, e in enumerate(entries):
            k = self.route(e.url, e.key)
            part = self.owner_of(k)
            if part is None and not again and e.key in self._forwarded:
                continue  # (sent there before: filed, or known)
            data, unencodable = self._data(e.payload, e.url)
            if unencodable:
                bad.add(n)
            batches.setdefault(k, []).append((n, e._replace(payload=data)))
        for k, batch in batches.items():
            part = self.owner_of(k)
            if part is None:
                sent = tuple(e for n, e in batch if n not in bad)
                if sent:
                    self.notes.append(FileNote(k, sent, again))
                    self._forwarded_add(e.key for e in sent)
                for n, _e in batch:
                    codes[n] = LOCAL if n in bad else FORWARDED
                continue
            got = part.schedule([e for _, e in batch], again)
            self._touched(part)
            for (n, _e), code in zip(batch, got):
                codes[n] = LOCAL if n in bad and code == NEEDS_PAYLOAD else code
        return codes

    def _forwarded_add(self, keys: Iterable[Hashable]) -> None:
        if len(self._forwarded) > FORWARDED_LIMIT:
            self._forwarded.clear()
        self._forwarded.update(keys)

    def pop(
        self, full_slots: Collection[Hashable] = (), exclude: Collection[int] = ()
    ) -> Lease | None:
        """The best page of the partitions owned but those of ``exclude``: the highest
        priority, then (in a continuous crawl's discovery turn, a page never fetched first)
        the most cash, among the slots with room. Each partition's best page is cached until
        the partition changes: a pop costs O(log P) heap operations, and a peek of each
        partition changed or whose best page's slot is full. A crawl that refetches by change
        pops as :meth:`_pop_refetch` says."""
        if self._senders:
            self.deliver_local()
        if self.config.strategy != "greedy":
            return self._pop_any(exclude)
        if self.refetch:
            return self._pop_refetch(full_slots, exclude)
        share = self.config.discovery if self.continuous else 0.0
        while True:
            discover = bool(share) and self.discovery_debt + share >= 1.0
            best = self._best(full_slots, exclude, discover)
            if best is None:
                return None
            _, part, i = best
            lease = part.take(i)
            self._mark(part.k)
            if lease is None:  # (its request was lost: the page was given up)
                continue
            if share:
                fetched = part.frontier.fetched(i)
                self.discovery_debt = discovery_step(self.discovery_debt, share, fetched)
            return self._leased(part, lease)

    def _leased(self, part: Partition, lease: Lease) -> Lease:
        self._mark(part.k)
        return lease._replace(token=(part.k, self.epochs[part.k], lease.token))

    def _pop_any(self, exclude: Collection[int]) -> Lease | None:
        """A pop of the random or cycle strategy (one partition)."""
        for k, part in self.parts.items():
            if k not in exclude:
                part.pay_out()
                lease = part.frontier.pop()
                if lease is not None:
                    return self._leased(part, lease)
        return None

    def _pop_refetch(
        self, full_slots: Collection[Hashable], exclude: Collection[int]
    ) -> Lease | None:
        """A pop of a crawl that refetches by change (see :mod:`~.refresh`): discovery's share
        for pages never fetched, else the refetch due first of all the partitions (their
        schedules planned together: :meth:`replan`), else the richest page; after a refetch,
        one relay visit in the refetched page's partition."""
        now = self.time_fn()
        planner = self.planner
        if planner.due(sum(p.frontier.engine.n for p in self.parts.values()), now):
            self.replan(now)
        share = self.config.discovery
        best = self._best(full_slots, exclude, True)
        got = pick(
            None if best is None else (best[1], best[2]),
            best is not None and not best[1].frontier.fetched(best[2]),
            bool(share) and self.discovery_debt + share >= 1.0,
            lambda early: self._due(full_slots, exclude, early, now),
            lambda: planner.count_refetch(now),
        )
        if got is None:
            return None
        part, i = got
        lease = part.take(i)
        self._mark(part.k)
        if lease is None:  # (its request was lost: the page was given up)
            return self._pop_refetch(full_slots, exclude)
        fetched = part.frontier.fetched(i)
        if share:
            self.discovery_debt = discovery_step(self.discovery_debt, share, fetched)
        if fetched:
            part.relay_after(i)
            self._touched(part)
        return self._leased(part, lease)

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
        rank = (discover and not part.frontier.fetched(i), priority, cash)
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
            fresh = discover and not fr.fetched(i)
            heads[k] = (part.version, ((fresh, priority, cash), i, fr.slot_of(i)))
            heapq.heappush(heap, (-fresh, -priority, -cash, k, part.version))
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
        if part is None or self.epochs.get(token[0]) != token[1]:
            return None, lease
        self._mark(token[0])
        return part, lease._replace(token=token[2])

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        part, own = self._part_of(lease)
        if part is None:
            return None
        got = part.unchanged(own, self._data(payload, lease.url)[0])
        self._touched(part)
        return got

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
        """The partition's visit. Each link is routed once: a link to a closed page of a
        partition this process owns is no link (or the virtual page's share); a link to a
        page of another partition is :data:`NEEDS_PAYLOAD` unless this process knows its
        request would not be filed there (:data:`DUPLICATE`)."""
        part, own = self._part_of(lease)
        if part is None:
            return None
        data = self._data(payload, lease.url)[0]
        if self.P == 1:  # (every page here)
            visit = part.visit(
                own, links, virtual_weight, importance, data, outcome, changed, modified
            )
            self._touched(part)
            return visit
        kept: list[Link] = []
        routes: list[int] = []
        # Per link: its code; -1: the partition's; None: left out of the visit (DUPLICATE).
        codes: list[int | None] = []
        for link in links:
            k = self.route(link.url, link.key)
            code: int | None = -1
            if k != part.k:
                seen = self.look(k, link.key, link.again)
                if seen is not None and seen[0] and not link.again:
                    # A closed page of another partition this process can see: no page, as a
                    # closed page of this one is (left out, or the virtual page's share).
                    if self.config.closed_links_virtual:
                        virtual_weight += link.weight
                    codes.append(None)
                    continue
                if seen is not None:
                    code = NEEDS_PAYLOAD if seen[1] else DUPLICATE
                elif link.again or link.key not in self._forwarded:
                    code = NEEDS_PAYLOAD
                else:
                    code = DUPLICATE
            kept.append(link)
            routes.append(k)
            codes.append(code)
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
        part, own = self._part_of(lease)
        if part is None:
            return False
        done = part.fail(own, outcome, self._data(payload, lease.url)[0])
        self._touched(part)
        return done

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        part, own = self._part_of(lease)
        if part is None:
            return False
        done = part.forfeit(own, outcome)
        self._touched(part)
        return done

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

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        require_payload(entry)
        part, own = self._part_of(lease)
        if part is None:
            return None
        data, bad = self._data(entry.payload, entry.url)
        if bad:
            part.forfeit(own, ERROR)
            self._touched(part)
            return LOCAL
        code = part.retry(own, entry._replace(payload=data))
        self._touched(part)
        return code

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        require_payload(entry)
        part, own = self._part_of(lease)
        if part is None:
            return None
        data, bad = self._data(entry.payload, entry.url)
        if bad:
            part.forfeit(own, ERROR)
            self._touched(part)
            return LOCAL
        code = part.redirect(own, entry._replace(payload=data), permanent)
        self._touched(part)
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
        """Each partition's report to the pool, if it has anything new (see
        :meth:`Partition.report`), and the pool's payouts: at the transport's pace. A partition
        with no page to pop pays its virtual cash out here (else at its pops), so that the
        pool gets its part. (A crawl of one partition has no pool.)"""
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
        if self._senders:
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
        """The crawl's figures as this process knows them: its pool's last reports of every
        partition (G: the pool's clock), or its figures with one partition."""
        pool = self.pool
        if pool is None:
            return self.figures()
        fs = pool.figures.values()
        return {
            "visits": sum(f.visits for f in fs),
            "G": pool.clock,
            "pages": sum(f.pages for f in fs),
            "fetched": sum(f.fetched for f in fs),
            "pending": sum(f.pending for f in fs),
            "virtual_cash": pool.total_cash(),
        }

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
