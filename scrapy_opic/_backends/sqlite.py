"""The embedded backend: a :class:`~scrapy_opic.opic.frontier.MemoryFrontier` checkpointed to one
sqlite file (through sqlitedict), and a read-only view of that file for exports.

Made for frontiers of tens of millions of pages in one process: in memory, a page is a row of
numpy arrays (the engine's, its status, outcome and tier code) and its key's 64-bit hash in a
compact index (:class:`~scrapy_opic.opic.index.KeyIndex`); its key, its URL and its pending
request are rows of the file. A checkpoint writes what changed since the previous one, never
all pages.

File layout (one file, one connection, one transaction per checkpoint):

table ``opic`` (sqlitedict's face: pickled rows behind a CRC-32)
    ``"engine"``: the engine's parameters and scalars (:meth:`OpicEngine.header`);
    ``"frontier"``: the format, the number of pages, the row layout of the blocks, the crawl
    mode, the tier codes (each ``(priority, download slot)``), the redirect aliases;
    ``"meta"``: what the crawl adds (spider name, settings, its time series).
table ``opic_blocks`` ``(b, data)``
    the per-page arrays of pages ``b*BLOCK .. (b+1)*BLOCK-1``, column after column as the
    ``"frontier"`` row's layout says, behind a CRC-32. A checkpoint rewrites the blocks of the
    pages it touched (a visit: the page and those it paid) and of the new pages.
table ``opic_pages`` ``(id, key, url)``
    append-only: a checkpoint inserts the pages added since the previous one.
table ``opic_requests`` ``(id, key, data)``
    one row per pending page of a resumable crawl (JOBDIR): its key and its serialized request
    behind a CRC-32, written as it changes, committed with the next checkpoint.
table ``opic_links`` ``(id, links, alias)``
    with kept links (``OPIC_KEEP_LINKS``): one row per page that has links, ``links`` a CRC-32
    of the rest of the row then the page's link targets as
    :func:`~scrapy_opic.opic.links.encode_links` blobs, ``alias`` the page it redirected to.

:meth:`SqliteStore.commit` writes a checkpoint in one sqlite transaction, with every request
row changed since the previous one. A process killed at any moment (``kill -9``) leaves the last
committed checkpoint: never half a visit. Pages that were in flight in it go back to pending on
load.

While a crawl has it open the file is in WAL mode: a reader (:class:`StateReader`, the export
commands) reads one consistent snapshot inside one read transaction while the crawl goes on
committing; neither blocks the other and the reader never writes. At close the file goes back to
a rollback journal: one file, with no ``-wal``/``-shm`` beside it. (The one wait: a crawl that
starts on a closed state while a reader is inside it waits for that reader, up to
:data:`BUSY_TIMEOUT`, to switch the file into WAL mode.)

The rows are built in the caller's thread and written by sqlitedict's own thread: a periodic
commit does not wait for the disk. Reads of rows (a request to pop, a key) go through that thread
too, so that they see the writes queued before them.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import pickle
import sqlite3
import time
import zlib
from array import array
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlitedict import SqliteDict

from .._series import Series
from ..opic.constants import DAMAGED, DISCOVERED, ERROR, PENDING, STATUSES, VISITED
from ..opic.engine import OpicEngine
from ..opic.frontier import Entry, Lease, MemoryFrontier
from ..opic.index import KeyIndex, key_hash
from ..opic.links import decode_links, encode_links
from ..opic.refresh import COLUMNS as REFRESH_COLUMNS
from ..opic.refresh import Refresher
from ..opic.window import parse_window
from . import StoreError

logger = logging.getLogger(__name__)
# sqlitedict logs each open and close at DEBUG, which Scrapy's default LOG_LEVEL shows, and a
# failed statement as a dozen ERROR lines of stack: the store raises every failure of its writer
# as one StoreError line (SqliteStore._check), which says it all.
logging.getLogger("sqlitedict").setLevel(logging.CRITICAL)

FORMAT = 3
BLOCK = 64  #: pages per row of ``opic_blocks``
BLOCK_SHIFT = 6  #: log2(BLOCK)
READ_BLOCKS = 1024  #: block rows a reader decodes at a time (64K pages)
CHUNK = 4096  #: pages per chunk of (key, url) rows a reader hands out
BLOCKS_TABLE = "opic_blocks"  #: per-page arrays, a block of pages per row
PAGES_TABLE = "opic_pages"  #: each page's key and URL
REQUESTS_TABLE = "opic_requests"  #: each pending page's serialized request
LINKS_TABLE = "opic_links"  #: the table of kept links (see the module docstring)
REQUEST_BATCH = 4096  #: request row changes gathered before they are queued for the writer
LINKS_READ_ROWS = 32_768  #: rows of kept links a reader decodes at a time
CHECK_WHOLE_BYTES = 1 << 30  #: a resume checks a state file up to this size whole
BUSY_TIMEOUT = 30.0  #: seconds a crawl starting on a state waits for a reader to finish
_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = (BLOCKS_TABLE, PAGES_TABLE, REQUESTS_TABLE, LINKS_TABLE)

#: The payload a pop hands out for a page whose request row was lost (or never stored: a
#: request that could not be serialized, pending when the crawl stopped); the frontier gives
#: such a page up.
MISSING = "opic:missing"
#: The payload of a page whose request row fails its checksum: the frontier gives it up, as
#: ``damaged``.
DAMAGED_ROW = "opic:damaged"


def _check_sqlite(path: Path) -> None:
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as fh:
            if fh.read(16) != _SQLITE_MAGIC:
                raise StoreError(
                    f"{path} is not an OPIC state (not a sqlite file): nothing was changed; "
                    "move it away (or choose another JOBDIR or OPIC_STATE_PATH)"
                )


# Rows are pickles behind a magic and a CRC-32 of the pickle: a page of the file overwritten
# in the middle of a row (a bad disk, a stray write) is an error at load, never silently wrong
# numbers. Rows without the magic (written before checksums) are plain pickles.
_ROW_MAGIC = b"OPC\x01"


def encode_row(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _ROW_MAGIC + zlib.crc32(data).to_bytes(4, "big") + data


def decode_row(blob: Any) -> Any:
    blob = bytes(blob)
    if blob[:4] == _ROW_MAGIC:
        data = blob[8:]
        if zlib.crc32(data) != int.from_bytes(blob[4:8], "big"):
            raise ValueError("a row fails its checksum")
        return pickle.loads(data)
    return pickle.loads(blob)


def links_row(blob: bytes, alias: int | None = None) -> bytes:
    """The ``links`` column of a row of kept links: a CRC-32 of the blob and the alias, then the
    blob."""
    tail = b"" if alias is None else alias.to_bytes(4, "big")
    return zlib.crc32(blob + tail).to_bytes(4, "big") + blob


def links_blob(row: bytes, alias: int | None) -> bytes:
    """The blob of a ``links`` column made by :func:`links_row` (:class:`ValueError` if it
    fails its checksum)."""
    tail = b"" if alias is None else int(alias).to_bytes(4, "big")
    blob = row[4:]
    if len(row) < 4 or zlib.crc32(blob + tail) != int.from_bytes(row[:4], "big"):
        raise ValueError("a row of kept links fails its checksum")
    return blob


def damaged(path: Path, exc: BaseException) -> StoreError:
    """The one-line error of a state that cannot be read back."""
    return StoreError(
        f"the OPIC state {path} is damaged ({_one_line(exc)}): nothing was changed; move it "
        "away (or delete the JOBDIR) to start afresh"
    )


class DamagedRow(StoreError):
    """A row of a state in use (a page's key and URL, a request) fails its checksum: read
    mid-crawl, long after the resume's checks. The rest of the state is sound."""


def damaged_row(path: Path, what: str) -> DamagedRow:
    return DamagedRow(f"the OPIC state {path} has a damaged row ({what})")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def _crc(data: bytes) -> bytes:
    return zlib.crc32(data).to_bytes(4, "big")


def _key_bytes(key: Any) -> bytes:
    if isinstance(key, bytes):
        return key
    return str(key).encode("utf-8", "surrogatepass")


def row_crc(key: Any, text: bytes | str | None) -> int:
    """The CRC-32 of a row of page key and URL, or of page key and request data."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    return zlib.crc32(text or b"", zlib.crc32(_key_bytes(key) + b"\x00"))


def _checked(blob: bytes) -> bytes:
    """The data of a ``CRC-32 + data`` column (:class:`ValueError` if it fails its checksum)."""
    data = blob[4:]
    if len(blob) < 4 or zlib.crc32(data) != int.from_bytes(blob[:4], "big"):
        raise ValueError("a row fails its checksum")
    return data


Layout = list[tuple[str, str, tuple[int, ...]]]


def layout_of(columns: dict[str, np.ndarray]) -> Layout:
    """The row layout of a block: ``(name, dtype, shape of a page's row)`` per column."""
    return [(name, a.dtype.str, tuple(a.shape[1:])) for name, a in columns.items()]


def _width(dtype: str, shape: tuple[int, ...]) -> int:
    return BLOCK * np.dtype(dtype).itemsize * math.prod(shape)


def pack_block(columns: dict[str, np.ndarray], layout: Layout, b: int) -> bytes:
    """Block ``b`` of ``columns`` (rows ``b*BLOCK ..``, zero-padded past an array's end) behind
    its CRC-32."""
    lo, hi = b * BLOCK, (b + 1) * BLOCK
    parts = []
    for name, _dtype, shape in layout:
        a = columns[name]
        seg = a[lo:hi]
        if len(seg) < BLOCK:
            seg = np.concatenate([seg, np.zeros((BLOCK - len(seg), *shape), a.dtype)])
        parts.append(seg.tobytes())
    data = b"".join(parts)
    return _crc(data) + data


def unpack_blocks(blobs: Sequence[bytes], layout: Layout) -> dict[str, np.ndarray]:
    """The columns of consecutive blocks (``len(blobs) * BLOCK`` rows each); each block's
    checksum and size are checked (:class:`ValueError`)."""
    size = sum(_width(dtype, shape) for _name, dtype, shape in layout)
    datas = []
    for blob in blobs:
        data = _checked(bytes(blob))
        if len(data) != size:
            raise ValueError(f"a block of {len(data)} bytes, not {size}")
        datas.append(data)
    raw = np.frombuffer(b"".join(datas), np.uint8).reshape(len(datas), size)
    out, off = {}, 0
    for name, dtype, shape in layout:
        width = _width(dtype, shape)
        col = np.ascontiguousarray(raw[:, off : off + width])
        out[name] = col.view(np.dtype(dtype)).reshape(len(datas) * BLOCK, *shape)
        off += width
    return out


class HashedKeys:
    """Page keys known by their 64-bit hashes alone (an engine's
    :class:`~scrapy_opic.opic.engine.PageKeys` over a :class:`~scrapy_opic.opic.index.KeyIndex`):
    a key finds its page, a page does not tell its key. What a loaded snapshot has."""

    def __init__(self, index: KeyIndex) -> None:
        self.index = index

    def get(self, key: Hashable) -> int | None:
        return self.index.get_hash(key_hash(key))

    def add(self, key: Hashable, i: int) -> None:
        if self.index.add_hash(key_hash(key)) != i:
            raise RuntimeError(f"page {i}: every page of a hashed index needs a key")

    def key_of(self, i: int) -> Hashable | None:
        return None

    def nbytes(self) -> int:
        return self.index.nbytes()


class StoredKeys:
    """The page keys of the embedded store (an engine's :class:`~scrapy_opic.opic.engine.PageKeys`):
    in memory only a :class:`~scrapy_opic.opic.index.KeyIndex` of the keys' 64-bit hashes
    (about 15 bytes per page); a key itself is a row of the store, read back when asked for,
    except those of the pages added since the last checkpoint, which wait here to be written.

    Two keys with the same 64-bit hash are one page (see :mod:`~scrapy_opic.opic.index` for
    the odds)."""

    def __init__(
        self, index: KeyIndex, load: Callable[[int], Hashable | None], written: int
    ) -> None:
        self.index = index
        self._load = load
        self.written = written  #: pages whose keys are rows of the store
        self.recent: list[Hashable] = []  #: keys of pages ``written ..``
        self._last: tuple[Any, int] = (None, 0)

    def get(self, key: Hashable) -> int | None:
        h = key_hash(key)
        self._last = (key, h)  # (the engine adds a key right after it looked it up)
        return self.index.get_hash(h)

    def add(self, key: Hashable, i: int) -> None:
        last = self._last
        j = self.index.add_hash(last[1] if last[0] is key else key_hash(key))
        if j != i or i != self.written + len(self.recent):
            raise RuntimeError(f"page {i} got index id {j}: every page of this store needs a key")
        self.recent.append(key)

    def key_of(self, i: int) -> Hashable | None:
        k = i - self.written
        if k >= 0:
            return self.recent[k] if k < len(self.recent) else None
        return self._load(i)

    def take(self) -> list[Hashable]:
        """The keys not written yet, which the caller writes now."""
        keys, self.recent = self.recent, []
        self.written += len(keys)
        return keys

    def nbytes(self) -> int:
        return self.index.nbytes()


@dataclass
class Saved:
    """A loaded snapshot: the engine (keys: a compact index), the per-page frontier arrays,
    the aliases, tier codes and meta."""

    engine: OpicEngine
    status: np.ndarray  #: uint8 by id
    outcome: np.ndarray  #: uint16 by id: how each page's last fetch ended
    tier: np.ndarray  #: uint32 by id: the tier code of a page with a request, else 0
    alias: dict = field(default_factory=dict)  #: page -> the page it redirects to (ids)
    tiers: list = field(default_factory=list)  #: (priority, slot) of codes 1, 2...
    meta: dict = field(default_factory=dict)
    continuous: bool = False
    discovery_debt: float = 0.0
    failed_visits: int = 0
    #: A crawl that refetched by change: its refresher's arrays (``r.<name>``) and budget.
    refresh: dict = field(default_factory=dict)
    refetch_budget: float = 0.0
    #: The kept links (:meth:`StateReader.links`), when the crawl kept them.
    links: tuple | None = None


class StateLock:
    """An exclusive lock on a state file between crawls, in this process or any other (an
    advisory ``flock`` on the file: the kernel drops it when its process ends, even by
    ``kill -9``, so a crashed crawl never leaves a stale lock). Readers do not take it.

    The file is created (empty) if it does not exist; :meth:`release` with ``discard`` removes
    it again if this lock created it and nothing was written to it since."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        existed = self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open the OPIC state {self.path}: {exc.strerror}") from None
        self.created = not existed
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = None
            raise StateInUse(
                f"the OPIC state {self.path} is in use by another running crawl"
            ) from None

    def release(self, discard: bool = False) -> None:
        if self._fd is None:
            return
        try:
            if discard and self.created and os.fstat(self._fd).st_size == 0:
                with contextlib.suppress(OSError):
                    self.path.unlink()
        finally:
            os.close(self._fd)
            self._fd = None


class StateInUse(StoreError):
    """The state file is locked by another running crawl."""


class SqliteStore:
    """Write a crawl's OPIC state in ``path`` (created if missing), holding its
    :class:`StateLock` (taken here unless given) until :meth:`close`.

    ``fresh``: the state starts empty, but the rows already there (a previous crawl's state) are
    deleted in the same transaction as the first commit: a crawl that fails before its first
    commit, or is killed, leaves the previous state as it was."""

    def __init__(
        self, path: str | os.PathLike, lock: StateLock | None = None, fresh: bool = False
    ) -> None:
        self.path = Path(path)
        self._failed = ""
        self.lock = lock or StateLock(self.path)
        try:
            _check_sqlite(self.path)
            # Into WAL mode first, on a connection of our own: a reader still inside a read
            # transaction of the closed state (an export) makes the switch wait for it, up to
            # BUSY_TIMEOUT seconds, instead of failing at once.
            _into_wal(self.path)
            self.db = SqliteDict(
                str(self.path),
                tablename="opic",
                flag="c",
                autocommit=False,
                journal_mode="WAL",  # already so: a no-op that takes no lock
                encode=encode_row,
                decode=decode_row,
                outer_stack=False,
            )
        except StoreError:
            if lock is None:
                self.lock.release()
            raise
        except Exception as exc:  # sqlite3.DatabaseError, RuntimeError from sqlitedict...
            if lock is None:
                self.lock.release()
            raise StoreError(f"cannot open OPIC state {self.path}: {_one_line(exc)}") from None
        conn = self.db.conn
        if fresh:
            # Queued, not committed: it lands with the first commit's rows, in one transaction
            # (the DELETE opens it; sqlite's DDL is transactional).
            conn.execute('DELETE FROM "opic"')
            for table in _TABLES:
                conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{BLOCKS_TABLE}" (b INTEGER PRIMARY KEY, data BLOB)'
        )
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{PAGES_TABLE}" '
            "(id INTEGER PRIMARY KEY, key BLOB, url TEXT, crc INTEGER)"
        )
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{REQUESTS_TABLE}" '
            "(id INTEGER PRIMARY KEY, key BLOB, data BLOB, crc INTEGER)"
        )
        #: What the last commit wrote: blocks, new pages, bytes, and the seconds it took to
        #: build its rows (in the caller's thread).
        self.last_commit: dict[str, float] = {}
        # Request rows not queued yet: page -> (id, key, data, crc), or None (deleted).
        self._requests: dict[int, tuple | None] = {}
        # The pages of _requests that had no row before it: deleted before they are queued,
        # they need no statement at all (in a one-pass crawl, most requests are popped soon
        # after they are filed).
        self._new_rows: set[int] = set()

    def check(self) -> None:
        """Raise :class:`StoreError` if sqlitedict's writer thread failed or died (a full disk,
        an I/O error): every later call that waits for it would otherwise hang for good. Once
        a write has failed, every later call fails the same way (the transaction is lost, and
        the file holds the last commit). Cheap: a crawl asks at every upkeep tick, so that a
        failed background commit stops it within seconds even when nothing else is written."""
        if self._failed:
            raise StoreError(self._failed)
        conn = self.db.conn
        try:
            conn.check_raise_error()
        except Exception as exc:
            self._fail(exc)
        if not conn.is_alive():
            self._failed = f"OPIC state {self.path}: its writer thread has stopped"
            raise StoreError(self._failed)

    def _fail(self, exc: BaseException) -> None:
        self._failed = f"OPIC state {self.path}: sqlite failed: {_one_line(exc)}"
        raise StoreError(self._failed) from None

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """Around every call into sqlitedict: its writer thread's failure (which sqlitedict
        re-raises in whichever call comes next) is a :class:`StoreError`."""
        self.check()
        try:
            yield
        except (sqlite3.Error, RuntimeError) as exc:
            self._fail(exc)

    # -- rows read and written as the crawl goes ----------------------------------------------
    # Request rows change at every schedule and pop: they are gathered here, the last change
    # of each page winning (a row, or None: deleted), and written by one executemany per
    # REQUEST_BATCH changes and at every commit, not one queued statement each. They would be
    # lost with the process all the same until the next commit.
    def put_request(self, i: int, key: Hashable, data: bytes | None, new: bool = False) -> None:
        """Page ``i`` waits with the request ``data`` (``None``: one that could not be
        serialized, which a restart loses); ``new``: the page has no request row yet."""
        if new and i not in self._requests:
            self._new_rows.add(i)
        self._requests[i] = (i, key, data, row_crc(key, data))
        if len(self._requests) >= REQUEST_BATCH:
            self._flush_requests()

    def get_request(self, i: int) -> tuple[Hashable, bytes | None] | None:
        """``(key, request data)`` of page ``i`` (data ``None`` for a request that was not
        serialized), or ``None`` if it has no row. A damaged row is a :class:`StoreError`."""
        if i in self._requests:
            row = self._requests[i]
            return None if row is None else (row[1], row[2])
        with self._io():
            row = self.db.conn.select_one(
                f'SELECT key, data, crc FROM "{REQUESTS_TABLE}" WHERE id = ?', (i,)
            )
        if row is None:
            return None
        if row_crc(row[0], row[1]) != row[2]:
            raise damaged_row(self.path, f"the request of page {i} fails its checksum")
        return row[0], row[1]

    def del_request(self, i: int) -> None:
        if i in self._new_rows:  # (never queued: nothing to delete)
            self._new_rows.discard(i)
            del self._requests[i]
            return
        self._requests[i] = None
        if len(self._requests) >= REQUEST_BATCH:
            self._flush_requests()

    def _flush_requests(self) -> None:
        """Queue the request rows changed since the last flush."""
        changes, self._requests = self._requests, {}
        self._new_rows = set()
        rows = [row for row in changes.values() if row is not None]
        gone = [(i,) for i, row in changes.items() if row is None]
        with self._io():
            conn = self.db.conn
            if rows:
                conn.executemany(
                    f'INSERT OR REPLACE INTO "{REQUESTS_TABLE}" (id, key, data, crc) '
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
            if gone:
                conn.executemany(f'DELETE FROM "{REQUESTS_TABLE}" WHERE id = ?', gone)

    def get_page(self, i: int) -> tuple[Hashable, str | None] | None:
        """``(key, url)`` of page ``i`` if its row is written (queued writes included)."""
        with self._io():
            row = self.db.conn.select_one(
                f'SELECT key, url, crc FROM "{PAGES_TABLE}" WHERE id = ?', (i,)
            )
        if row is None:
            return None
        if row_crc(row[0], row[1]) != row[2]:
            raise damaged_row(self.path, f"the key and URL of page {i} fail their checksum")
        return row[0], row[1]

    # -- checkpoints -------------------------------------------------------------------------
    def commit(
        self, frontier: SqliteFrontier, meta: dict | None = None, blocking: bool = True
    ) -> None:
        """Write a checkpoint of ``frontier`` and commit it with everything pending, in one
        transaction: the engine's scalars, the blocks of the pages changed since the last
        checkpoint (:meth:`SqliteFrontier.take_dirty`), the rows of the pages added since.

        The rows are built here, in the caller's thread; sqlitedict's writer thread writes
        them. ``blocking=False`` returns without waiting for the disk (a crawl's periodic
        commits: the Scrapy reactor need not wait for the write); until the write lands, a
        reader or a crash sees the previous commit, never part of this one."""
        with self._io():  # a previous (non-blocking) commit that failed stops the crawl here
            self._commit(frontier, meta, blocking)

    def _commit(self, frontier: SqliteFrontier, meta: dict | None, blocking: bool) -> None:
        started = time.perf_counter()
        self._flush_requests()
        engine = frontier.engine
        n = engine.n
        conn = self.db.conn
        columns = frontier.columns()
        layout = layout_of(columns)
        written = frontier.keys.written
        self.db["engine"] = engine.header()
        self.db["frontier"] = {
            "format": FORMAT,
            "n": n,
            "block": BLOCK,
            "layout": layout,
            "alias": frontier.alias,
            "tiers": frontier.tiers.as_list(),
            "continuous": frontier.continuous,
            "links": frontier.keep_links,
            "discovery_debt": frontier.discovery_debt,
            "fetched": frontier.n_ok,
            "failed_visits": frontier.failed_visits,
            "refetch_budget": frontier.refresher.planner.budget if frontier.refresher else 0.0,
        }
        new = page_bytes = 0
        if n > written:
            keys, urls = frontier.keys.take(), frontier.take_urls()
            new = len(keys)
            page_bytes = sum(map(len, filter(None, urls))) + sum(
                len(k) if isinstance(k, (bytes, str)) else 8 for k in keys
            )
            conn.executemany(
                f'INSERT OR REPLACE INTO "{PAGES_TABLE}" (id, key, url, crc) VALUES (?, ?, ?, ?)',
                [
                    (i, k, u, row_crc(k, u))
                    for i, k, u in zip(range(written, n), keys, urls, strict=True)
                ],
            )
        blocks = frontier.take_dirty()
        if n > written:  # the blocks of the new pages
            blocks.update(range(written >> BLOCK_SHIFT, (n + BLOCK - 1) >> BLOCK_SHIFT))
        rows = [(b, pack_block(columns, layout, b)) for b in sorted(blocks) if b * BLOCK < n]
        del columns  # (views of the frontier's arrays: they must be free to grow again)
        conn.executemany(f'INSERT OR REPLACE INTO "{BLOCKS_TABLE}" (b, data) VALUES (?, ?)', rows)
        if frontier.keep_links:
            self._write_links(frontier.take_link_changes())
        if meta is not None:
            self.db["meta"] = meta
        self.last_commit = {
            "blocks": len(rows),
            "block_bytes": sum(len(r[1]) for r in rows),
            "pages": new,
            "page_bytes": page_bytes,
            "seconds": time.perf_counter() - started,
        }
        # A COMMIT statement, not sqlitedict's own commit request: the writer thread runs a
        # statement inside its error handling, so a COMMIT the disk refuses (a full disk:
        # the WAL is written at commit) is recorded and raised at the next call; its commit
        # request would kill the thread instead, and leave a blocking call waiting for good.
        if blocking:
            conn.select_one("COMMIT")
        else:
            conn.execute("COMMIT")

    def _write_links(self, changes: dict[int, list[int] | int | None]) -> None:
        """Queue the rows of the pages whose kept links changed (inside the transaction that
        the snapshot rows opened: sqlite's DDL is transactional too)."""
        conn = self.db.conn
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{LINKS_TABLE}" '
            "(id INTEGER PRIMARY KEY, links BLOB NOT NULL, alias INTEGER)"
        )
        if not changes:
            return
        lists = {i: v for i, v in changes.items() if isinstance(v, list)}
        blobs = encode_links(list(lists), list(lists.values()))
        insert = f'INSERT OR REPLACE INTO "{LINKS_TABLE}" (id, links, alias) VALUES (?, ?, ?)'
        delete = f'DELETE FROM "{LINKS_TABLE}" WHERE id = ?'
        for i, blob in zip(lists, blobs):
            conn.execute(insert, (i, links_row(blob), None))
        for i, v in changes.items():
            if v is None:
                conn.execute(delete, (i,))
            elif not isinstance(v, list):
                conn.execute(insert, (i, links_row(b"", v), v))

    def close(self) -> None:
        """Commit nothing more, close, and release the lock. The file goes back to a plain
        rollback journal, so a finished state is one self-contained file that readers open
        without creating the WAL's side files; if a reader is busy with it right now, it simply
        stays in WAL mode."""
        try:
            if self._failed or not self.db.conn.is_alive():
                # A write failed (said once, by the crawl's error line) or the writer died:
                # nothing would answer a clean close, and its error is the one already said.
                with contextlib.suppress(Exception):
                    self.db.close(do_log=False, force=True)
                return
            self.db.close()
            with contextlib.suppress(sqlite3.Error):
                con = sqlite3.connect(str(self.path), timeout=0.5)
                try:
                    con.execute("PRAGMA journal_mode=DELETE")
                finally:
                    con.close()
        finally:
            self.lock.release()


def _into_wal(path: Path) -> None:
    """Switch ``path`` into WAL mode, retrying while a reader holds it: the switch needs an
    exclusive lock, and SQLite answers "database is locked" at once rather than calling its
    busy handler for it."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        con = sqlite3.connect(str(path), timeout=1.0)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        finally:
            con.close()
        time.sleep(0.05)


def _quick_check(con: sqlite3.Connection, size: int) -> None:
    """SQLite's ``quick_check``: of the whole file up to :data:`CHECK_WHOLE_BYTES`; beyond, of
    what a resume reads, the table of scalars and the blocks, not the rows of keys, URLs and
    requests, which a resume does not read (each is checked against its CRC-32 when read): at
    ten million pages those are gigabytes, a minute of a slow disk for a check. An SQLite
    without per-table checks (older than 3.33) checks the whole file."""
    if size <= CHECK_WHOLE_BYTES or sqlite3.sqlite_version_info < (3, 33, 0):
        rows = con.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:
            raise sqlite3.DatabaseError(rows[0][0])
        return
    tables = ["opic"]
    if con.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (BLOCKS_TABLE,)
    ).fetchone():
        tables.append(BLOCKS_TABLE)
    for table in tables:
        rows = con.execute(f'PRAGMA quick_check("{table}")').fetchall()
        if rows != [("ok",)]:
            raise sqlite3.DatabaseError(rows[0][0])


def _check_format(path: Path, fr: Any) -> None:
    found = fr.get("format") if isinstance(fr, dict) else None
    if found == FORMAT:
        if fr.get("block") != BLOCK:
            raise StoreError(f"{path}: an OPIC state in blocks of {fr.get('block')} pages")
        return
    if isinstance(found, int) and 0 < found < FORMAT:
        raise StoreError(
            f"{path}: an OPIC state of format {found}, written by an older scrapy-opic (this "
            f"one reads format {FORMAT}): export it with the version that wrote it, or start "
            "afresh (move it away, or choose another JOBDIR or OPIC_STATE_PATH)"
        )
    raise StoreError(f"{path}: unknown OPIC state format {found!r} (expected {FORMAT})")


class StateReader:
    """Read-only view of one committed snapshot of a state file: for exports and reports, and
    for a crawl that resumes (which reads its state here, then opens it for writing).

    Opens the file read-only (``mode=ro``: this connection cannot write it) and reads every row
    inside one read transaction, so the engine, the blocks and the page rows all come from the
    same commit even while a crawl keeps committing (WAL mode: the crawl is not blocked either).
    ``check`` first runs SQLite's ``quick_check`` (a resume: a damaged page of the state is
    refused before anything is written). ``empty_ok``: a file with no committed state is not an
    error (:attr:`n` is then ``None``). A damaged or foreign file raises :class:`StoreError`.
    Use as a context manager, or call :meth:`close`.

    Memory: :meth:`columns` and :meth:`page_chunks` stream (one batch of blocks, one chunk of
    rows at a time); :meth:`saved` and :meth:`engine` load every page's arrays.
    """

    changes_kept = False

    def __init__(
        self, path: str | os.PathLike, check: bool = False, empty_ok: bool = False
    ) -> None:
        self.path = Path(path)
        self.n: int | None = None
        if not self.path.is_file():
            if empty_ok and not self.path.exists():
                return
            raise StoreError(f"no OPIC state at {self.path}")
        _check_sqlite(self.path)
        if empty_ok and self.path.stat().st_size == 0:
            return
        try:
            self._con = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None
            )
            if check:
                _quick_check(self._con, self.path.stat().st_size)
            self._con.execute("BEGIN")  # one snapshot for every read below
            tables = self._con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ).fetchall()
            if ("opic",) not in tables:
                if empty_ok and not tables:
                    self.close()
                    return
                if not tables:  # an empty database: a crawl creating its state this moment
                    raise StoreError(f"{self.path} holds no OPIC state yet")
                raise StoreError(f"{self.path} is not an OPIC state (another kind of sqlite file)")
            fr = self._get("frontier")
        except Exception as exc:
            self.close()
            if isinstance(exc, StoreError):
                raise
            raise damaged(self.path, exc) from None
        if fr is None:
            self.close()
            if empty_ok:
                return
            raise StoreError(f"{self.path} holds no OPIC state yet")
        try:
            _check_format(self.path, fr)
        except StoreError:
            self.close()
            raise
        self.n = fr["n"]
        self.alias: dict = fr["alias"]
        self.continuous: bool = fr["continuous"]
        #: ``(priority, download slot)`` of tier codes 1, 2...
        self.tiers: list = fr["tiers"]
        #: Whether the crawl kept its pages' out-links (``OPIC_KEEP_LINKS``): :meth:`links`.
        self.links_kept: bool = bool(fr["links"])
        self._layout: Layout = [(name, dt, tuple(shape)) for name, dt, shape in fr["layout"]]
        self.discovery_debt = float(fr.get("discovery_debt", 0.0))
        #: Pages whose last fetch was parsed, and visits of failed fetches (None: a state
        #: saved before they were kept).
        self.fetched: int | None = fr.get("fetched")
        self.failed_visits: int | None = fr.get("failed_visits")
        self.refetch_budget = float(fr.get("refetch_budget", 0.0))
        #: Whether the crawl refetched by freshness: its pages' change observations are saved.
        self.changes_kept = any(name.startswith("r.") for name, *_ in self._layout)

    def _get(self, key: str) -> Any:
        try:
            row = self._con.execute("SELECT value FROM opic WHERE key = ?", (key,)).fetchone()
            return None if row is None else decode_row(row[0])
        except Exception as exc:  # sqlite3.DatabaseError, a checksum, unpickling
            raise damaged(self.path, exc) from None

    def meta(self) -> dict:
        return self._get("meta") or {}

    def header(self) -> dict:
        """The engine's parameters and scalars (:meth:`OpicEngine.header`)."""
        header = self._get("engine")
        if not isinstance(header, dict) or header.get("scalars", {}).get("n") != self.n:
            raise damaged(self.path, ValueError("the engine row does not match the frontier's"))
        return header

    def header_engine(self, **engine_kw: Any) -> OpicEngine:
        """An engine with the snapshot's parameters and scalars and no page loaded (its arrays
        are zeros that take no memory until written): for figures and formulas that need only
        the scalars, and as the template of :meth:`chunk_engine`."""
        try:
            return OpicEngine.from_header(self.header(), **engine_kw)
        except StoreError:
            raise
        except Exception as exc:
            raise damaged(self.path, exc) from None

    def columns(
        self, names: Collection[str] | None = None, batch: int = READ_BLOCKS
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``(first page id, {column: rows})`` for consecutive runs of pages, ``batch`` blocks at
        a time, in id order: the columns ``names`` (all by default) of the per-page arrays,
        ``f.status``, ``f.outcome``, ``f.tier`` and ``f.hash`` (the frontier's) and the
        engine's (:meth:`OpicEngine.page_arrays`). Each block's checksum is checked."""
        n = self.n or 0
        wanted = [c[0] for c in self._layout] if names is None else list(names)
        nblocks = (n + BLOCK - 1) >> BLOCK_SHIFT
        try:
            for start in range(0, nblocks, batch):
                stop = min(nblocks, start + batch)
                rows = self._con.execute(
                    f'SELECT b, data FROM "{BLOCKS_TABLE}" WHERE b >= ? AND b < ? ORDER BY b',
                    (start, stop),
                ).fetchall()
                if [b for b, _ in rows] != list(range(start, stop)):
                    raise ValueError(f"page blocks {start}..{stop - 1} are not all there")
                cols = unpack_blocks([blob for _, blob in rows], self._layout)
                lo, hi = start * BLOCK, min(n, stop * BLOCK)
                yield lo, {name: cols[name][: hi - lo] for name in wanted}
        except StoreError:
            raise
        except Exception as exc:
            raise damaged(self.path, exc) from None

    def saved(self, **engine_kw: Any) -> Saved | None:
        """The whole snapshot, loaded and checked (``None`` if the file holds none yet): every
        page's arrays in memory (for a resume)."""
        if self.n is None:
            return None
        n = self.n
        engine = self.header_engine(**engine_kw)
        try:
            nblocks = (n + BLOCK - 1) >> BLOCK_SHIFT
            engine._grow(max(1, nblocks * BLOCK))
            targets = engine.page_arrays()
            status = np.zeros(n, np.uint8)
            outcome = np.zeros(n, np.uint16)
            tier = np.zeros(n, np.uint32)
            hashes = np.zeros(n, np.uint64)
            own: dict[str, np.ndarray] = {
                "f.status": status,
                "f.outcome": outcome,
                "f.tier": tier,
                "f.hash": hashes,
            }
            names = {c[0] for c in self._layout}
            refresh: dict[str, np.ndarray] = {}
            if any(name.startswith("r.") for name in names):
                refresh = {f"r.{f}": np.zeros(n) for f in REFRESH_COLUMNS}
            if names != set(targets) | set(own) | set(refresh):
                raise ValueError(f"columns {sorted(names)} do not fit the engine")
            for lo, cols in self.columns():
                for name, rows in cols.items():
                    where = own if name in own else refresh if name in refresh else targets
                    where[name][lo : lo + len(rows)] = rows
            del targets
            self._check(engine, status, tier)
            engine.keys = HashedKeys(KeyIndex.from_hashes(hashes))
        except StoreError:
            raise
        except Exception as exc:
            raise damaged(self.path, exc) from None
        return Saved(
            engine,
            status,
            outcome,
            tier,
            dict(self.alias),
            list(self.tiers),
            self.meta(),
            self.continuous,
            self.discovery_debt,
            self.failed_visits or 0,
            refresh,
            self.refetch_budget,
        )

    def _check(self, engine: OpicEngine, status: np.ndarray, tier: np.ndarray) -> None:
        """:class:`ValueError` if the loaded pages do not hold together: their count, statuses,
        tiers and aliases in range, the total cash 1."""
        n = self.n or 0
        if engine.n != n:
            raise ValueError(f"{n} pages in the frontier, {engine.n} in the engine")
        if n and int(status.max()) >= len(STATUSES):
            raise ValueError("a page status out of range")
        if n and int(tier.max()) > len(self.tiers):
            raise ValueError("a tier code out of range")
        if not isinstance(self.alias, dict) or any(
            not (0 <= i < n and 0 <= j < n) for i, j in self.alias.items()
        ):
            raise ValueError("a redirect alias out of range")
        cash = engine.total_cash()
        if not math.isfinite(cash) or abs(cash - 1.0) > 1e-3:
            raise ValueError(f"total cash {cash!r}, not 1")

    def engine(self, **engine_kw: Any) -> OpicEngine:
        """The engine of the snapshot, every page loaded (keys: their hashes only)."""
        saved = self.saved(**engine_kw)
        if saved is None:
            raise StoreError(f"{self.path} holds no OPIC state yet")
        return saved.engine

    def page_chunks(self, first: int = 0) -> Iterator[tuple[int, list[tuple[Any, str | None]]]]:
        """``(first id, [(key, url), ...])`` per chunk of :data:`CHUNK` pages, from chunk
        ``first``: one chunk in memory at a time."""
        n = self.n or 0
        for lo in range(first * CHUNK, n, CHUNK):
            hi = min(n, lo + CHUNK)
            try:
                rows = self._con.execute(
                    f'SELECT id, key, url, crc FROM "{PAGES_TABLE}" WHERE id >= ? AND id < ? '
                    "ORDER BY id",
                    (lo, hi),
                ).fetchall()
            except Exception as exc:
                raise damaged(self.path, exc) from None
            if len(rows) != hi - lo or (rows and (rows[0][0], rows[-1][0]) != (lo, hi - 1)):
                raise damaged(self.path, ValueError(f"page rows {lo}..{hi - 1} missing"))
            if any(row_crc(key, url) != crc for _i, key, url, crc in rows):
                raise damaged(self.path, ValueError("a page row fails its checksum"))
            yield lo, [(key, url) for _i, key, url, _crc in rows]

    def urls_of(self, ids: Sequence[int]) -> dict[int, str | None]:
        """The URL of each page in ``ids``."""
        out: dict[int, str | None] = {}
        try:
            for i in ids:
                row = self._con.execute(
                    f'SELECT key, url, crc FROM "{PAGES_TABLE}" WHERE id = ?', (int(i),)
                ).fetchone()
                if row is not None and row_crc(row[0], row[1]) != row[2]:
                    raise ValueError(f"the row of page {i} fails its checksum")
                out[int(i)] = None if row is None else row[1]
        except Exception as exc:
            raise damaged(self.path, exc) from None
        return out

    def links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The kept links of the snapshot (empty arrays if it kept none): ``(pages, counts,
        targets, alias_pages, alias_targets)``, page ``pages[k]`` linking to the next
        ``counts[k]`` of ``targets`` (int32; pages in id order), and each page of
        ``alias_pages`` redirected to the one at the same place in ``alias_targets``. Every
        row's checksum is checked: a damaged one is a :class:`StoreError`.

        Rows are decoded :data:`LINKS_READ_ROWS` at a time: the memory beyond the result (4
        bytes per link, 16 per page) is that of one batch."""
        pages = array("q")
        counts: list[np.ndarray] = []
        targets: list[np.ndarray] = []
        alias_pages: list[int] = []
        alias_targets: list[int] = []
        try:
            tables = self._con.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LINKS_TABLE,)
            ).fetchone()
            if tables:
                cursor = self._con.execute(
                    f'SELECT id, links, alias FROM "{LINKS_TABLE}" ORDER BY id'
                )
                while rows := cursor.fetchmany(LINKS_READ_ROWS):
                    blobs = []
                    for i, row, alias in rows:
                        blob = links_blob(row, alias)
                        if alias is None:
                            pages.append(i)
                            blobs.append(blob)
                        else:
                            alias_pages.append(i)
                            alias_targets.append(alias)
                    c, t = decode_links(blobs)
                    if t.size and t.max() >= 2**31:
                        raise ValueError("a kept link to a page id over 2**31")
                    counts.append(c)
                    targets.append(t.astype(np.int32))
        except Exception as exc:
            raise damaged(self.path, exc) from None
        return (
            np.frombuffer(pages, np.int64) if pages else np.zeros(0, np.int64),
            np.concatenate(counts) if counts else np.zeros(0, np.int64),
            np.concatenate(targets) if targets else np.zeros(0, np.int32),
            np.array(alias_pages, np.int64),
            np.array(alias_targets, np.int64),
        )

    def requests(self) -> Iterator[tuple[int, Any, bytes | None]]:
        """``(page id, key, request data)`` of every stored request (a JOBDIR crawl's pending
        pages; data ``None`` for one that could not be serialized)."""
        try:
            cursor = self._con.execute(f'SELECT id, key, data, crc FROM "{REQUESTS_TABLE}"')
            for i, key, data, crc in cursor:
                if row_crc(key, data) != crc:
                    raise ValueError(f"the request row of page {i} fails its checksum")
                yield i, key, data
        except Exception as exc:
            raise damaged(self.path, exc) from None

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            with contextlib.suppress(Exception):
                con.close()
            del self._con

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SqliteFrontier(MemoryFrontier):
    """The embedded frontier: a :class:`~scrapy_opic.opic.frontier.MemoryFrontier` whose state is
    checkpointed to a sqlite file (:class:`SqliteStore`) every ``commit_visits`` visits or
    ``commit_seconds`` seconds, and at close. Open one with :meth:`open`.

    In memory, per page: the engine's arrays, the status, outcome and tier code, the selection's
    heap entry and the key's hash in the index; the keys and URLs are rows of the file (those of
    the pages added since the last checkpoint wait in memory until it).

    With ``persist_requests`` (a resumable crawl: Scrapy's JOBDIR), every pending request is a
    row of the file, written as it changes, so that a resumed crawl finds its pending pages
    again; up to ``memory_requests`` of them also stay in memory (a pop from memory skips the
    row read and the decoding), the others are handed out as the bytes of their row. A payload
    that ``encode`` cannot serialize (it returns ``None``) stays in memory only: it does not
    survive a restart (the page is given up then). Without ``persist_requests``, payloads live
    in memory only and each crawl starts afresh; the checkpoints are there for the export
    commands.

    A checkpoint writes the blocks of the pages changed since the previous one: the pages a
    visit took cash from or paid, those whose status changed, and the new ones. A kill -9
    loses at most the visits since the last committed checkpoint: on resume those pages are
    pending again (their fetches are repeated) and the total cash is 1.
    """

    def __init__(
        self,
        engine: OpicEngine,
        store: SqliteStore,
        *,
        strategy: str = "greedy",
        continuous: bool = False,
        seed: int | None = None,
        persist_requests: bool = False,
        memory_requests: int = 1000,
        encode: Callable[[Any], bytes | None] = lambda payload: None,
        commit_visits: int = 500,
        commit_seconds: float = 10.0,
        meta: dict | None = None,
        keep_links: bool = False,
        refresher: Refresher | None = None,
    ) -> None:
        if not isinstance(engine.keys, StoredKeys):
            raise TypeError("a SqliteFrontier's engine keeps its keys in the store (StoredKeys)")
        self.keys: StoredKeys = engine.keys
        self._urls: list[str | None] = []  # URLs of pages self.keys.written ..
        self._dirty: set[int] = set()  # blocks changed since the last checkpoint
        super().__init__(
            engine, strategy, continuous, seed, keep_links=keep_links, refresher=refresher
        )
        self.store = store
        self.location = str(store.path)
        self.maintain_interval = max(0.05, commit_seconds / 2)
        self._persist = persist_requests
        self._memory_requests = memory_requests
        self._encode = encode
        #: Pending requests also in memory (a persisting frontier): page -> (key, payload).
        self._cache: dict[int, tuple[Hashable, Any]] = {}
        self._commit_visits = commit_visits
        self._commit_seconds = commit_seconds
        self._meta = dict(meta or {})
        self._last_commit = time.monotonic()
        self._next_commit = self._commit_after(engine.visit_count)
        #: Whether a checkpoint may be taken now. The scheduler answers no while links that a
        #: visit paid still have to come back with their requests: a checkpoint taken then
        #: would hold those pages without a request, and a crawl resumed from it could never
        #: fetch them.
        self.ready: Callable[[], bool] = lambda: True
        self._due_since: float | None = None  # a checkpoint waits for ready() since then
        self.series = Series()
        self._started = time.monotonic()
        self._elapsed_before = 0.0  # crawl time of the runs this one resumes
        self._next_point = 0  # visit count at which the next series point is due
        self._popped = -1  # the page whose payload was last handed out
        #: Rows found damaged mid-crawl (their pages given up as ``damaged``).
        self.damaged_rows = 0

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        *,
        resume: bool,
        epsilon: float,
        refresh: float,
        window: str,
        accept: Callable[[dict], None] | None = None,
        **kw: Any,
    ) -> SqliteFrontier:
        """The frontier of the state file ``path``, holding its :class:`StateLock`
        (:class:`StateInUse` if another crawl holds it): the state saved there if ``resume``
        and there is one (its engine parameters are the saved ones), else a new frontier
        (``epsilon``, ``refresh``, ``window``) whose first commit replaces what the file held.

        A saved state is read and checked (read-only: SQLite's ``quick_check``, each block's
        checksum, the cash) and ``accept(meta)`` may refuse it by raising, all before the file
        is opened for writing: a state that is refused, damaged or foreign is left as it was.
        A state is resumed with the ``keep_links`` it was made with (else refused: the links of
        the pages fetched so far would be missing). ``kw``: see the class."""
        lock = StateLock(path)
        try:
            saved = None
            if resume and not lock.created and os.path.getsize(path) == 0:
                # A state a crawl wrote is never empty (the first thing it does is to write the
                # file's header): an empty file is one whose content was lost.
                raise damaged(Path(path), ValueError("the file is empty, 0 bytes"))
            if resume:
                with StateReader(path, check=True, empty_ok=True) as reader:
                    if reader.n is not None:
                        if accept is not None:
                            accept(reader.meta())
                        keep = bool(kw.get("keep_links", False))
                        if reader.links_kept != keep:
                            # Links missing for the pages fetched so far (or rows left to go
                            # stale): the graph's PageRank would be wrong, silently.
                            raise StoreError(
                                f"{path} holds a crawl made with OPIC_KEEP_LINKS="
                                f"{reader.links_kept}, resumed with {keep}: resume it with its "
                                "own value, or start afresh elsewhere"
                            )
                        # (Every links row's checksum, before anything is written.)
                        links = reader.links() if keep else None
                        saved = reader.saved()
                        if saved is not None:
                            saved.links = links
            store = SqliteStore(path, lock, fresh=saved is None)
        except BaseException:
            lock.release(discard=True)
            raise
        try:
            if saved is None:
                keys = StoredKeys(KeyIndex(), store_loader(store), 0)
                engine = OpicEngine(
                    epsilon=epsilon, refresh=refresh, window=parse_window(window), keys=keys
                )
                return cls(engine, store, **kw)
            engine = saved.engine
            kept = engine.keys
            assert isinstance(kept, HashedKeys)  # (a saved state's engine: its keys' index)
            engine.keys = StoredKeys(kept.index, store_loader(store), engine.n)
            frontier = cls(engine, store, **kw)
            frontier._resume(saved)
            return frontier
        except BaseException:
            store.close()
            raise

    def _resume(self, saved: Saved) -> None:
        back = self.restore(
            saved.status,
            saved.outcome,
            saved.tier,
            saved.tiers,
            saved.alias,
            # Without persisted requests nothing survives a restart: every pending page is
            # given up.
            payloads=None if self._persist else {},
        )
        self.discovery_debt = saved.discovery_debt
        self.failed_visits = saved.failed_visits
        r = self.refresher
        if r is not None:
            if saved.refresh:
                r.load(saved.refresh, saved.refetch_budget)
            if saved.links is not None:
                r.kept_from(*saved.links[:3])
            self.replan()
        self.series = Series.from_list(saved.meta.get("series", []))
        self._elapsed_before = self.series.last_elapsed()
        engine = self.engine
        self._next_commit = self._commit_after(engine.visit_count)
        total = self.total_cash()
        logger.info(
            "OPIC state resumed: %d pages known, %d pending (%d were in flight), %d visited; "
            "total cash %.12f",
            engine.n,
            self.counts[PENDING],
            back,
            self.counts[VISITED],
            total,
        )
        if abs(total - 1.0) > 1e-6:
            logger.warning("OPIC state %s: total cash is %.12f, not 1", self.store.path, total)

    # -- pages, keys and URLs --------------------------------------------------------------------
    def _added(self, i: int, url: str | None) -> None:
        self._urls.append(url)

    def _grow_urls(self) -> None:
        pass  # (no list of URLs by id here: the URLs are rows of the store)

    def _url_of(self, i: int) -> str | None:
        k = i - self.keys.written
        if k >= 0:
            return self._urls[k] if k < len(self._urls) else None
        row = self.store.get_page(i)
        return None if row is None else row[1]

    def take_urls(self) -> list[str | None]:
        """The URLs of the pages added since the last checkpoint (with :meth:`StoredKeys.take`,
        which the store calls at the same time)."""
        urls, self._urls = self._urls, []
        return urls

    # -- what changed since the last checkpoint --------------------------------------------------
    def columns(self) -> dict[str, np.ndarray]:
        """Every per-page array at capacity, by column name (the rows a checkpoint saves):
        views, to be dropped before the frontier grows again."""
        cols = self.engine.page_arrays()
        cols["f.status"] = np.frombuffer(self.status, np.uint8)
        cols["f.outcome"] = np.frombuffer(self.outcome, np.uint16)
        cols["f.tier"] = np.frombuffer(self.tier, np.uint32)
        cols["f.hash"] = self.keys.index.hashes
        if self.refresher is not None:
            cols.update(self.refresher.columns(len(cols["f.hash"])))
        return cols

    def take_dirty(self) -> set[int]:
        """The blocks changed since the last call (which start afresh)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def raised(self, i: int) -> None:
        self._dirty.add(i >> BLOCK_SHIFT)

    def taken(self, ids: Iterable[int]) -> None:
        for i in ids:
            self._dirty.add(i >> BLOCK_SHIFT)

    def changed(self, ids: Iterable[int]) -> None:
        self.taken(ids)

    def rebased(self) -> None:
        self._dirty.update(range((self.engine.n + BLOCK - 1) >> BLOCK_SHIFT))

    def _set(self, i: int, status: int) -> None:
        super()._set(i, status)
        self._dirty.add(i >> BLOCK_SHIFT)

    # -- payloads: rows of the store ---------------------------------------------------------
    # Without persisted requests, each pending page's key and payload wait in _cache (the key
    # at hand: a lease needs it, and the key of a page written at a checkpoint would otherwise
    # be read back from the file). In a one-pass crawl a payload is handed over with its
    # lease (hands_over_payloads): the frontier keeps no reference to it, so the scheduler
    # hands out the object itself, without a copy.
    @property
    def hands_over_payloads(self) -> bool:
        """A payload object a pop hands out is the caller's: the frontier keeps none (a
        one-pass crawl; a continuous one keeps it for the page's refetches)."""
        return not self.continuous

    def _has_payload(self, i: int) -> bool:
        return self.tier[i] != 0  # (a tier code: pending or in flight, with its payload)

    def _keep(self, i: int, payload: Any, key: Hashable = None) -> None:
        if key is None:
            key = self.engine.key_of(i)
        if not self._persist:
            self._cache[i] = (key, payload)
            return
        data = self._encode(payload)
        # (A page neither pending nor in flight has no request row: a new schedule.)
        self.store.put_request(i, key, data, new=self.status[i] in (DISCOVERED, VISITED))
        if data is None:  # cannot be serialized: in memory only (given up after a restart)
            self.payloads[i] = payload
            self._cache.pop(i, None)
            return
        self.payloads.pop(i, None)
        if i in self._cache or len(self._cache) < self._memory_requests:
            self._cache[i] = (key, payload)

    def _lease_parts(self, i: int) -> tuple[Hashable, Any]:
        self._popped = i
        try:
            return self._stored_parts(i)
        except DamagedRow as exc:
            self._damaged(i, exc)
            return None, DAMAGED_ROW

    def _stored_parts(self, i: int) -> tuple[Hashable, Any]:
        handed = not self.continuous  # (handed out for good: no place kept for it here)
        if self._persist:
            payload = self.payloads.pop(i, None) if handed else self.payloads.get(i)
            if payload is not None:  # (not serializable: in memory only)
                return self.engine.key_of(i), payload
        cached = self._cache.pop(i, None) if handed else self._cache.get(i)
        if cached is not None:
            return cached
        if not self._persist:
            return self.engine.key_of(i), MISSING
        row = self.store.get_request(i)
        if row is None or row[1] is None:
            return (None if row is None else row[0]), MISSING
        return row

    def _forget(self, i: int) -> None:
        self.payloads.pop(i, None)
        self._cache.pop(i, None)
        if self._persist:
            self.store.del_request(i)

    def release(self, leases: Iterable[Lease]) -> int:
        leases = list(leases)
        if not self._persist:  # a payload handed over comes back with its lease
            for lease in leases:
                i = self._held(lease)
                if i is not None and i not in self._cache and lease.payload is not None:
                    self._cache[i] = (lease.key, lease.payload)
        return super().release(leases)

    def _drop_payloads(self) -> None:
        super()._drop_payloads()
        self._cache.clear()

    # -- checkpoints -----------------------------------------------------------------------------
    def _commit_after(self, visits: int) -> int:
        """The visit count of the next checkpoint after one at ``visits``: the first visits
        double the count between checkpoints (1, 2, 4...) up to ``commit_visits``, so a crawl
        killed in its first seconds loses little; then every ``commit_visits``."""
        return visits + min(self._commit_visits, max(1, visits))

    def _visited(self, i: int) -> None:
        visits = self.engine.visit_count
        if visits >= self._next_point:
            self._record_point()
        if visits >= self._next_commit and self._due_since is None:
            # Due, taken at the next call once ready(): not inside the visit, whose links are
            # still on their way back to be filed.
            self._due_since = time.monotonic()

    def _commit_when_ready(self) -> None:
        """A checkpoint now if :attr:`ready`, else as soon as it is (the next schedule or
        upkeep); after ``commit_seconds`` of waiting, at once all the same (links that never
        came back, dropped on their way to the scheduler, must not stop the checkpoints)."""
        now = time.monotonic()
        if self._due_since is None:
            self._due_since = now
        if self.ready() or now - self._due_since >= self._commit_seconds:
            self.commit()

    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        codes = super().schedule(entries, again)
        if self._due_since is not None:
            self._commit_when_ready()
        return codes

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        if self._due_since is not None:
            self._commit_when_ready()
        while True:
            lease = super().pop(full_slots)
            if lease is None or (lease.payload is not MISSING and lease.payload is not DAMAGED_ROW):
                return lease
            # Its request did not survive (a restart lost it, or its row is gone or damaged):
            # give the page up, its cash to the virtual page, and take the next one. (By id:
            # the lease may not know the page's key.)
            i = self._popped
            if lease.payload is MISSING:
                logger.debug("OPIC: no request to fetch page %d with: given up", i)
                self._give_up(i, ERROR)
            else:
                self._give_up(i, DAMAGED)

    def _damaged(self, i: int, exc: DamagedRow) -> None:
        """Page ``i``'s stored request is damaged: the page is given up (``damaged``), and
        the crawl goes on. Said once (a warning); :attr:`damaged_rows` counts them."""
        self.damaged_rows += 1
        if self.damaged_rows == 1:
            logger.warning(
                "OPIC: %s: that page is given up with the status 'damaged' (its cash goes to "
                "the virtual page) and the crawl goes on; pages found so later are counted in "
                "the stat opic/damaged_rows, not logged",
                exc,
            )

    def url_of(self, i: int) -> str | None:
        try:
            return self._url_of(i)
        except DamagedRow as exc:  # (a figure for the log, the top page's URL: not worth a stop)
            self._damaged_url(exc)
            return None

    def _damaged_url(self, exc: DamagedRow) -> None:
        self.damaged_rows += 1
        if self.damaged_rows == 1:
            logger.warning("OPIC: %s: that page's URL is unknown from now on", exc)

    def figures(self) -> dict[str, float]:
        out = super().figures()
        out["damaged_rows"] = self.damaged_rows
        return out

    def maintain(self, leases: Collection[Lease]) -> None:
        self.store.check()  # a failed background commit stops the crawl now
        if (
            self._due_since is not None
            or time.monotonic() - self._last_commit >= self._commit_seconds
        ):
            self._commit_when_ready()

    def commit(self, wait: bool = False) -> None:
        """Write a checkpoint (one sqlite transaction), with a point of the crawl's time series
        (what ``scrapy opic-report`` plots). Without ``wait`` (the periodic ones) the rows are
        built here and written by the store's thread: until they land, a reader or a crash
        sees the previous checkpoint, never part of this one."""
        self._record_point()
        meta = {**self._meta, "series": self.series.as_list()}
        self.store.commit(self, meta, blocking=wait)
        self._due_since = None
        self._last_commit = time.monotonic()
        self._next_commit = self._commit_after(self.engine.visit_count)

    def _record_point(self, last: bool = False) -> None:
        """One point of the time series (O(1)); the series thins itself to a bounded length.
        ``last``: the crawl's final point, kept whatever the thinning stride."""
        e = self.engine
        if self.series.points and self.series.points[-1][1] == e.visit_count:
            return
        self.series.add(
            force=last,
            elapsed=self._elapsed_before + time.monotonic() - self._started,
            visits=e.visit_count,
            G=e.G,
            error_factor=e.error_factor,
            pages=e.n,
            fetched=self.n_ok,
            pending=self.counts[PENDING],
            virtual_cash=e.virtual_cash,
        )
        # About 50 points per tenfold growth of the crawl, whatever its length.
        self._next_point = e.visit_count + max(10, e.visit_count // 50)

    def close(self, leases: Collection[Lease]) -> None:
        try:
            self.release(leases)
            self._record_point(last=True)
            self.commit(wait=True)
        finally:
            self.store.close()
            self._drop_payloads()


def store_loader(store: SqliteStore) -> Callable[[int], Hashable | None]:
    """The key of a page whose row is written, read back from ``store``."""

    def load(i: int) -> Hashable | None:
        row = store.get_page(i)
        return None if row is None else row[0]

    return load


__all__ = [
    "BLOCK",
    "CHUNK",
    "DAMAGED_ROW",
    "MISSING",
    "DamagedRow",
    "Saved",
    "SqliteFrontier",
    "SqliteStore",
    "StateReader",
    "StoreError",
    "StoredKeys",
]
