"""A continuous crawl's backoff: pages and download slots (hosts) whose fetches keep failing
wait before they are fetched again.

A page whose fetch failed (an outcome not in ``FINAL_OUTCOMES``: a download error, a 5xx) would
be fetched again as soon as its links have paid it enough: a host that never answers would be
asked again and again. So a failed page is *parked*: pending, but no candidate for a pop, for
``base`` seconds, doubled at each failure in a row (up to ``cap``); and a download slot whose
fetches failed :data:`SLOT_FAILURES` times in a row, with no fetch between that answered, is
skipped by every pop for as long (the count of failures past that threshold doubles it). Any
answer resets both. The backoff is not saved: a resumed crawl starts without one.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Hashable

#: Fetches of one download slot that fail in a row before the slot itself backs off (one
#: failing page of a host that answers otherwise is that page's backoff alone).
SLOT_FAILURES = 3


def backoff_delay(failures: int, base: float, cap: float) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1, 2...): ``base`` doubled
    at each one, at most ``cap``."""
    return min(cap, base * 2.0 ** min(failures - 1, 60))


class Backoff:
    """The pages parked and the slots backing off (see the module docstring); ``base`` 0: no
    backoff."""

    def __init__(
        self, base: float = 0.0, cap: float = 600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.base, self.cap, self.clock = base, cap, clock
        self._fails: dict[int, int] = {}  # page -> its failed fetches in a row
        self._parked: list[tuple[float, int]] = []  # (due, page): a heap
        #: The pages parked now.
        self.parked: set[int] = set()
        self._slot_fails: dict[Hashable, int] = {}  # slot -> its failed fetches in a row
        #: slot -> the end of its backoff.
        self.slots: dict[Hashable, float] = {}

    def failed(self, i: int, slot: Hashable) -> float | None:
        """Page ``i``'s fetch failed and it waits again: the failure counts for the page and
        its slot; the time until which the page is parked (None: no backoff)."""
        if not self.base:
            return None
        now = self.clock()
        k = self._fails[i] = self._fails.get(i, 0) + 1
        if now >= self.slots.get(slot, 0.0):  # (failures met while it waits: not again)
            m = self._slot_fails[slot] = self._slot_fails.get(slot, 0) + 1
            if m >= SLOT_FAILURES:
                self.slots[slot] = now + backoff_delay(m - SLOT_FAILURES + 1, self.base, self.cap)
        return now + backoff_delay(k, self.base, self.cap)

    def park(self, i: int, due: float) -> None:
        heapq.heappush(self._parked, (due, i))
        self.parked.add(i)

    def answered(self, i: int, slot: Hashable) -> None:
        """Page ``i``'s host answered: no failure in a row any more."""
        if self._fails:
            self._fails.pop(i, None)
        if self._slot_fails:
            self._slot_fails.pop(slot, None)
            self.slots.pop(slot, None)

    def forget(self, i: int) -> None:
        """Page ``i`` will not be fetched again (or waits no more)."""
        if self._fails:
            self._fails.pop(i, None)
        self.parked.discard(i)

    def wakes(self) -> bool:
        """Whether pages wait for a time to come (parked, or their slot backing off)."""
        return bool(self.parked or self.slots)

    def due(self, now: float) -> list[int]:
        """The parked pages whose wait is over, no longer parked."""
        out = []
        heap, ids = self._parked, self.parked
        while heap and heap[0][0] <= now:
            _due, i = heapq.heappop(heap)
            if i in ids:
                ids.discard(i)
                out.append(i)
        return out

    def blocked(self, now: float) -> set[Hashable]:
        """The slots that back off now."""
        for slot in [s for s, until in self.slots.items() if until <= now]:
            del self.slots[slot]  # (its count stays: a failure now backs it off for longer)
        return set(self.slots)
