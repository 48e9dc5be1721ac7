"""Page selection strategies (paper, section 3.1): which candidate page to visit next.

A *candidate* is a page that may be visited now (in a crawl: a page with a pending request that is
not in flight). Every strategy has the same small interface:

``push(i)``
    make ``i`` a candidate (no-op if it already is);
``discard(i)``
    stop considering ``i`` (no-op if it is not a candidate);
``pop()``
    remove and return the next candidate, or ``None`` when there is none;
``len(s)``
    number of candidates.

They also observe the engine (``raised``/``taken``/``grow``), so cash moves keep them consistent.

* :class:`GreedySelection`: the candidate with the most cash. Two indexed binary max-heaps (one
  for fetched pages, one for unfetched pages: the two sets the virtual page pays separately), keyed
  by the engine's stored cash ``s``. A payout to a set adds the same amount to all its members, so
  it never reorders a heap; a credit is an increase-key (sift up). Pop, push, discard and credit are
  O(log n) and the heaps hold exactly one entry per candidate: no stale entries. (Only the engine's
  batch path, which credits many pages at once, makes the heaps rebuild, in O(candidates).)
  About 8.5 bytes per page (position int32, membership byte, heap slot int32).
* :class:`RandomSelection`: uniform among candidates, O(1) per operation.
* :class:`CycleSelection`: a fixed order (the page ids, i.e. discovery order) cycled around;
  amortised O(1) with a C-level scan of a membership bytearray.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable

from .engine import FETCHED, OpicEngine

_NONE, _FETCHED_HEAP, _UNFETCHED_HEAP = 0, 1, 2


def _extend(a: array, n: int, fill: int) -> None:
    if n > len(a):
        a.extend(array(a.typecode, [fill]) * (n - len(a)))


class Selection:
    """Base class of the selection strategies."""

    name = "selection"

    def __init__(self, engine: OpicEngine) -> None:
        self.engine = engine
        self._where = bytearray()
        engine.add_observer(self)

    def grow(self, capacity: int) -> None:
        if capacity > len(self._where):
            self._where.extend(bytes(capacity - len(self._where)))

    def __contains__(self, i: int) -> bool:
        return i < len(self._where) and self._where[i] != _NONE

    def raised(self, i: int) -> None:
        """Page ``i`` gained cash (only Greedy cares)."""

    def changed(self, ids: Iterable[int]) -> None:
        """Many pages gained cash at once (only Greedy cares)."""

    def taken(self, ids: Iterable[int]) -> None:
        """Pages were visited or lost their cash: they are no longer candidates."""
        for i in ids:
            self.discard(i)

    def push(self, i: int) -> None:
        raise NotImplementedError

    def discard(self, i: int) -> None:
        raise NotImplementedError

    def pop(self) -> int | None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def nbytes(self) -> int:
        return len(self._where)


class GreedySelection(Selection):
    """Most cash first (the paper's Greedy), with the virtual page's payout done before each pop."""

    name = "greedy"

    def __init__(self, engine: OpicEngine) -> None:
        self._pos = array("i")
        self._heaps = {_FETCHED_HEAP: array("i"), _UNFETCHED_HEAP: array("i")}
        super().__init__(engine)

    def grow(self, capacity: int) -> None:
        super().grow(capacity)
        _extend(self._pos, capacity, -1)

    def __len__(self) -> int:
        return len(self._heaps[_FETCHED_HEAP]) + len(self._heaps[_UNFETCHED_HEAP])

    def nbytes(self) -> int:
        heaps = sum(h.itemsize * h.buffer_info()[1] for h in self._heaps.values())
        return len(self._where) + self._pos.itemsize * len(self._pos) + heaps

    # -- heap primitives (max-heap on the engine's stored cash) -----------------------------
    def _up(self, items: array, k: int) -> None:
        key = self.engine._s_mv
        pos = self._pos
        i = items[k]
        ki = key[i]
        while k:
            p = (k - 1) >> 1
            ip = items[p]
            if key[ip] >= ki:
                break
            items[k] = ip
            pos[ip] = k
            k = p
        items[k] = i
        pos[i] = k

    def _down(self, items: array, k: int) -> None:
        key = self.engine._s_mv
        pos = self._pos
        n = len(items)
        i = items[k]
        ki = key[i]
        while True:
            c = 2 * k + 1
            if c >= n:
                break
            ic = items[c]
            kc = key[ic]
            if c + 1 < n:
                ic2 = items[c + 1]
                kc2 = key[ic2]
                if kc2 > kc:
                    c, ic, kc = c + 1, ic2, kc2
            if kc <= ki:
                break
            items[k] = ic
            pos[ic] = k
            k = c
        items[k] = i
        pos[i] = k

    def _remove_at(self, items: array, k: int) -> int:
        i = items[k]
        last = items.pop()
        if last != i:
            items[k] = last
            self._pos[last] = k
            self._down(items, k)
            self._up(items, self._pos[last])
        self._pos[i] = -1
        self._where[i] = _NONE
        return i

    # -- interface ---------------------------------------------------------------------------
    def push(self, i: int) -> None:
        if self._where[i] != _NONE:
            return
        which = _FETCHED_HEAP if self.engine._flags_mv[i] & FETCHED else _UNFETCHED_HEAP
        items = self._heaps[which]
        items.append(i)
        self._where[i] = which
        self._up(items, len(items) - 1)

    def discard(self, i: int) -> None:
        which = self._where[i] if i < len(self._where) else _NONE
        if which != _NONE:
            self._remove_at(self._heaps[which], self._pos[i])

    def raised(self, i: int) -> None:
        # Increase-key: valid because the engine reports each credit before the next one.
        which = self._where[i]
        if which:
            self._up(self._heaps[which], self._pos[i])

    def changed(self, ids: Iterable[int]) -> None:
        # Several keys rose together: sifting them one by one is not enough (a node can stop
        # under a parent that later moves), so rebuild each heap bottom-up, O(candidates).
        for items in self._heaps.values():
            for k in range(len(items) // 2 - 1, -1, -1):
                self._down(items, k)

    def peek(self) -> int | None:
        """The page :meth:`pop` would return, without removing it (payout included)."""
        e = self.engine
        e.payout()
        f, u = self._heaps[_FETCHED_HEAP], self._heaps[_UNFETCHED_HEAP]
        if not f:
            return u[0] if u else None
        if not u:
            return f[0]
        s = e._s_mv
        # Compare true cash across the two sets; ties go to the unfetched page (discovery).
        return u[0] if s[u[0]] + e.acc_unfetched >= s[f[0]] else f[0]

    def pop(self) -> int | None:
        i = self.peek()
        if i is not None:
            self._remove_at(self._heaps[self._where[i]], self._pos[i])
        return i


class RandomSelection(Selection):
    """Uniformly random candidate (the paper's Random)."""

    name = "random"

    def __init__(self, engine: OpicEngine, seed: int | None = None) -> None:
        self._items = array("i")
        self._pos = array("i")
        self._rng = random.Random(seed)
        super().__init__(engine)

    def grow(self, capacity: int) -> None:
        super().grow(capacity)
        _extend(self._pos, capacity, -1)

    def __len__(self) -> int:
        return len(self._items)

    def push(self, i: int) -> None:
        if self._where[i]:
            return
        self._where[i] = 1
        self._pos[i] = len(self._items)
        self._items.append(i)

    def discard(self, i: int) -> None:
        if i < len(self._where) and self._where[i]:
            self._remove_at(self._pos[i])

    def _remove_at(self, k: int) -> int:
        items = self._items
        i = items[k]
        last = items.pop()
        if last != i:
            items[k] = last
            self._pos[last] = k
        self._where[i] = 0
        self._pos[i] = -1
        return i

    def pop(self) -> int | None:
        self.engine.payout()
        if not self._items:
            return None
        return self._remove_at(self._rng.randrange(len(self._items)))


class CycleSelection(Selection):
    """A fixed order cycled around (the paper's Cycle): page ids ascending, i.e. the order in
    which pages were discovered, wrapping to the start after the last candidate."""

    name = "cycle"

    def __init__(self, engine: OpicEngine) -> None:
        self._count = 0
        self._cursor = 0
        super().__init__(engine)

    def __len__(self) -> int:
        return self._count

    def push(self, i: int) -> None:
        if not self._where[i]:
            self._where[i] = 1
            self._count += 1

    def discard(self, i: int) -> None:
        if i < len(self._where) and self._where[i]:
            self._where[i] = 0
            self._count -= 1

    def pop(self) -> int | None:
        self.engine.payout()
        if not self._count:
            return None
        k = self._where.find(1, self._cursor)
        if k < 0:
            k = self._where.find(1)
        self._where[k] = 0
        self._count -= 1
        self._cursor = k + 1
        return k


STRATEGIES = {
    "greedy": GreedySelection,
    "random": RandomSelection,
    "cycle": CycleSelection,
}


def make_selection(name: str, engine: OpicEngine, seed: int | None = None) -> Selection:
    """Build a strategy by name: ``greedy``, ``random`` or ``cycle``."""
    try:
        cls = STRATEGIES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown selection strategy {name!r} (greedy, random, cycle)") from None
    return cls(engine, seed) if cls is RandomSelection else cls(engine)


__all__ = [
    "CycleSelection",
    "GreedySelection",
    "RandomSelection",
    "STRATEGIES",
    "Selection",
    "make_selection",
]
