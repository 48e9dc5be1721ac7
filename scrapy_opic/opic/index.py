"""A compact index from page keys to dense page ids ``0..n-1``: 14 to 20 bytes a page.

The engine keys pages by Scrapy request fingerprints (20-byte ``bytes``). A Python dict from key
to id plus a list of the keys costs about 150 bytes a page; :class:`KeyIndex` keeps only a 64-bit
hash of each key:

* ``hashes``: a numpy ``uint64`` array, by id (``hashes[i]`` is the hash of page ``i``'s key):
  8 bytes a page. It grows by doubling into ``np.zeros`` (calloc: the capacity not written yet
  is not resident memory, for an array large enough to be mapped on its own: above glibc's mmap
  threshold, at most 32 MiB), so :meth:`KeyIndex.nbytes` counts up to 16 bytes a page but the
  process holds 8;
* ``table``: an open-addressing hash table with linear probing, ``uint32`` slots holding
  ``id + 1`` (0 is an empty slot), its size a power of two, doubled (and rebuilt from
  ``hashes``) before the load would pass 0.7. The load is between 0.35 and 0.7, so the table
  costs 4 / load = 5.7 to 11.4 bytes a page (6.7 at 10 million pages: 2**24 slots).

The keys themselves are not kept (no id -> key lookup here).

**Two keys with the same 64-bit hash are the same page.** The hash is uniform, so among ``n``
distinct keys the probability that any two share a hash is about ``n * (n - 1) / 2 / 2**64``,
i.e. ``n**2 / 2**65``: 2.7e-8 at 1 million pages, 2.7e-6 at 10 million, 2.7e-4 at 100 million.
When it happens, the second key finds the first key's id: that page is taken as already known
and is never crawled on its own. That is the price of not storing the keys.

The hash (:func:`key_hash`) is blake2b with an 8-byte digest, the same in every process and run
(never Python's salted ``hash()``), so a saved ``hashes`` array reopens with
:meth:`KeyIndex.from_hashes`, a vectorised bulk build (no Python loop per page).

Ids are limited to ``2**32 - 2`` (a slot holds ``id + 1`` in 32 bits).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Hashable, Sequence
from hashlib import blake2b as _blake2b
from typing import Any, Protocol

import numpy as np

_from_bytes = int.from_bytes

#: The largest 64-bit hash.
_U64_MAX = 2**64 - 1
#: The largest id a ``uint32`` slot can hold (``id + 1 <= 2**32 - 1``).
_MAX_ID = 2**32 - 2
#: Smallest table (slots).
_MIN_TABLE = 8


class PageKeys(Protocol):
    """How page keys map to dense page ids (the engine's :meth:`~.engine.OpicEngine.page`)."""

    def get(self, key: Hashable) -> int | None:
        """The id of ``key``, or None."""

    def add(self, key: Hashable, i: int) -> None:
        """``key`` (not known yet) is page ``i``, the page just added."""

    def key_of(self, i: int) -> Hashable | None:
        """The key of page ``i`` (None if it has none, or if this map cannot tell)."""

    def nbytes(self) -> int: ...


class DictKeys:
    """Any hashable keys, in a dict and a list (about 100 bytes per page beyond the keys
    themselves: the in-memory frontier's and the simulator's map; the embedded store uses a
    compact index of key hashes instead)."""

    def __init__(self, keys: Sequence[Hashable | None] = ()) -> None:
        self._keys: list[Hashable | None] = list(keys)
        self._ids: dict[Hashable, int] = {k: i for i, k in enumerate(self._keys) if k is not None}

    def get(self, key: Hashable) -> int | None:
        return self._ids.get(key)

    def add(self, key: Hashable, i: int) -> None:
        keys = self._keys
        if len(keys) < i:  # pages added without keys before this one
            keys.extend([None] * (i - len(keys)))
        self._ids[key] = i
        keys.append(key)

    def key_of(self, i: int) -> Hashable | None:
        return self._keys[i] if i < len(self._keys) else None

    def listing(self, n: int) -> list[Hashable | None]:
        """The keys of pages ``0..n-1``."""
        return self._keys[:n] + [None] * max(0, n - len(self._keys))

    def nbytes(self) -> int:
        return sys.getsizeof(self._ids) + sys.getsizeof(self._keys)


def key_hash(key: Hashable) -> int:
    """The 64-bit hash of a page key, the same in every process and run.

    blake2b with ``digest_size=8`` of the key's bytes, the digest read as a little-endian
    unsigned integer. The key's bytes are: a ``bytes`` key as is; a ``str`` key UTF-8 encoded; an
    ``int`` key its decimal text (``-12`` -> ``b"-12"``), so ``5``, ``"5"`` and ``b"5"`` are the
    same key. Anything else (``bool``, ``float``, ``bytearray``, tuples...) is a ``TypeError``.
    """
    if isinstance(key, bytes):
        data = key
    elif isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, int) and not isinstance(key, bool):
        data = b"%d" % key
    else:
        raise TypeError(f"a page key must be bytes, str or int, not {type(key).__name__}")
    return _from_bytes(_blake2b(data, digest_size=8).digest(), "little")


