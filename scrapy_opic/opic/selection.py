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
* :class:`TieredSelection`: priority tiers (``request.priority``) over Greedy across download
  slots (for politeness: only slots that have room), by default in the *web order* for pages
  never fetched (the slots take turns; in a slot, the most link votes), for the frontier:
  each page's ``(priority, slot)`` is a small code (:class:`Tiers`) in an array the frontier
  keeps, and all tiers share one position array: about 8 bytes per page whatever the number
  of tiers, and a numpy bulk load for a resumed crawl.
* :class:`RandomSelection`: uniform among candidates, O(1) per operation.
* :class:`CycleSelection`: a fixed order (the page ids, i.e. discovery order) cycled around;
  amortised O(1) with a C-level scan of a membership bytearray.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .constants import FETCHED
from .engine import OpicEngine

_NONE, _FETCHED_HEAP, _UNFETCHED_HEAP = 0, 1, 2


class Pick(NamedTuple):
    """A candidate :meth:`TieredSelection.peek` chose."""

    page: int
    priority: int
    #: Its true cash.
    cash: float
    #: Its slot's turns (:attr:`TieredSelection.turns`) if the pop took turns, else 0.
    turns: float
    #: Its key in the web order (the engine's ``order``) if the pop took turns by votes and the
    #: page was never fetched, else 0.
    votes: float = 0.0


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

    def rebased(self) -> None:
        """The engine rebased its stored cash (only the slot-aware Greedy, which keeps copies
        of it, cares; see :meth:`GreedySelection.rebased`)."""

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


