"""The embedded store: a crawl of one process, its one partition checkpointed to one sqlite
file through sqlitedict (the file's layout: :mod:`.sqlite_state`).

Made for frontiers of tens of millions of pages in one process: in memory, a page is a row of
numpy arrays (the engine's, its status, outcome and tier code) and its key's 64-bit hash in a
compact index (:class:`~scrapy_opic.opic.index.KeyIndex`); its key, its URL and its pending
request are rows of the file (:class:`SqliteRows`, the partition's
:class:`~scrapy_opic.opic.frontier.PageRows`). A checkpoint writes what changed since the
previous one (:class:`DirtyBlocks`), never all pages, in one sqlite transaction with every
request row changed since the previous one: a process killed at any moment (``kill -9``) leaves
the last committed checkpoint, never half a visit. Pages that were in flight in it go back to
pending on load.

With ``persist_requests`` (a resumable crawl: Scrapy's JOBDIR), every pending request is a row
of the file, written as it changes, so that a resumed crawl finds its pending pages again; up to
``memory_requests`` of them also stay in memory (a pop from memory skips the row read and the
decoding), the others are handed out as the bytes of their row. A request that ``encode``
cannot serialize stays in memory only: it does not survive a restart (the page is given up
then). Without ``persist_requests``, requests live in memory only and each crawl starts afresh;
the checkpoints are there for the export commands.

The rows are built in the caller's thread and written by sqlitedict's own thread: a periodic
commit does not wait for the disk. A request row to pop is read on a connection of the
crawl's own thread (WAL: it sees committed rows, and never waits behind the writer's queue),
unless the row changed since the last commit known to have landed; that row, and every other
read (a key, a URL), goes through the writer's thread, which sees the writes queued before it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from sqlitedict import SqliteDict

from ..opic.config import CrawlConfig
from ..opic.constants import PENDING, VISITED
from ..opic.frontier import DAMAGED_PAYLOAD, LOST
from ..opic.index import KeyIndex, key_hash
from ..opic.links import encode_links
from ..opic.messages import Message, Note
from ..opic.partition import Partition
from ..opic.refresh import Refresher
from ..opic.snapshot import engine_arrays, engine_header, restore_frontier
from . import StoreError
from .sqlite_state import (
    BLOCK,
    BLOCK_SHIFT,
    BLOCKS_TABLE,
    FORMAT,
    LINKS_TABLE,
    PAGES_TABLE,
    REQUESTS_TABLE,
    TABLES,
    DamagedRow,
    HashedKeys,
    Saved,
    StateLock,
    StateReader,
    check_sqlite,
    damaged,
    damaged_row,
    decode_row,
    encode_row,
    into_wal,
    layout_of,
    links_row,
    one_line,
    pack_block,
    row_crc,
)
from .store import WRITTEN, Claim, FleetView, Flushed, Outcome, Write

logger = logging.getLogger(__name__)
# sqlitedict logs each open and close at DEBUG, which Scrapy's default LOG_LEVEL shows, and a
# failed statement as a dozen ERROR lines of stack: the store raises every failure of its writer
# as one StoreError line (SqliteFile._check), which says it all.
logging.getLogger("sqlitedict").setLevel(logging.CRITICAL)

#: Request row changes gathered before they are queued for the writer.
REQUEST_BATCH = 4096
_NO_ANSWER: Any = object()  # (the crawl's own connection could not answer: ask the writer)
#: The pages added last that :class:`StoredKeys` finds by key without hashing it.
FRESH_KEYS = 1024
#: Rows per statement of :func:`_write_many` and :func:`_delete_many`, at most.
ROWS_PER_STATEMENT = 64


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    """``(start, size)`` of the statements that write ``n`` rows: full ones of
    :data:`ROWS_PER_STATEMENT` rows, then the rest by powers of two. sqlite compiles and keeps
    (its statement cache) a program per distinct statement: a few sizes, not one per count."""
    start = 0
    size = ROWS_PER_STATEMENT
    while start < n:
        while size > n - start:
            size >>= 1
        yield start, size
        start += size


def _write_many(conn: Any, head: str, width: int, rows: Sequence[Sequence[Any]]) -> None:
    """Queue ``head`` (``INSERT ... VALUES``) over ``rows`` of ``width`` values each, as
    multi-row statements (:func:`_chunks`): sqlitedict's ``executemany`` queues one statement
    per row, each a round through the writer thread's queue (two lock handshakes)."""
    one = "(" + ", ".join("?" * width) + ")"
    for start, size in _chunks(len(rows)):
        values = [v for r in rows[start : start + size] for v in r]
        conn.execute(f"{head} {', '.join([one] * size)}", values)