def _table_size(n: int) -> int:
    """The smallest power-of-two table (at least ``_MIN_TABLE`` slots) holding ``n`` pages with
    the load at most 0.7."""
    size = _MIN_TABLE
    while n * 10 > size * 7:
        size *= 2
    return size


def _place(table: np.ndarray, hashes: np.ndarray) -> None:
    """Insert ``hashes`` (ids ``0..len(hashes) - 1``) into the empty ``table``, vectorised.

    Rounds: every page not placed yet stands at its current probe slot (its home slot
    ``h & mask`` in the first round); the pages standing at an empty slot write their ``id + 1``
    there and, of several at one slot, the one whose value stuck is placed (whichever numpy kept:
    each slot ends with exactly one of them, which reads itself back). The others move one slot
    on (modulo the size). A page is placed only after every slot from its home to its place was
    taken, in an earlier round or this one, and slots never empty again: that is exactly what a
    linear-probing lookup needs, so lookups agree with sequential inserts (the layout may differ).

    Two equal hashes stand at the same slot in the same round (same home, one step a round), so
    when one is placed the other is at its slot: every page that moves on is compared with the
    page it yields to, and an equal hash is a ``ValueError``.
    """
    n = len(hashes)
    if n == 0:
        return
    mask = len(table) - 1
    values = np.arange(1, n + 1, dtype=np.uint32)  # id + 1 of the pages not placed yet
    pending = hashes
    slots = hashes.view(np.int64) & mask  # the home slots (mask < 2**63: no sign trouble)
    table[slots] = values  # first round: every slot is empty
    while True:
        occupant = table[slots]
        moved = occupant != values
        if not moved.any():
            return
        values = values[moved]
        slots = slots[moved]
        pending = pending[moved]
        occupant = occupant[moved].astype(np.intp) - 1
        same = hashes[occupant] == pending
        if same.any():
            k = int(np.flatnonzero(same)[0])
            i, j = sorted((int(occupant[k]), int(values[k]) - 1))
            raise ValueError(f"duplicate hash: hashes[{i}] == hashes[{j}] == {int(pending[k])}")
        slots += 1
        slots &= mask
        free = table[slots] == 0
        table[slots[free]] = values[free]