class _Heap:
    """An indexed binary max-heap of ints keyed by ``keys()[item]``.

    ``pos`` maps an item to its index in ``items`` (-1 when absent) and may be shared by several
    heaps whose items never overlap (a page is in at most one heap at a time). ``keys`` is a
    function so that the engine can reallocate its arrays without the heap holding a stale view.
    """

    __slots__ = ("items", "pos", "keys")

    def __init__(self, pos: array, keys: Callable[[], Sequence[float]]) -> None:
        self.items = array("i")
        self.pos = pos
        self.keys = keys

    def __len__(self) -> int:
        return len(self.items)

    def up(self, k: int) -> None:
        items, pos, key = self.items, self.pos, self.keys()
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

    def down(self, k: int) -> None:
        items, pos, key = self.items, self.pos, self.keys()
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

    def push(self, i: int) -> None:
        self.items.append(i)
        self.up(len(self.items) - 1)

    def remove(self, i: int) -> None:
        items, pos = self.items, self.pos
        k = pos[i]
        last = items.pop()
        if last != i:
            items[k] = last
            pos[last] = k
            self.down(k)
            self.up(pos[last])
        pos[i] = -1

    def heapify(self) -> None:
        for k in range(len(self.items) // 2 - 1, -1, -1):
            self.down(k)

    def nbytes(self) -> int:
        return self.items.itemsize * self.items.buffer_info()[1]


class GreedySelection(Selection):
    """Most cash first (the paper's Greedy), with the virtual page's payout done before each pop."""

    name = "greedy"

    def __init__(self, engine: OpicEngine) -> None:
        self._pos = array("i")

        def keys() -> Sequence[float]:
            return engine.stored_mv

        self._heaps = {
            _FETCHED_HEAP: _Heap(self._pos, keys),
            _UNFETCHED_HEAP: _Heap(self._pos, keys),
        }
        super().__init__(engine)

    def grow(self, capacity: int) -> None:
        super().grow(capacity)
        _extend(self._pos, capacity, -1)

    def __len__(self) -> int:
        return len(self._heaps[_FETCHED_HEAP]) + len(self._heaps[_UNFETCHED_HEAP])

    def nbytes(self) -> int:
        heaps = sum(h.nbytes() for h in self._heaps.values())
        return len(self._where) + self._pos.itemsize * len(self._pos) + heaps

    def push(self, i: int) -> None:
        if self._where[i] != _NONE:
            return
        which = _FETCHED_HEAP if self.engine.flags_mv[i] & FETCHED else _UNFETCHED_HEAP
        self._where[i] = which
        self._heaps[which].push(i)

    def discard(self, i: int) -> None:
        which = self._where[i] if i < len(self._where) else _NONE
        if which != _NONE:
            self._heaps[which].remove(i)
            self._where[i] = _NONE

    def raised(self, i: int) -> None:
        # Increase-key: valid because the engine reports each credit before the next one.
        which = self._where[i]
        if which:
            self._heaps[which].up(self._pos[i])

    def changed(self, ids: Iterable[int]) -> None:
        # Several keys rose together: sifting them one by one is not enough (a node can stop
        # under a parent that later moves), so rebuild each heap bottom-up, O(candidates).
        for heap in self._heaps.values():
            heap.heapify()

    def rebased(self) -> None:
        # Nothing to do: a rebase adds one amount to the stored cash of every fetched page and
        # another to that of every page never fetched, i.e. to every key of one heap (closed
        # pages, which it leaves alone, are in no heap). Float addition is monotone, so a
        # parent's key stays >= its children's: both heaps stay valid, and peek compares the
        # tops as true cash with the accumulators now at 0.
        pass

    def peek(self) -> int | None:
        """The page :meth:`pop` would return, without removing it (payout included)."""
        e = self.engine
        e.payout()
        f, u = self._heaps[_FETCHED_HEAP].items, self._heaps[_UNFETCHED_HEAP].items
        if not f:
            return u[0] if u else None
        if not u:
            return f[0]
        s = e.stored_mv
        # Compare true cash across the two sets; ties go to the unfetched page (discovery).
        return u[0] if s[u[0]] + e.acc_unfetched >= s[f[0]] else f[0]

    def pop(self) -> int | None:
        i = self.peek()
        if i is not None:
            self.discard(i)
        return i


class Tiers:
    """Interns (priority, download slot) pairs to small int codes >= 1 (0 means "none"). The
    frontier keeps one code per page in an array('I'); the selection reads it.

    Codes are dense (``1..len(tiers)``) and never reused: a pair keeps its code for the
    frontier's life, so a store can save :meth:`as_list` and rebuild the same codes with
    :meth:`from_list`.
    """

    __slots__ = ("_pairs", "_codes")

    def __init__(self) -> None:
        self._pairs: list[tuple[int, Hashable]] = []  # code - 1 -> (priority, slot)
        self._codes: dict[tuple[int, Hashable], int] = {}

    def code(self, priority: int, slot: Hashable) -> int:
        """The code of ``(priority, slot)``, a new one if the pair is new."""
        pair = (priority, slot)
        c = self._codes.get(pair)
        if c is None:
            self._pairs.append(pair)
            c = self._codes[pair] = len(self._pairs)
        return c

    def _pair(self, code: int) -> tuple[int, Hashable]:
        if not 0 < code <= len(self._pairs):
            raise ValueError(f"no tier has code {code}")
        return self._pairs[code - 1]

    def priority(self, code: int) -> int:
        return self._pair(code)[0]

    def slot(self, code: int) -> Hashable:
        return self._pair(code)[1]

    def __len__(self) -> int:
        return len(self._pairs)

    def as_list(self) -> list[tuple[int, Hashable]]:
        """The pairs of codes ``1..len(self)``, in order (for a store to save)."""
        return list(self._pairs)

    @classmethod
    def from_list(cls, pairs: Iterable[tuple[int, Hashable]]) -> Tiers:
        """The tiers saved by :meth:`as_list`: each pair gets its code back."""
        tiers = cls()
        for k, (priority, slot) in enumerate(pairs, 1):
            if tiers.code(priority, slot) != k:
                raise ValueError(f"tier {(priority, slot)!r} is listed twice")
        return tiers


#: The head key of a code with no page: fetched heads are keyed by stored cash, heads of pages
#: never fetched by pairs (see :meth:`TieredSelection._head_value`).
_LOW = float("-inf")
_LOW_U = (_LOW, _LOW)

#: Rough bytes of the per-code structures of :class:`TieredSelection` (two page heaps with their
#: arrays, three head keys and positions, list slots), for :meth:`TieredSelection.nbytes`.
_CODE_BYTES = 450


class TieredSelection(Selection):
    """Priority tiers over a slot-aware Greedy: :meth:`pop` serves the highest priority first
    (as Scrapy does with ``request.priority``) and, within a tier, among the download slots that
    have room (``has_room`` receives the slot):

    * with ``web`` (the *web order*), a page never fetched comes from the slot whose pages never
      fetched were leased the fewest times so far (its :attr:`turns`; ties: the best page),
      and it is that slot's page with the most link votes discounted by depth (the engine's
      ``order``: see "Votes" in :mod:`~.engine`; the most cash if the engine keeps no votes).
      A fetched page (a refetch) is the richest of the tier's fetched pages, and the two are
      compared by cash. A slot's count rises by one each time one of its pages never fetched
      is leased (:meth:`turned`), so a slot found late is served first until it has caught
      up. Why: most of a web page's links stay in its site, so cash alone keeps a crawl in the
      few sites it knows best, and the site it has not opened yet, where a page that all of
      the site's pages link to waits behind one link, is the one it misses; and inside a
      site, the cash that reaches a page already fetched never moves on, where its votes
      would have;
    * without ``web``, the page with the most cash (the paper's Greedy);
    * with ``web`` and ``continuous``, the pops of a continuous crawl's discovery turns (made
      with ``discover``: a page never fetched, its share of the pops) take turns as above; its
      other pops compare the best page never fetched (by votes as above, or cash, over all
      slots: no turns) and the richest fetched page by cash: there a first fetch competes
      with refetches, and cash is what weighs the two (with turns, a poor slot's page would
      stand for every first fetch against the richest refetch).

    A page's tier is its *code* ``codes[i]``, a ``(priority, slot)`` pair interned by
    :class:`Tiers`; the frontier owns ``codes`` (one ``array('I')`` entry per page), sets a
    page's code before pushing it and leaves it alone while the page is a candidate.

    Layout (compact: about 8 bytes per page, whatever the number of tiers and slots):

    * page heaps, as in :class:`GreedySelection` but per code: heap ``2 * code + 0`` holds the
      code's fetched candidates, keyed by stored cash, ``2 * code + 1`` its unfetched ones,
      keyed by ``order`` in the web order with votes, else by stored cash. A
      candidate's fetched flag does not change while it is one (only a visit or a redirect sets
      it, and both take the page out first), so the two heaps of a code are enough;
    * one int32 position per page (its index in its heap, -1 when not a candidate), shared by
      all heaps: a page is in at most one. Which of its code's two heaps holds it is the one
      whose item at that position is the page, so nothing else is stored per page;
    * per priority, three heaps of *slot heads* (the codes of that priority, keyed by the
      stored cash of each code's best fetched page; by ``(-turns, key)`` of its best page
      never fetched, its key in its heap, turns left out without ``web`` or with
      ``continuous``; and, with both, by ``(-turns, key)`` for the discovery pops), which
      find the best slot with room in O(log slots), setting full slots aside during a pop.

    Push, discard and credit are O(log n + log slots); a pop is O((f + 1) log slots) per tier
    tried, ``f`` the full slots met. :meth:`load` makes many pages candidates at once with numpy
    (a resumed crawl). One head-heap pair per priority in use: a crawl without priorities has
    one.
    """

    name = "greedy-tiers"

    def __init__(
        self,
        engine: OpicEngine,
        tiers: Tiers,
        codes: array,
        web: bool = True,
        continuous: bool = False,
    ) -> None:
        self.tiers = tiers
        self.codes = codes
        self.web = web
        # Which pops take turns: every pop, or only a continuous crawl's discovery pops, which
        # then have head heaps of their own (number 2).
        self._every_pop = web and not continuous
        self._discovery_heads = web and continuous
        #: By code: how many of its pages never fetched were leased (:meth:`turned`), the
        #: order of the slots' turns (all 0 without ``web``).
        self.turns = array("d", [0.0])
        self._pos = array("i")

        def keys() -> Sequence[float]:
            return engine.stored_mv

        self._keys = keys
        #: Pages never fetched are ranked by votes (see "Votes" in :mod:`~.engine`).
        self.by_votes = web and engine.votes

        def order() -> Sequence[float]:
            return engine.order_mv

        self._keys_u = order if self.by_votes else keys
        # By heap number 2 * code + (0 fetched, 1 unfetched); None for a code not seen yet.
        # (Typed loosely: every heap number a page's position leads to holds a heap.)
        self._heaps: list[Any] = [None, None]
        # By code: its entry in its priority's head heaps (key: the stored cash of the code's
        # best fetched page, -inf when none; of its best page never fetched, (-turns, its
        # stored cash) if every pop takes turns, else (0, its stored cash); for discovery
        # pops that take turns, (-turns, its stored cash)), and those head heaps.
        self._head_key: tuple[list[Any], list[Any], list[Any]] = ([_LOW], [_LOW_U], [_LOW_U])
        self._head_pos = (array("i", [-1]), array("i", [-1]), array("i", [-1]))
        self._heads_of: list[Any] = [None]  # (tuple[_Heap, _Heap, _Heap] | None, as _heaps)
        self._heads: dict[int, tuple[_Heap, _Heap, _Heap]] = {}  # priority -> its head heaps
        self._order: list[int] = []  # priorities, highest first
        self._count = 0
        super().__init__(engine)

    # -- sizes -------------------------------------------------------------------------------
    def grow(self, capacity: int) -> None:
        _extend(self._pos, capacity, -1)

    def __contains__(self, i: int) -> bool:
        return i < len(self._pos) and self._pos[i] >= 0

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        heaps = sum(h.nbytes() for h in self._heaps if h is not None)
        codes = sum(1 for heads in self._heads_of if heads is not None)
        return self._pos.itemsize * len(self._pos) + heaps + _CODE_BYTES * codes

    # -- codes and heaps ------------------------------------------------------------------------
    def _ensure(self, code: int) -> None:
        """The heaps of ``code`` and the head heaps of its priority exist."""
        heads_of = self._heads_of
        if code < len(heads_of) and heads_of[code] is not None:
            return
        priority = self.tiers.priority(code)  # (refuses a code the tiers do not know)
        if code >= len(heads_of):
            more = code + 1 - len(heads_of)
            heads_of.extend([None] * more)
            self._heaps.extend([None] * (2 * more))
            self._head_key[0].extend([_LOW] * more)
            self._head_key[1].extend([_LOW_U] * more)
            self._head_key[2].extend([_LOW_U] * more)
            for st in (0, 1, 2):
                self._head_pos[st].extend(array("i", [-1]) * more)
            self.turns.extend(array("d", [0.0]) * more)
        heads = self._heads.get(priority)
        if heads is None:
            key_f, key_u, key_d = self._head_key
            heads = self._heads[priority] = (
                _Heap(self._head_pos[0], lambda: key_f),
                _Heap(self._head_pos[1], lambda: key_u),
                _Heap(self._head_pos[2], lambda: key_d),
            )
            self._order = sorted(self._heads, reverse=True)
        heads_of[code] = heads
        self._heaps[2 * code] = _Heap(self._pos, self._keys)
        self._heaps[2 * code + 1] = _Heap(self._pos, self._keys_u)

    def _heap_at(self, i: int, k: int) -> int:
        """The number of the heap holding candidate ``i`` at position ``k``: one of its code's
        two heaps, the one whose item ``k`` is ``i``."""
        heaps = self._heaps
        h = 2 * self.codes[i]
        if h < len(heaps):
            heap = heaps[h]
            if heap is not None:
                items = heap.items
                if k < len(items) and items[k] == i:
                    return h
                items = heaps[h + 1].items
                if k < len(items) and items[k] == i:
                    return h + 1
        raise RuntimeError(f"the tier code of page {i} changed while it was a candidate")

    def _refresh_head(self, h: int) -> None:
        """Bring code ``h // 2``'s entries in the head heaps of page heap ``h`` in line with it
        (fetched: head heap 0; never fetched: 1, and 2 if discovery pops have their own)."""
        k, st = h >> 1, h & 1
        self._refresh_entry(h, k, st)
        if st and self._discovery_heads:
            self._refresh_entry(h, k, 2)

    def _refresh_entry(self, h: int, k: int, st: int) -> None:
        """Bring code ``k``'s entry in head heap ``st`` in line with page heap ``h``."""
        heap, heads, keys = self._heaps[h], self._heads_of[k][st], self._head_key[st]
        inside = self._head_pos[st][k] >= 0
        if not len(heap):
            if inside:
                heads.remove(k)
            keys[k] = _LOW_U if st else _LOW
            return
        key = self._head_value(k, st, heap.items[0])
        old, keys[k] = keys[k], key
        if not inside:
            heads.push(k)
        elif key > old:
            heads.up(self._head_pos[st][k])
        elif key < old:
            heads.down(self._head_pos[st][k])

    def _head_value(self, code: int, st: int, top: int) -> Any:
        """The head key of ``code`` in head heap ``st`` (0 fetched, 1 never fetched, 2 never
        fetched for discovery pops) whose best page is ``top``: its key in its page heap."""
        if not st:
            return self.engine.stored_mv[top]
        key = self._keys_u()[top]
        return (-self.turns[code] if st == 2 or self._every_pop else 0.0, key)

    def turned(self, i: int) -> None:
        """Candidate ``i`` is being leased: a page never fetched uses a turn of its code's
        slot in the web order. (Call before taking it out: a pop does so itself.)"""
        if not self.web or self.engine.flags_mv[i] & FETCHED:
            return
        code = self.codes[i]
        if code < len(self.turns):
            self.turns[code] += 1.0
            if self._pos[i] >= 0:  # (a candidate: its code's heaps exist)
                # Only the head key that holds turns moves (heap 1's holds none in a
                # continuous crawl, where heap 2 serves the discovery pops).
                self._refresh_entry(2 * code + 1, code, 2 if self._discovery_heads else 1)

    # -- candidates ------------------------------------------------------------------------------
    def push(self, i: int) -> None:
        """Make ``i`` a candidate in the tier ``codes[i]`` (no-op if it already is one)."""
        if self._pos[i] >= 0:
            return
        code = self.codes[i]
        if not code:
            raise ValueError(f"page {i} has no tier code")
        h = 2 * code + (0 if self.engine.flags_mv[i] & FETCHED else 1)
        heaps = self._heaps
        if h >= len(heaps) or heaps[h] is None:
            self._ensure(code)
        heaps[h].push(i)
        self._count += 1
        if self._pos[i] == 0:  # a new top: the code's head moves
            self._refresh_head(h)

    def discard(self, i: int) -> None:
        k = self._pos[i] if i < len(self._pos) else -1
        if k >= 0:
            h = self._heap_at(i, k)
            self._heaps[h].remove(i)
            self._count -= 1
            if k == 0:
                self._refresh_head(h)

    def load(self, ids: np.ndarray | Sequence[int]) -> None:
        """Make all of ``ids`` candidates at once (their codes set; ids already candidates are
        left as they are): the pops that follow are those of pushing them one by one, up to
        ties between equal keys. Each heap is rebuilt as its pages sorted by their key in it,
        highest first (a sorted array is a max-heap), with numpy: no sifting in Python."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if not ids.size:
            return
        if ids.min() < 0 or ids.max() >= min(len(self._pos), len(self.codes)):
            raise IndexError("load: a page id out of range")
        pos = np.frombuffer(self._pos, dtype=np.int32)
        try:
            # Each page once, in id order, leaving out the candidates (np.unique's hashing is
            # slow on millions of ids; a mask over the pages is not).
            mask = np.zeros(len(pos), dtype=bool)
            mask[ids] = True
            mask &= pos < 0
            ids = np.flatnonzero(mask)
            del mask
            if not ids.size:
                return
            code = np.frombuffer(self.codes, dtype=np.uint32)[ids].astype(np.int64)
            if not code.all():
                raise ValueError(f"page {int(ids[code == 0][0])} has no tier code")
            h = 2 * code + ((self.engine.flags[ids] & FETCHED) == 0)
            for c in np.flatnonzero(np.bincount(code)).tolist():
                self._ensure(c)
            del code
            added = ids.size
            touched = np.flatnonzero(np.bincount(h)).tolist()
            ids, bounds = self._sorted_in(ids, h, touched)
            for t, lo, hi in zip(touched, bounds, bounds[1:]):
                heap = self._heaps[t]
                heap.items = array("i")
                heap.items.frombytes(ids[lo:hi].tobytes())
                pos[ids[lo:hi]] = np.arange(hi - lo, dtype=np.int32)
            self._count += added
        finally:
            del pos  # (an exported buffer would keep the array from growing)
        for t in touched:
            self._refresh_head(t)

    def _sorted_in(
        self, ids: np.ndarray, h: np.ndarray, touched: list[int]
    ) -> tuple[np.ndarray, list[int]]:
        """The pages of the heaps ``touched`` (ascending), the new ``ids`` (of heaps ``h``)
        sorted in with their candidates: grouped by heap, each heap's highest key first, as
        int32; and where each heap's pages start and end."""
        old = [np.frombuffer(self._heaps[t].items, dtype=np.int32).copy() for t in touched]
        if any(a.size for a in old):
            ids = np.concatenate([ids] + [a.astype(np.int64) for a in old])
            h = np.concatenate([h] + [np.full(a.size, t) for t, a in zip(touched, old)])
        del old
        e = self.engine
        key = e.stored[ids]
        if self.by_votes:  # (pages never fetched: by order)
            fresh = (h & 1) == 1
            key[fresh] = e.order[ids[fresh]]
        order = np.argsort(-key)  # highest key first
        if len(touched) > 1:  # then grouped by heap, keeping the cash order in each
            small = np.uint16 if touched[-1] < 1 << 16 else np.int64
            order = order[np.argsort(h[order].astype(small), kind="stable")]
            h = h[order]
        ids = ids[order].astype(np.int32)
        bounds = np.searchsorted(h, touched).tolist() if len(touched) > 1 else [0]
        return ids, bounds + [ids.size]

    # -- the engine's observations ------------------------------------------------------------
    def raised(self, i: int) -> None:
        # Increase-key: valid because the engine reports each credit before the next one.
        k = self._pos[i]
        if k >= 0:
            h = self._heap_at(i, k)
            self._heaps[h].up(k)
            if self._pos[i] == 0:  # only a new or richer top changes the code's head
                self._refresh_head(h)

    def rebased(self) -> None:
        # The page heaps stay valid (one amount moved every key of a heap: see
        # GreedySelection.rebased), but the head heaps hold copies of each code's top stored
        # cash: read them again, then rebuild each head heap, O(codes).
        for h, heap in enumerate(self._heaps):
            if heap is not None and len(heap):
                code, st = divmod(h, 2)
                self._head_key[st][code] = self._head_value(code, st, heap.items[0])
                if st and self._discovery_heads:
                    self._head_key[2][code] = self._head_value(code, 2, heap.items[0])
        for pair in self._heads.values():
            for heads in pair:
                heads.heapify()

    def changed(self, ids: Iterable[int]) -> None:
        for h, heap in enumerate(self._heaps):
            if heap is not None:
                heap.heapify()
                self._refresh_head(h)

    # -- popping --------------------------------------------------------------------------------
    def pop(
        self, has_room: Callable[[Hashable], bool] | None = None, discover: bool = False
    ) -> int | None:
        """The best candidate of the highest tier that has one in a slot with room; with
        ``discover``, the best one never fetched of the highest tier that has such a candidate
        (a priority still comes before discovery, as it comes before cash), if there is one.
        (A continuous crawl's refetches all wait in tier 0, which never empties: discovery is
        how a page filed below 0 gets its first fetch.)"""
        if not self._count:
            return None
        self.engine.payout()
        got = self._choose(has_room, discover, True)
        return None if got is None else got[0]

    def peek(
        self, has_room: Callable[[Hashable], bool] | None = None, discover: bool = False
    ) -> Pick | None:
        """The candidate :meth:`pop` would take (its true cash without the virtual page's payout
        that a pop makes first: exact for a pooled engine, which pays none), left a candidate;
        ``None`` if there is none."""
        if not self._count:
            return None
        return self._choose(has_room, discover, False)

    def _choose(
        self, has_room: Callable[[Hashable], bool] | None, discover: bool, take: bool
    ) -> Pick | None:
        if discover:
            for priority in self._order:
                heads = self._heads[priority]
                if heads[1].items:
                    got = self._pop_tier(priority, has_room, True, take)
                    if got is not None:
                        return got
        for priority in self._order:
            heads = self._heads[priority]
            if heads[0].items or heads[1].items:
                got = self._pop_tier(priority, has_room, False, take)
                if got is not None:
                    return got
        return None

    def _pop_tier(
        self,
        priority: int,
        has_room: Callable[[Hashable], bool] | None,
        unfetched: bool,
        take: bool = True,
    ) -> Pick | None:
        """The candidate of ``priority`` among the slots with room (never fetched only, with
        ``unfetched``; see the class docstring), removed if ``take``; ``None`` if there is
        none."""
        heads = self._heads[priority]
        # (The heads of pages never fetched: by turns if this pop takes them.)
        by_turns = self._every_pop or (unfetched and self._discovery_heads)
        heads_u = heads[2] if unfetched and self._discovery_heads else heads[1]
        e = self.engine
        head_pos = self._head_pos
        pairs = self.tiers._pairs  # code - 1 -> (priority, slot)
        set_aside: list[int] = []
        try:
            while True:
                # Both contenders must have room before they are compared: in the web order
                # the best code for pages never fetched need not be the richest, so a full
                # one that loses on cash would hide one with room that wins.
                tops_f, tops_u = heads[0].items, heads_u.items
                ku = tops_u[0] if tops_u else 0
                kf = tops_f[0] if tops_f and not unfetched else 0
                full = 0
                if has_room is not None:
                    if ku and not has_room(pairs[ku - 1][1]):
                        full = ku
                    elif kf and not has_room(pairs[kf - 1][1]):
                        full = kf
                if full:  # set it aside for this pop
                    for s2 in (0, 1, 2):
                        if head_pos[s2][full] >= 0:
                            heads[s2].remove(full)
                    set_aside.append(full)
                    continue
                h = self._richer(ku, kf)
                if not h:
                    return None
                k, st = h >> 1, h & 1
                heap = self._heaps[h]
                i = heap.items[0]
                cash = e.stored_mv[i] + e.acc_all + (e.acc_unfetched if st else 0.0)
                got = Pick(
                    i,
                    priority,
                    cash,
                    self.turns[k] if by_turns else 0.0,
                    e.order_mv[i] if by_turns and st and self.by_votes else 0.0,
                )
                if take:
                    if st:
                        self.turned(i)
                    heap.remove(i)
                    self._count -= 1
                    self._refresh_head(h)
                return got
        finally:
            for k in set_aside:
                self._refresh_head(2 * k)
                self._refresh_head(2 * k + 1)

    def _richer(self, ku: int, kf: int) -> int:
        """The number of the heap whose top wins between the best code ``ku`` for pages never
        fetched and the richest code ``kf`` for fetched ones (0: none), compared by the true
        cash of their best pages, a tie going to the page never fetched (discovery); 0: none."""
        if ku and kf:
            e = self.engine
            fresh = e.stored_mv[self._heaps[2 * ku + 1].items[0]] + e.acc_unfetched
            if fresh < self._head_key[0][kf]:
                return 2 * kf
        return 2 * ku + 1 if ku else 2 * kf


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