def _delete_many(conn: Any, table: str, ids: Sequence[int]) -> None:
    """Queue the deletion of the rows ``ids`` of ``table`` (statements as
    :func:`_write_many`'s)."""
    for start, size in _chunks(len(ids)):
        marks = ", ".join("?" * size)
        conn.execute(
            f'DELETE FROM "{table}" WHERE id IN ({marks})', list(ids[start : start + size])
        )


class Checkpoint(NamedTuple):
    """What one commit writes (built by :meth:`SqliteStore._checkpoint`): the engine's and the
    frontier's rows, the changed blocks ``(b, data)``, the new pages ``(id, key, url)``, the
    kept links that changed (None: the crawl keeps none), the meta, and the seconds it took to
    build."""

    engine: dict
    frontier: dict
    blocks: list[tuple[int, bytes]]
    pages: list[tuple[int, Any, str | None]]
    links: dict | None
    meta: dict
    seconds: float


class SqliteFile:
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
            check_sqlite(self.path)
            # Into WAL mode first, on a connection of our own: a reader still inside a read
            # transaction of the closed state (an export) makes the switch wait for it, up to
            # BUSY_TIMEOUT seconds, instead of failing at once.
            into_wal(self.path)
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
            raise StoreError(f"cannot open OPIC state {self.path}: {one_line(exc)}") from None
        conn = self.db.conn
        if fresh:
            # Queued, not committed: it lands with the first commit's rows, in one transaction
            # (the DELETE opens it; sqlite's DDL is transactional).
            conn.execute('DELETE FROM "opic"')
            for table in TABLES:
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
        # A request row is read on a connection of this thread's own, not through the writer
        # thread's queue, where it would wait behind every write queued before it. That
        # connection sees committed rows only: a row queued since the last commit known to
        # have landed is read through the writer's queue (which sees it).
        self._queued: set[int] = set()  # pages whose row was queued since the last commit
        #: Commits not known to have landed: a queue that gets a row once the writer has run
        #: the COMMIT (statements run in order), and the pages whose rows it commits.
        self._landing: deque[tuple[queue.Queue, set[int]]] = deque()
        # A fresh state's file holds the previous crawl's rows until its first commit lands.
        self._readable = not fresh
        self._reader: sqlite3.Connection | None = None

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
        self._failed = f"OPIC state {self.path}: sqlite failed: {one_line(exc)}"
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
        select = f'SELECT key, data, crc FROM "{REQUESTS_TABLE}" WHERE id = ?'
        with self._io():
            row = self._read_committed(select, i) if self._committed(i) else _NO_ANSWER
            if row is _NO_ANSWER:
                row = self.db.conn.select_one(select, (i,))
        if row is None:
            return None
        if row_crc(row[0], row[1]) != row[2]:
            raise damaged_row(self.path, f"the request of page {i} fails its checksum")
        return row[0], row[1]

    def _read_committed(self, select: str, i: int) -> Any:
        """Row ``i`` as committed, read on this thread's own connection; ``_NO_ANSWER`` if
        that connection cannot answer (the writer's queue then does)."""
        try:
            if self._reader is None:
                self._reader = sqlite3.connect(str(self.path), timeout=1.0, isolation_level=None)
            return self._reader.execute(select, (i,)).fetchone()
        except sqlite3.OperationalError:  # (a table the writer made, not committed; locked)
            return _NO_ANSWER

    def _committed(self, i: int) -> bool:
        """Whether the file's committed row of page ``i`` is its last one (none queued since
        the last commit that landed)."""
        self._forget_landed()
        return (
            self._readable
            and i not in self._queued
            and not any(i in pages for _marker, pages in self._landing)
        )

    def _forget_landed(self) -> None:
        """Forget the commits that have landed (their rows are readable in the file now)."""
        landing = self._landing
        while landing and not landing[0][0].empty():
            landing.popleft()
            self._readable = True

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
        self._queued.update(changes)  # (the pages: the rows are in the writer's queue)
        rows = [row for row in changes.values() if row is not None]
        gone = [i for i, row in changes.items() if row is None]
        with self._io():
            conn = self.db.conn
            head = f'INSERT OR REPLACE INTO "{REQUESTS_TABLE}" (id, key, data, crc) VALUES'
            _write_many(conn, head, 4, rows)
            _delete_many(conn, REQUESTS_TABLE, gone)

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
    def commit(self, point: Checkpoint, blocking: bool = True) -> None:
        """Write a checkpoint and commit it with everything pending, in one transaction: the
        engine's scalars, the frontier's row, the blocks given, the rows of the pages added
        since the previous one, the kept links that changed, the meta.

        The rows are built here, in the caller's thread; sqlitedict's writer thread writes
        them. ``blocking=False`` returns without waiting for the disk (a crawl's periodic
        commits: the Scrapy reactor need not wait for the write); until the write lands, a
        reader or a crash sees the previous commit, never part of this one."""
        with self._io():  # a previous (non-blocking) commit that failed stops the crawl here
            self._commit(point, blocking)

    def _commit(self, point: Checkpoint, blocking: bool) -> None:
        started = time.perf_counter()
        self._flush_requests()
        conn = self.db.conn
        self.db["engine"] = point.engine
        self.db["frontier"] = point.frontier
        _write_many(
            conn,
            f'INSERT OR REPLACE INTO "{PAGES_TABLE}" (id, key, url, crc) VALUES',
            4,
            [(i, k, u, row_crc(k, u)) for i, k, u in point.pages],
        )
        _write_many(
            conn, f'INSERT OR REPLACE INTO "{BLOCKS_TABLE}" (b, data) VALUES', 2, point.blocks
        )
        if point.links is not None:
            self._write_links(point.links)
        self.db["meta"] = point.meta
        self.last_commit = {
            "blocks": len(point.blocks),
            "block_bytes": sum(len(r[1]) for r in point.blocks),
            "pages": len(point.pages),
            "page_bytes": sum(
                len(u or "") + (len(k) if isinstance(k, (bytes, str)) else 8)
                for _i, k, u in point.pages
            ),
            "seconds": time.perf_counter() - started + point.seconds,
        }
        # A COMMIT statement, not sqlitedict's own commit request: the writer thread runs a
        # statement inside its error handling, so a COMMIT the disk refuses (a full disk:
        # the WAL is written at commit) is recorded and raised at the next call; its commit
        # request would kill the thread instead, and leave a blocking call waiting for good.
        if blocking:
            conn.select_one("COMMIT")
            self._landing.clear()
            self._readable = True
        else:
            conn.execute("COMMIT")
            marker: queue.Queue = queue.Queue()
            conn.execute("SELECT 1", res=marker)
            self._forget_landed()  # (bounded: a crawl that pops from memory never reads)
            self._landing.append((marker, self._queued))
        self._queued = set()

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
        rows: list[tuple[int, bytes, int | None]]
        rows = [(i, links_row(blob), None) for i, blob in zip(lists, blobs)]
        rows += [
            (i, links_row(b"", v), v)
            for i, v in changes.items()
            if v is not None and not isinstance(v, list)
        ]
        _write_many(
            conn, f'INSERT OR REPLACE INTO "{LINKS_TABLE}" (id, links, alias) VALUES', 3, rows
        )
        _delete_many(conn, LINKS_TABLE, [i for i, v in changes.items() if v is None])

    def close(self) -> None:
        """Commit nothing more, close, and release the lock. The file goes back to a plain
        rollback journal, so a finished state is one self-contained file that readers open
        without creating the WAL's side files; if a reader is busy with it right now, it simply
        stays in WAL mode."""
        try:
            if self._reader is not None:
                self._reader.close()
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
        # The pages added last, by key: a visit adds its new links' pages, and the requests
        # of those links come to be filed right after (a second lookup of each, then answered
        # without hashing the key again). Bounded; a page's id never changes.
        self._fresh: dict[Hashable, int] = {}

    def get(self, key: Hashable) -> int | None:
        i = self._fresh.get(key)
        if i is not None:
            return i
        h = key_hash(key)
        self._last = (key, h)  # (the engine adds a key right after it looked it up)
        return self.index.get_hash(h)

    def add(self, key: Hashable, i: int) -> None:
        last = self._last
        j = self.index.add_hash(last[1] if last[0] is key else key_hash(key))
        if j != i or i != self.written + len(self.recent):
            raise RuntimeError(f"page {i} got index id {j}: every page of this store needs a key")
        self.recent.append(key)
        if len(self._fresh) >= FRESH_KEYS:
            self._fresh.clear()
        self._fresh[key] = i

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


