"""Which page to refetch next, given each page's target refetch frequency: earliest due first.

Page ``i`` with target frequency ``f_i`` (refetches per time unit, from
:func:`~scrapy_opic.opic.freshness.optimal_allocation`) fetched last at ``last_i`` is *due* at
``last_i + 1 / f_i``; the schedule hands out the page due first (``f_i = 0``: never). A due time
does not move with the clock, so the order is a heap (with ``heapq``: entries made stale by a
re-plan or a fetch are skipped at pop and purged once they outnumber the live ones: O(log n)
amortised per operation, at most 2 entries per page). When ``sum f`` equals the refetch rate
the crawl can spend, each page is refetched about every ``1 / f_i``; when it spends less, every
page is late in proportion and the order stays the same.

Integration with the frontier (the design recommended for issue 26)
-------------------------------------------------------------------
*State per page*, beside the engine's: the change observations of
:class:`~scrapy_opic.opic.change.ChangeRates` (9 floats), the validators and content signature
of its last full response, its kept out-links (already storable), and here ``last``, ``freq``
and ``due`` (3 floats).

*Pops.* :func:`~scrapy_opic.opic.frontier.discovery_step` keeps splitting the pops: a pop owed
to discovery takes the richest page never fetched, exactly as today; every other pop asks this
schedule (``pop``) for the page due first among fetched pages, filtered by the download slots
that have room (a heap per slot plus a heap of slot heads, as
:class:`~scrapy_opic.opic.selection.SlottedGreedySelection` does for cash, when politeness
matters). With no discovery left, every pop is a refetch.

*Outcomes.* A 200 or a 304 is a visit of the engine: the 200 pays over its new links, the 304
over the links kept from the last parsed visit (a 304 for a page with none pays the virtual
page, as a dangling page does). Both call ``ChangeRates.observe`` (a 304 or an unchanged
signature: unchanged) and ``fetched(i, now)`` here. A failure calls ``fetched`` too (the
next attempt waits a period); a closed page is ``discard``-ed.

*Cash keeps moving.* OPIC needs every page's cash to flow over its links, but refetches are now
uneven: a static page is refetched rarely and would sit on its cash, starving its children's
estimates (the error factor ``1/G`` grows). So the Greedy selection over fetched pages stays
as it is, but a page it pops that the schedule does not want is *settled* instead of fetched:
a visit with no download, paid over its kept links (``engine.visit(i, kept_links)``; no I/O,
no request). The frontier settles up to ``k`` such pages per fetch (``k = 1``: the cash flows
at least as often as in today's crawl, so the importance converges no slower); a page with no
kept links is not settled (it has nothing to pay over) and waits for its refetch. The Greedy
heaps, the payouts and the fixpoint are untouched: only what a pop of a fetched page *does*
changes.

*Re-plans.* Every so often (``N / 20`` fetches, or a wall-clock period), the frontier reads the
rates (``ChangeRates.rates``, vectorised) and the importance (``engine.importance()``), calls
``optimal_allocation(w, rates, budget, floor)`` with the refetch budget measured over the last
period (fetches per second not owed to discovery), and ``plan``-s the result here. Every rule
stays in ``scrapy_opic/opic`` once: the Redis backend calls the same functions.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

#: A page's place in the schedule: waiting (in the heap if its due time is finite), popped
#: (being fetched), discarded.
WAITING, POPPED, DISCARDED = 0, 1, 2


class RefetchSchedule:
    """Earliest-due-first refetch order over pages ``0..n-1`` (see the module docstring)."""

    def __init__(self) -> None:
        self.freq = np.zeros(0)
        #: The start of each page's current period: its last fetch, or the due time it was
        #: fetched ahead of (nan: never fetched).
        self.last = np.zeros(0)
        self.due = np.zeros(0)
        self.state = np.zeros(0, np.uint8)
        self._heap: list[tuple[float, int]] = []
        self._live = 0  # valid heap entries: waiting pages with a finite due time

    def grow(self, n: int) -> None:
        """Room for pages ``0..n-1``; new pages are not scheduled (never fetched, ``f = 0``)."""
        pad = n - len(self.freq)
        if pad > 0:
            self.freq = np.concatenate([self.freq, np.zeros(pad)])
            self.last = np.concatenate([self.last, np.full(pad, np.nan)])
            self.due = np.concatenate([self.due, np.full(pad, np.inf)])
            self.state = np.concatenate([self.state, np.zeros(pad, np.uint8)])

    def __len__(self) -> int:
        return self._live

    def plan(
        self,
        freq: np.ndarray,
        ids: np.ndarray | Sequence[int] | None = None,
        now: float | None = None,
    ) -> None:
        """New target frequencies (for ``ids``, all pages by default). Without ``now``, due
        times follow from each page's last fetch. With ``now``, a page that was scheduled keeps
        its phase: the time left until its due time is scaled by ``f_old / f_new`` (so a page
        whose frequency rises is not due at once, far in the past, with every other such page:
        a re-plan does not bunch fetches). A page never fetched is not scheduled here
        (discovery's). Rebuilds the heap: O(n)."""
        ids = np.arange(len(freq)) if ids is None else np.asarray(ids, dtype=np.int64)
        self.grow(int(ids.max()) + 1 if ids.size else 0)
        old = self.freq.copy()
        self.freq[ids] = freq
        with np.errstate(divide="ignore", invalid="ignore"):
            due = self.last + 1.0 / self.freq
            if now is not None:
                kept = np.isfinite(self.due) & (self.freq > 0)
                scaled = now + (self.due - now) * old / self.freq
                due = np.where(kept, scaled, due)
        self.due = np.where(np.isnan(due), np.inf, due)
        live = np.flatnonzero((self.state == WAITING) & np.isfinite(self.due))
        self._heap = list(zip(self.due[live].tolist(), live.tolist()))
        heapq.heapify(self._heap)
        self._live = len(self._heap)

    def fetched(self, i: int, now: float) -> None:
        """Page ``i`` was fetched (or its fetch ended) at ``now``: due again ``1/f_i`` later,
        or ``1/f_i`` after the due time it was popped at if that is later (popped early, when
        no page was due yet: else the fastest pages, popped early most often, would drift
        ahead of their frequency)."""
        self.grow(i + 1)
        popped = self.state[i] == POPPED and self.due[i] > now
        self.last[i] = float(self.due[i]) if popped else now
        self._wait(i)

    def push(self, i: int) -> None:
        """Page ``i`` (popped, not fetched) waits again with its due time."""
        if self.state[i] == POPPED:
            self._wait(i)

    def _wait(self, i: int) -> None:
        if self._entry(i):
            self._live -= 1  # (its heap entry goes stale)
        f, last = self.freq[i], self.last[i]
        self.due[i] = last + 1.0 / f if f > 0 and not np.isnan(last) else np.inf
        self.state[i] = WAITING
        if self._entry(i):
            heapq.heappush(self._heap, (float(self.due[i]), i))
            self._live += 1
            if len(self._heap) > 2 * self._live + 64:
                self._heap = [e for e in self._heap if self._valid(e)]
                heapq.heapify(self._heap)

    def _entry(self, i: int) -> bool:
        """Whether page ``i`` has a valid heap entry."""
        return self.state[i] == WAITING and self.due[i] < np.inf

    def _valid(self, entry: tuple[float, int]) -> bool:
        due, i = entry
        return self.state[i] == WAITING and self.due[i] == due

    def discard(self, i: int) -> None:
        """Page ``i`` is no longer refetched (closed; :meth:`fetched` opens it again)."""
        if i < len(self.state):
            if self._entry(i):
                self._live -= 1
            self.state[i] = DISCARDED

    def peek(self) -> tuple[int, float] | None:
        """The page due first and its due time (None if no page is scheduled)."""
        heap = self._heap
        while heap and not self._valid(heap[0]):
            heapq.heappop(heap)
        return (heap[0][1], heap[0][0]) if heap else None

    def pop(self) -> int | None:
        """Take the page due first out of the schedule (until :meth:`fetched` or :meth:`push`)."""
        top = self.peek()
        if top is None:
            return None
        heapq.heappop(self._heap)
        self.state[top[0]] = POPPED
        self._live -= 1
        return top[0]


__all__ = ["DISCARDED", "POPPED", "WAITING", "RefetchSchedule"]
