"""Which page to refetch next, given each page's target refetch frequency: earliest due first.

Page ``i`` with target frequency ``f_i`` (refetches per time unit, from
:func:`~scrapy_opic.opic.freshness.optimal_allocation`) whose current period started at
``last_i`` (its last fetch) is *due* at ``last_i + 1 / f_i``; the schedule hands out the page
due first (``f_i = 0``: never). A due time does not move with the clock, so the order is a heap
(``heapq``; entries made stale by a re-plan or a fetch are skipped at pop, and purged once they
outnumber the live ones: O(log n) amortised per operation). When ``sum f`` equals the rate of
refetches the crawl can spend, each page is refetched every ``1 / f_i`` on average (a page
popped early keeps its grid); when the crawl spends less, every page is late alike.

A crawl uses it through :class:`~scrapy_opic.opic.refresh.Refresher`, which plans the
frequencies and feeds the schedule the crawl's events.
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
        ahead of their frequency). A page popped with no due time (never planned) starts its
        period now."""
        self.grow(i + 1)
        popped = self.state[i] == POPPED and now < self.due[i] < np.inf
        self.last[i] = float(self.due[i]) if popped else now
        self._wait(i)

    def push(self, i: int) -> None:
        """Page ``i`` (popped, not fetched) waits again with the due time it had (the one a
        re-plan that kept its phase gave it, not one recomputed from its last fetch)."""
        if self.state[i] != POPPED:
            return
        self.state[i] = WAITING
        if self._entry(i):
            heapq.heappush(self._heap, (float(self.due[i]), i))
            self._live += 1

    def take(self, i: int) -> None:
        """Page ``i``, if waiting, is out of the schedule until :meth:`fetched` or :meth:`push`
        (as if :meth:`pop` had handed it out)."""
        if i < len(self.state) and self.state[i] == WAITING:
            if self._entry(i):
                self._live -= 1  # (its heap entry goes stale)
            self.state[i] = POPPED

    def expedite(self, i: int, now: float) -> None:
        """Page ``i``, waiting, is due at ``now`` if it was due later (its next period starts
        from its fetch then)."""
        if i < len(self.state) and self._entry(i) and self.due[i] > now:
            self.due[i] = now  # (its old heap entry goes stale: its due time changed)
            heapq.heappush(self._heap, (now, i))

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