def store_loader(file: SqliteFile) -> Callable[[int], Hashable | None]:
    """The key of a page whose row is written, read back from ``file``."""

    def load(i: int) -> Hashable | None:
        row = file.get_page(i)
        return None if row is None else row[0]

    return load


class SqliteRows:
    """The embedded store's :class:`~scrapy_opic.opic.frontier.PageRows` (see the module
    docstring): URLs are rows of the file (those of the pages added since the last checkpoint
    wait here), and so are the pending requests of a crawl that persists them; up to
    ``memory_requests`` of those also in memory. A crawl that does not persist them keeps each
    pending page's key and request in memory; in a one-pass crawl a request is handed over with
    its lease (the rows keep no reference to it)."""

    def __init__(
        self,
        file: SqliteFile,
        keys: StoredKeys,
        persist: bool,
        memory_requests: int,
        encode: Callable[[Any], bytes | None],
    ) -> None:
        self.file = file
        self.keys = keys
        self.persist = persist
        self.memory_requests = memory_requests
        self.encode = encode
        self._urls: list[str | None] = []  # URLs of pages keys.written ..
        #: Pending requests in memory: page -> request, and page -> key. (Two dicts, not one
        #: of (key, request) pairs: a pair is an object more per pending page for Python's
        #: garbage collector to scan, and a crawl in memory holds every pending request.)
        self._cache: dict[int, Any] = {}
        self._cache_keys: dict[int, Hashable] = {}
        #: Requests that could not be serialized (persisting rows): in memory only.
        self.payloads: dict[int, Any] = {}
        #: Rows found damaged mid-crawl (their pages given up as ``damaged``).
        self.damaged = 0

    def added(self, i: int, url: str | None) -> None:
        self._urls.append(url)

    def url_of(self, i: int) -> str | None:
        k = i - self.keys.written
        if k >= 0:
            return self._urls[k] if k < len(self._urls) else None
        try:
            row = self.file.get_page(i)
        except DamagedRow as exc:  # (a figure for the log, the top page's URL: not worth a stop)
            self._damaged(exc, "that page's URL is unknown from now on")
            return None
        return None if row is None else row[1]

    def take_urls(self) -> list[str | None]:
        """The URLs of the pages added since the last checkpoint (taken with the keys)."""
        urls, self._urls = self._urls, []
        return urls

    def _hold(self, i: int, key: Hashable, payload: Any) -> None:
        """Page ``i``'s pending request in memory."""
        self._cache[i] = payload
        self._cache_keys[i] = key

    def _release(self, i: int) -> None:
        """Page ``i``'s pending request out of memory (if it was there)."""
        self._cache.pop(i, None)
        self._cache_keys.pop(i, None)

    def keep(self, i: int, key: Hashable, payload: Any, new: bool) -> None:
        if not self.persist:
            self._hold(i, key, payload)
            return
        data = self.encode(payload)
        self.file.put_request(i, key, data, new=new)
        if data is None:  # cannot be serialized: in memory only (given up after a restart)
            self.payloads[i] = payload
            self._release(i)
            return
        self.payloads.pop(i, None)
        if i in self._cache or len(self._cache) < self.memory_requests:
            self._hold(i, key, payload)

    def lease(
        self, i: int, kept: bool, key_of: Callable[[int], Hashable]
    ) -> tuple[Hashable, Any, str | None]:
        try:
            key, payload = self._stored(i, kept, key_of)
        except DamagedRow as exc:
            self._damaged(exc, "that page is given up with the status 'damaged'")
            return None, DAMAGED_PAYLOAD, None
        return key, payload, None

    def _stored(self, i: int, kept: bool, key_of: Callable[[int], Hashable]) -> tuple[Any, Any]:
        if self.persist:
            payload = self.payloads.get(i) if kept else self.payloads.pop(i, None)
            if payload is not None:  # (not serializable: in memory only)
                return key_of(i), payload
        if i in self._cache:
            if kept:
                return self._cache_keys[i], self._cache[i]
            return self._cache_keys.pop(i), self._cache.pop(i)
        if not self.persist:
            return None, LOST
        row = self.file.get_request(i)
        if row is None or row[1] is None:
            return (None if row is None else row[0]), LOST
        return row

    def give_back(self, i: int, key: Hashable, payload: Any) -> None:
        if not self.persist and i not in self._cache and payload is not None:
            self._hold(i, key, payload)  # (a request handed over comes back)

    def forget(self, i: int) -> None:
        self.payloads.pop(i, None)
        self._release(i)
        if self.persist:
            self.file.del_request(i)

    def clear(self) -> None:
        self.payloads.clear()
        self._cache.clear()
        self._cache_keys.clear()

    def _damaged(self, exc: DamagedRow, then: str) -> None:
        """A row is damaged: said once (a warning), counted in ``opic/damaged_rows``."""
        self.damaged += 1
        if self.damaged == 1:
            logger.warning(
                "OPIC: %s: %s; the crawl goes on (its pages' cash goes to the virtual page); "
                "rows found so later are counted in the stat opic/damaged_rows, not logged",
                exc,
                then,
            )


