"""The best page of each partition a process owns, kept for its pops.

A pop of a crawl over partitions takes the best page of all of them (priority, then the fewest
turns of its download slot and the most votes in the web order, then cash; in a continuous
crawl's discovery turn, a page never fetched first).
Peeking every partition at every pop would cost O(P); :class:`Heads` caches each partition's
best page with the partition's version, in a heap of their ranks, and peeks again only a
partition that changed since (:meth:`Heads.mark`), or whose best page's slot is full, or whose
candidates change with time alone (pages parked for a retry, slots backing off: *volatile*,
peeked at every pop). A pop then costs O(log P) heap operations.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Hashable, Mapping
from typing import Any

from .constants import PENDING
from .partition import Partition
from .pool import Pool
from .selection import Pick

#: ``(rank, partition, page)``: a page a pop may take, ``rank`` as :meth:`Heads.best` orders:
#: ``(never fetched in a discovery turn, priority, -turns, votes, cash)`` (:func:`_rank`).
Rank = tuple[bool, int, float, float, float]
Best = tuple[Rank, Partition, int]
_GONE = (None, None)  # (no cached head: no version matches it)


class Heads:
    """The cached best page of each partition (see the module docstring). Before a partition
    is peeked, it pays its virtual page's share out: by the crawl's counts of live pages and of
    pages never fetched when this process owns every partition and its pool knows no other
    (exact), else by its view of the others."""

    def __init__(self) -> None:
        # Per ``discover``: partition -> (its version, (rank, page, slot) or None), and a heap
        # of the ranks (stale entries dropped as they surface).
        self._heads: tuple[dict, dict] = ({}, {})
        self._heap: tuple[list, list] = ([], [])
        self._dirty: tuple[set[int], set[int], set[int]] = (set(), set(), set())  # heads, counts
        self._volatile: set[int] = set()
        # The live pages and pages never fetched of each partition owned, and their sums.
        self._count_of: dict[int, tuple[int, int]] = {}
        self._totals = [0, 0]
        self._exact: tuple[Any, bool] = (None, False)
        self._changes = 0  # partitions that came or left

    def mark(self, k: int) -> None:
        """Partition ``k`` changed (or came, or left): its best page and counts are stale."""
        for dirty in self._dirty:
            dirty.add(k)

    def joined(self, k: int) -> None:
        """Partition ``k`` came to this process."""
        self.mark(k)
        self._changes += 1

    def forget(self, k: int) -> None:
        """Partition ``k`` left this process."""
        self.mark(k)
        self._volatile.discard(k)
        self._changes += 1

    def best(
        self,
        parts: Mapping[int, Partition],
        pool: Pool | None,
        full_slots: Collection[Hashable],
        exclude: Collection[int],
        discover: bool,
    ) -> Best | None:
        """The best page of ``parts`` but those of ``exclude`` among the slots not in
        ``full_slots``, left pending; with ``discover``, a page never fetched ranks first."""
        self._refresh(parts, pool, discover)
        heads, heap = self._heads[discover], self._heap[discover]
        best = self._peek_volatile(parts, full_slots, exclude, discover)
        aside = []
        while heap:
            entry = heap[0]
            k, version = entry[-2], entry[-1]
            owner = parts.get(k)
            cached = heads.get(k, _GONE)
            if owner is None or cached[0] != version or owner.version != version:
                heapq.heappop(heap)  # (stale: the partition changed, or left)
                continue
            rank = _unentry(entry)
            if best is not None and rank <= best[0]:
                break  # (no partition's best can beat it)
            aside.append(heapq.heappop(heap))
            if k in exclude:
                continue
            _rank, i, slot = cached[1]
            if slot in full_slots:  # its best page waits: its next best?
                best = _better(best, owner, owner.peek(full_slots, discover), discover)
            elif best is None or rank > best[0]:
                best = (rank, owner, i)
        for entry in aside:
            heapq.heappush(heap, entry)
        return best

    def _peek_volatile(
        self,
        parts: Mapping[int, Partition],
        full_slots: Collection[Hashable],
        exclude: Collection[int],
        discover: bool,
    ) -> Best | None:
        """The best page of the volatile partitions, peeked every pop (cached once none waits)."""
        best: Best | None = None
        for k in list(self._volatile):
            part = parts[k]
            if k not in exclude:
                best = _better(best, part, part.peek(full_slots, discover), discover)
            if not part.frontier.wakes():
                self._volatile.discard(k)
                self.mark(k)
        return best

    def _refresh(self, parts: Mapping[int, Partition], pool: Pool | None, discover: bool) -> None:
        """Peek each partition changed since, after its payout."""
        dirty = self._dirty[discover]
        if not dirty:
            return
        heads, heap = self._heads[discover], self._heap[discover]
        exact = self._update_counts(parts, pool)
        changed = sorted(dirty)
        dirty.clear()
        for k in changed:
            part = parts.get(k)
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
            rank = _rank(part, got, discover)
            heads[k] = (part.version, (rank, got.page, fr.slot_of(got.page)))
            heapq.heappush(heap, _entry(rank, k, part.version))
        _trim(heap, heads, parts)

    def _update_counts(self, parts: Mapping[int, Partition], pool: Pool | None) -> bool:
        """Keep the crawl's live pages and pages never fetched summed over the partitions
        (exact when this process owns them all and its pool knows no other); whether exact."""
        if pool is None:
            return False
        key = (id(pool), len(pool.figures), self._changes)
        if self._exact[0] != key:
            self._exact = (key, set(pool.figures) <= set(parts))
            self._dirty[2].update(parts)
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
            part = parts.get(k)
            if part is not None:
                e = part.frontier.engine
                count_of[k] = (e.n - e.n_closed, e.n_unfetched)
                totals[0] += count_of[k][0]
                totals[1] += count_of[k][1]
        dirty.clear()
        return True


def _trim(heap: list, heads: dict, parts: Mapping[int, Partition]) -> None:
    """Rebuild ``heap`` from the cached ``heads`` once most of its entries are stale."""
    if len(heap) > 4 * len(parts) + 64:
        heap[:] = [
            _entry(h[0], k, v) for k, (v, h) in heads.items() if h is not None and k in parts
        ]
        heapq.heapify(heap)


def _entry(rank: Rank, k: int, version: int) -> tuple:
    """A heap entry of partition ``k``'s best page (a min-heap: the rank negated)."""
    fresh, priority, turns, votes, cash = rank
    return (-fresh, -priority, -turns, -votes, -cash, k, version)


def _unentry(entry: tuple) -> Rank:
    return (bool(-entry[0]), -entry[1], -entry[2], -entry[3], -entry[4])


def _rank(part: Partition, got: Pick, discover: bool) -> Rank:
    """The rank of a partition's pick (its turns and votes are 0 when the pop takes no turns:
    a continuous crawl's pop outside its discovery turns, or ``OPIC_ORDER = "cash"``)."""
    fresh = discover and not part.frontier.fetched(got.page)
    return (fresh, got.priority, -got.turns, got.votes, got.cash)


def _better(best: Best | None, part: Partition, got: Pick | None, discover: bool) -> Best | None:
    if got is None:
        return best
    rank = _rank(part, got, discover)
    return (rank, part, got.page) if best is None or rank > best[0] else best