class KeyIndex:
    """Page key (or its 64-bit :func:`key_hash`) -> dense page id ``0..n-1``, in order of
    addition.

    Open addressing with linear probing over the key hash: ``hashes`` (numpy ``uint64``, by id)
    and a table of ``uint32`` slots (0 empty, ``id + 1`` otherwise) whose size is a power of two,
    doubled and rebuilt before the load passes 0.7. See the module docstring for the memory and
    for what a hash collision means (two keys with equal hashes are one page).

    ``capacity`` is the number of pages expected: the hash array and table are sized for it
    (both grow past it).
    """

    __slots__ = ("_hashes", "_hv", "_table", "_tv", "_mask", "_limit", "_n")

    def __init__(self, capacity: int = 1024) -> None:
        capacity = int(capacity)
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, not {capacity}")
        self._n = 0
        self._set_hashes(np.zeros(max(capacity, 1), dtype=np.uint64))
        self._set_table(np.zeros(_table_size(capacity), dtype=np.uint32))

    # ------------------------------------------------------------------ storage
    def _set_hashes(self, hashes: np.ndarray) -> None:
        self._hashes = hashes
        # Indexing a memoryview gives Python ints, fast. (typeshed: numpy arrays are no Buffer.)
        self._hv = memoryview(hashes)  # type: ignore[arg-type]

    def _set_table(self, table: np.ndarray) -> None:
        self._table = table
        self._tv = memoryview(table)  # type: ignore[arg-type]
        self._mask = len(table) - 1
        self._limit = len(table) * 7 // 10  # most pages before the load passes 0.7

    def _grow_table(self) -> None:
        """Double the table and rebuild it from ``hashes`` (vectorised). The old table is let
        go before the new one is allocated: it is not needed to rebuild."""
        size = len(self._table) * 2
        self._tv.release()
        self._tv = self._table = None  # type: ignore[assignment]
        table = np.zeros(size, dtype=np.uint32)
        _place(table, self._hashes[: self._n])
        self._set_table(table)

    def _grow_hashes(self) -> None:
        n = self._n
        if n > _MAX_ID:
            raise OverflowError(f"a KeyIndex holds at most {_MAX_ID + 1} pages")
        hashes = np.zeros(min(2 * len(self._hashes), _MAX_ID + 1), dtype=np.uint64)
        hashes[:n] = self._hashes[:n]
        self._hv.release()
        self._set_hashes(hashes)

    # ------------------------------------------------------------------ lookups
    def get(self, key: Hashable) -> int | None:
        """The id of ``key``, or None if it was never added."""
        if type(key) is bytes:  # the fingerprint: key_hash inlined
            return self.get_hash(_from_bytes(_blake2b(key, digest_size=8).digest(), "little"))
        return self.get_hash(key_hash(key))

    def get_hash(self, h: int) -> int | None:
        """The id of the page whose key hashes to ``h``, or None."""
        table = self._tv
        hashes = self._hv
        mask = self._mask
        s = h & mask
        v = table[s]
        while v:
            if hashes[v - 1] == h:
                return v - 1
            s = (s + 1) & mask
            v = table[s]
        return None

    def __contains__(self, key: Hashable) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return self._n

    # ------------------------------------------------------------------ additions
    def add(self, key: Hashable) -> int:
        """Add a new key; its id (``len(self)`` before the call). A key whose hash is already
        present (the key itself, or a colliding one) is a ``ValueError``: call :meth:`get`
        first."""
        if type(key) is bytes:  # the fingerprint: key_hash inlined
            return self._insert(_from_bytes(_blake2b(key, digest_size=8).digest(), "little"))
        return self._insert(key_hash(key))

    def add_hash(self, h: int) -> int:
        """Add the page whose key hashes to ``h`` (``0 <= h < 2**64``); its new id. A hash
        already present is a ``ValueError``."""
        h = operator.index(h)
        if not 0 <= h <= _U64_MAX:
            raise ValueError(f"a key hash is a 64-bit unsigned integer, not {h!r}")
        return self._insert(h)

    def _insert(self, h: int) -> int:
        n = self._n
        if n >= self._limit:
            self._grow_table()
        table = self._tv
        hashes = self._hv
        mask = self._mask
        s = h & mask
        v = table[s]
        while v:
            if hashes[v - 1] == h:
                raise ValueError(f"hash {h} is already present (page id {v - 1})")
            s = (s + 1) & mask
            v = table[s]
        if n == len(hashes):
            self._grow_hashes()
            hashes = self._hv
        hashes[n] = h
        table[s] = n + 1
        self._n = n + 1
        return n

    # ------------------------------------------------------------------ bulk
    @property
    def hashes(self) -> np.ndarray:
        """The key hashes by id, ``uint64[:n]``: what a store saves. A read-only view of the
        index's array: copy it to keep it past later additions (a growth leaves the view on the
        old array, still correct for its ``n`` pages but holding that memory)."""
        view = self._hashes[: self._n]
        view.flags.writeable = False
        return view

    @classmethod
    def from_hashes(cls, hashes: np.ndarray) -> KeyIndex:
        """The index whose page ``i`` has hash ``hashes[i]`` (a 1-D ``uint64`` array; copied):
        the same lookups as adding them one by one, built with numpy in a few vectorised rounds.
        Equal hashes are a ``ValueError``."""
        arr = np.asarray(hashes)
        if arr.dtype != np.uint64:
            raise TypeError(f"hashes must be a uint64 array, not {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"hashes must be 1-D, not {arr.ndim}-D")
        n = len(arr)
        if n > _MAX_ID + 1:
            raise OverflowError(f"a KeyIndex holds at most {_MAX_ID + 1} pages")
        self = cls.__new__(cls)
        own = np.zeros(max(n, 1), dtype=np.uint64)
        own[:n] = arr
        table = np.zeros(_table_size(n), dtype=np.uint32)
        _place(table, own[:n])
        self._n = n
        self._set_hashes(own)
        self._set_table(table)
        return self

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        # memoryviews do not pickle or deepcopy: rebuild from the hashes.
        return (KeyIndex.from_hashes, (np.array(self.hashes),))

    # ------------------------------------------------------------------ memory
    @property
    def table_size(self) -> int:
        """Slots in the table (a power of two)."""
        return len(self._table)

    def nbytes(self) -> int:
        """Bytes held: the hash array at its capacity (8 a page, the untouched part of it not
        resident) plus the table (4 a slot)."""
        return self._hashes.nbytes + self._table.nbytes

    def __repr__(self) -> str:
        return f"<KeyIndex pages={self._n} table_size={len(self._table)} nbytes={self.nbytes()}>"