class DirtyBlocks:
    """The blocks of pages changed since the last checkpoint: an observer of the engine (cash
    moved) and of the frontier (a page's place in the crawl changed)."""

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self._n = 0

    def take(self) -> set[int]:
        blocks, self.blocks = self.blocks, set()
        return blocks

    def grow(self, capacity: int) -> None:
        pass

    def raised(self, i: int) -> None:
        self.blocks.add(i >> BLOCK_SHIFT)

    def touched(self, i: int) -> None:
        self.blocks.add(i >> BLOCK_SHIFT)

    def taken(self, ids: Iterable[int]) -> None:
        for i in ids:
            self.blocks.add(i >> BLOCK_SHIFT)

    def changed(self, ids: Iterable[int]) -> None:
        self.taken(ids)

    def rebased(self) -> None:
        self.blocks.add(-1)  # (every block: see SqliteStore._checkpoint)


class SqliteStore:
    """The embedded store (see the module docstring): a crawl of one process and one
    partition in the sqlite file ``path``, whose :class:`StateLock` it holds until
    :meth:`close` (:class:`StateInUse` if another crawl holds it).

    ``resume``: the state saved there is this crawl's (read and checked read-only first:
    SQLite's ``quick_check``, each block's checksum, the cash); else a new crawl, whose first
    commit replaces what the file held (a crawl that fails before it, or is killed, leaves the
    previous state as it was)."""

    shared = False
    atomic = True
    journaled = False
    round_trips = 0
    unanswered: tuple[type[BaseException], ...] = ()
    worker = "embedded"

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        resume: bool,
        persist_requests: bool = False,
        memory_requests: int = 1000,
        encode: Callable[[Any], bytes | None] = lambda payload: None,
    ) -> None:
        self.path = Path(path)
        self.location: str | None = str(self.path)
        self.resume = resume
        self.persist = persist_requests
        self.memory_requests = memory_requests
        self.encode = encode
        self.lock = StateLock(self.path)
        self._saved: Saved | None = None
        self.file: SqliteFile | None = None
        self.rows: SqliteRows | None = None
        self.dirty = DirtyBlocks()
        self.config = CrawlConfig()
        self.meta: dict[str, Any] = {}

    # -- opening ------------------------------------------------------------------------------
    def saved(self) -> dict[str, Any] | None:
        if not self.resume:
            return None
        path = self.path
        try:
            if not self.lock.created and os.path.getsize(path) == 0:
                # A state a crawl wrote is never empty (the first thing it does is to write the
                # file's header): an empty file is one whose content was lost.
                raise damaged(path, ValueError("the file is empty, 0 bytes"))
            with StateReader(path, check=True, empty_ok=True) as reader:
                if reader.n is None:
                    return None
                # (Every links row's checksum, before anything is written.)
                links = reader.links() if reader.links_kept else None
                saved = reader.saved()
        except BaseException:
            self.close(discard=True)
            raise
        assert saved is not None
        saved.links = links
        self._saved = saved
        return saved.meta

    def open(self, config: CrawlConfig, meta: dict[str, Any]) -> bool:
        if config.partitions != 1:
            raise ValueError("the embedded store keeps a crawl of one partition")
        self.config = config
        self.meta = dict(meta)
        if self._saved is not None and "validators" in self._saved.meta:
            self.meta["validators"] = dict(self._saved.meta["validators"])
        try:
            self.file = SqliteFile(self.path, self.lock, fresh=self._saved is None)
        except BaseException:
            self.close(discard=True)
            raise
        return self._saved is None

    def beat(self) -> FleetView:
        return FleetView([self.worker], [0], {})

    def claim(self, k: int) -> Claim | None:
        if k != 0 or self.file is None:
            return None
        saved = self._saved
        if saved is None:
            keys = StoredKeys(KeyIndex(), store_loader(self.file), 0)
            engine = self.config.new_engine(keys=keys)
            engine.virtual_cash = 0.0
        else:
            engine = saved.engine
            hashed = engine.keys
            assert isinstance(hashed, HashedKeys)  # (a saved state's engine: its keys' index)
            keys = StoredKeys(hashed.index, store_loader(self.file), engine.n)
            engine.keys = keys
        rows = self.rows = SqliteRows(
            self.file, keys, self.persist, self.memory_requests, self.encode
        )
        refresher = Refresher() if self.config.refetches_by_change else None
        frontier = self.config.new_frontier(engine, rows, refresher)
        part = Partition(0, 1, frontier, self.config.by, journaled=False)
        if saved is not None:
            self._resume(part, saved)
        engine.add_observer(self.dirty)
        frontier.observers.append(self.dirty)
        kept = None
        if saved is not None:
            kept = {"series": saved.meta.get("series", []), "discovery_debt": saved.discovery_debt}
        self._saved = None
        return Claim(part, "", 0, new=saved is None, endow=saved is None, crawl=kept)

    def _resume(self, part: Partition, saved: Saved) -> None:
        fr = part.frontier
        # Without persisted requests nothing survives a restart: every pending page is given up.
        kept = None if self.persist else np.zeros(saved.engine.n, bool)
        back = restore_frontier(
            fr, saved.status, saved.outcome, saved.tier, saved.tiers, saved.alias, kept
        )
        fr.failed_visits = saved.failed_visits
        part.load_own(saved.own)
        r = fr.refresher
        if r is not None:
            if saved.refresh:
                r.load(saved.refresh, 0.0)
            if saved.links is not None:
                r.kept_from(*saved.links[:3])
        total = fr.engine.total_cash()
        logger.info(
            "OPIC state resumed: %d pages known, %d pending (%d were in flight), %d visited; "
            "total cash %.12f",
            fr.engine.n,
            fr.counts[PENDING],
            back,
            fr.counts[VISITED],
            total,
        )
        if abs(total - 1.0) > 1e-6:
            logger.warning("OPIC state %s: total cash is %.12f, not 1", self.path, total)

    # -- writing ------------------------------------------------------------------------------
    def flush(
        self,
        writes: list[Write],
        sends: list[Message],
        notes: list[Note],
        renew: dict[int, str],
        reads: dict[int, Any],
        wait: bool = False,
    ) -> Flushed:
        if sends or notes:
            raise ValueError("a crawl of one partition sends no message")
        assert self.file is not None
        for w in writes:
            if isinstance(w.checkpoint, Partition):
                self.file.commit(self._checkpoint(w.checkpoint, w.crawl), blocking=wait)
        return Flushed({w.k: Outcome(WRITTEN) for w in writes}, [], [], {}, [])

    def _checkpoint(self, part: Partition, kept: dict | None) -> Checkpoint:
        """What a commit of ``part`` writes: the blocks changed since the last one."""
        started = time.perf_counter()
        fr = part.frontier
        engine = fr.engine
        keys, rows = engine.keys, self.rows
        assert isinstance(keys, StoredKeys) and rows is not None
        n = engine.n
        columns = self.columns(part)
        layout = layout_of(columns)
        written = keys.written
        pages: list[tuple[int, Any, str | None]] = []
        if n > written:
            pages = list(zip(range(written, n), keys.take(), rows.take_urls(), strict=True))
        blocks = self.dirty.take()
        if -1 in blocks:  # (a rebase moved every page's stored cash)
            blocks = set(range((n + BLOCK - 1) >> BLOCK_SHIFT))
        if n > written:  # the blocks of the new pages
            blocks.update(range(written >> BLOCK_SHIFT, (n + BLOCK - 1) >> BLOCK_SHIFT))
        packed = [(b, pack_block(columns, layout, b)) for b in sorted(blocks) if b * BLOCK < n]
        del columns  # (views of the frontier's arrays: they must be free to grow again)
        frontier = {
            "format": FORMAT,
            "n": n,
            "block": BLOCK,
            "layout": layout,
            "alias": fr.alias,
            "tiers": fr.tiers.as_list(),
            "continuous": fr.continuous,
            "links": fr.keep_links,
            "fetched": fr.n_ok,
            "failed_visits": fr.failed_visits,
            "own": part.own_state(),
        }
        links = fr.take_link_changes() if fr.keep_links else None
        kept = kept or {}
        frontier["discovery_debt"] = kept.get("discovery_debt", 0.0)
        meta = {**self.meta, "series": kept.get("series", [])}
        seconds = time.perf_counter() - started
        return Checkpoint(engine_header(engine), frontier, packed, pages, links, meta, seconds)

    @staticmethod
    def columns(part: Partition) -> dict[str, np.ndarray]:
        """Every per-page array of ``part`` at capacity, by column name (the rows a checkpoint
        saves): views, to be dropped before the frontier grows again."""
        fr = part.frontier
        keys = fr.engine.keys
        assert isinstance(keys, StoredKeys)
        columns = engine_arrays(fr.engine)
        columns["f.status"] = np.frombuffer(fr.status, np.uint8)
        columns["f.outcome"] = np.frombuffer(fr.outcome, np.uint16)
        columns["f.tier"] = np.frombuffer(fr.tier, np.uint32)
        columns["f.hash"] = keys.index.hashes
        if fr.refresher is not None:
            columns.update(fr.refresher.columns(len(columns["f.hash"])))
        return columns

    def judge(self, host: str, verdict: dict[str, Any]) -> None:
        # (In the meta of the next checkpoint: a verdict found since the last one is found
        # again, as the pages crawled since are crawled again.)
        self.meta.setdefault("validators", {})[host] = verdict

    def verdicts(self) -> dict[str, dict[str, Any]]:
        return dict(self.meta.get("validators", {}))

    def release(self, k: int, token: str) -> None:
        pass

    def figures(self, skip: Collection[int]) -> dict[str, float]:
        return {"damaged_rows": self.rows.damaged if self.rows is not None else 0}

    def snapshot(self) -> StateReader:
        return StateReader(self.path)

    def close(self, discard: bool = False) -> None:
        """Close the file (the last commit stays) and release the lock; ``discard``: remove
        the file if this store created it and wrote nothing to it."""
        if self.rows is not None:
            self.rows.clear()
        if self.file is not None:
            file, self.file = self.file, None
            file.close()
        else:
            self.lock.release(discard=discard)
