"""The embedded backend: a :class:`~scrapy_opic.opic.frontier.MemoryFrontier` checkpointed to one
sqlite file (through sqlitedict), and a read-only view of that file for exports.

File layout: one table, ``opic``, so that everything that must change together is written by one
connection and committed in one sqlite transaction:

``"engine"``
    :meth:`OpicEngine.state_dict` without the page keys (scalars, per-page arrays, window state);
``"frontier"``
    each page's life-cycle status, the crawl mode and the number of pages;
``"meta"``
    what the crawl adds (spider name, settings, the time series of the crawl...);
``"pages/<c>"``
    the ``(key, url)`` of pages ``c*CHUNK .. (c+1)*CHUNK-1``: append-only, so a commit rewrites
    only the last chunk and the new ones;
``"req/<id>"``
    one row per pending page: ``(priority, download slot, payload bytes)``.

With kept links (``OPIC_KEEP_LINKS``), a second table, ``opic_links``, holds one row per page
that has links: ``(id, links, alias)``, ``links`` a CRC-32 of the rest of the row then the
page's link targets as :func:`~scrapy_opic.opic.links.encode_links` blobs (sorted ids, gaps as
varints: no pickle), ``alias`` the page it redirected to (NULL for a page with links). A commit
writes the rows of the pages whose links changed since the previous one (never all pages), in
the snapshot's transaction: the links a reader or a resume finds are those of the snapshot's
visits, never more, never fewer.

:meth:`SqliteStore.commit` writes a snapshot and commits it together with the request rows
changed since the previous commit. A process killed at any moment (``kill -9``) leaves the last
committed snapshot: never half a visit. Pages that were in flight in that snapshot go back to
pending on load.

While a crawl has it open the file is in WAL mode: a reader (:class:`StateReader`, the export
commands) reads one consistent snapshot inside one read transaction while the crawl goes on
committing; neither blocks the other and the reader never writes. At close the file goes back to
a rollback journal: one file, with no ``-wal``/``-shm`` beside it. (The one wait: a crawl that
starts on a closed state while a reader is inside it waits for that reader, up to
:data:`BUSY_TIMEOUT`, to switch the file into WAL mode.)

Cost: a snapshot rewrites the per-page arrays plus the new page rows (``benchmarks/export_perf.py``
measures it), so the frontier commits every K visits or T seconds, not at every event; request
rows are written as they change. The snapshot is serialized in the caller's thread and written
by sqlitedict's own thread: a periodic commit does not wait for the disk.
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
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlitedict import SqliteDict

from ..opic.constants import PENDING, STATUSES, VISITED
from ..opic.engine import OpicEngine
from ..opic.frontier import Entry, Lease, MemoryFrontier
from ..opic.links import decode_links, encode_links
from ..opic.window import parse_window
from ..series import Series
from . import StoreError

logger = logging.getLogger(__name__)
# sqlitedict logs each open and close at DEBUG, which Scrapy's default LOG_LEVEL shows.
logging.getLogger("sqlitedict").setLevel(logging.INFO)

FORMAT = 2
LINKS_TABLE = "opic_links"  #: the table of kept links (see the module docstring)
LINKS_READ_ROWS = 32_768  #: rows of kept links a reader decodes at a time
CHUNK = 4096  #: pages per ``pages/<c>`` row
BUSY_TIMEOUT = 30.0  #: seconds a crawl starting on a state waits for a reader to finish
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: The in-memory payload of a page whose pending payload is only a row of the store.
ON_DISK = "opic:on-disk"


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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


@dataclass
class Saved:
    """A loaded snapshot: the engine (with its page keys), page statuses, URLs and meta."""

    engine: OpicEngine
    status: bytes
    urls: list[str]
    meta: dict = field(default_factory=dict)
    #: Each page's outcome code (uint16 by id; empty in a state saved before outcomes).
    outcome: bytes = b""
    #: Page -> the page it permanently redirects to (ids).
    alias: dict = field(default_factory=dict)


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
        if fresh:
            # Queued, not committed: it lands with the first commit's rows, in one transaction.
            self.db.conn.execute('DELETE FROM "opic"')
            self.db.conn.execute(f'DROP TABLE IF EXISTS "{LINKS_TABLE}"')
        self._pages_written = 0  # pages whose (key, url) rows are committed

    def _check(self) -> None:
        """Raise :class:`StoreError` if sqlitedict's writer thread failed or died (a full disk,
        an I/O error): every later call that waits for it would otherwise hang for good. Once
        a write has failed, every later call fails the same way (the transaction is lost)."""
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
        self._failed = f"OPIC state {self.path}: a write failed: {_one_line(exc)}"
        raise StoreError(self._failed) from None

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """Around every call into sqlitedict: its writer thread's failure (which sqlitedict
        re-raises in whichever call comes next) is a :class:`StoreError`."""
        self._check()
        try:
            yield
        except (sqlite3.Error, RuntimeError) as exc:
            self._fail(exc)

    # -- requests ---------------------------------------------------------------------------
    def put_request(self, i: int, data: Any) -> None:
        with self._io():
            self.db[f"req/{i}"] = data

    def get_request(self, i: int) -> Any:
        """The payload row of page ``i`` (:class:`KeyError` if none)."""
        with self._io():
            return self.db[f"req/{i}"]

    def del_request(self, i: int) -> None:
        # A plain DELETE, queued: sqlitedict's ``del`` first asks whether the key exists, which
        # would wait behind a snapshot still being written.
        with self._io():
            self.db.conn.execute('DELETE FROM "opic" WHERE key = ?', (f"req/{i}",))

    # -- snapshots --------------------------------------------------------------------------
    def commit(
        self, frontier: MemoryFrontier, meta: dict | None = None, blocking: bool = True
    ) -> None:
        """Write a snapshot of ``frontier`` (its engine, statuses, the page keys and URLs by
        page id) and commit it with everything pending, in one transaction.

        The snapshot is taken (serialized) here, in the caller's thread; sqlitedict's writer
        thread writes it. ``blocking=False`` returns without waiting for the disk (a crawl's
        periodic commits: the Scrapy reactor need not wait for the write); until the write
        lands, a reader or a crash sees the previous commit, never part of this one."""
        with self._io():  # a previous (non-blocking) commit that failed stops the crawl here
            self._commit(frontier, meta, blocking)

    def _commit(self, frontier: MemoryFrontier, meta: dict | None, blocking: bool) -> None:
        engine, urls = frontier.engine, frontier.urls
        n = engine.n
        state = engine.state_dict(keys=False)
        self.db["engine"] = state
        self.db["frontier"] = {
            "format": FORMAT,
            "n": n,
            "status": bytes(frontier.status[:n]),
            "outcome": frontier.outcome[:n].tobytes(),
            "alias": frontier.alias,
            "continuous": frontier.continuous,
            "links": frontier.keep_links,
        }
        # Page rows are append-only: rewrite from the chunk holding the first unwritten page.
        for c in range(self._pages_written // CHUNK, (n + CHUNK - 1) // CHUNK):
            lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
            self.db[f"pages/{c}"] = [
                (engine.key_of(i), urls[i] if i < len(urls) else None) for i in range(lo, hi)
            ]
        if frontier.keep_links:
            self._write_links(frontier.take_link_changes())
        if meta is not None:
            self.db["meta"] = meta
        self.db.commit(blocking=blocking)
        self._pages_written = n

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
            if not self.db.conn.is_alive():  # its writer died: nothing would answer a clean close
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


def _check_format(path: Path, fr: Any) -> None:
    if not isinstance(fr, dict) or fr.get("format") != FORMAT:
        found = fr.get("format") if isinstance(fr, dict) else None
        raise StoreError(f"{path}: unknown OPIC state format {found!r} (expected {FORMAT})")


class StateReader:
    """Read-only view of one committed snapshot of a state file: for exports and reports, and
    for a crawl that resumes (which reads its state here, then opens it for writing).

    Opens the file read-only (``mode=ro``: this connection cannot write it) and reads every row
    inside one read transaction, so the engine, the statuses and the page rows all come from the
    same commit even while a crawl keeps committing (WAL mode: the crawl is not blocked either).
    ``check`` first runs SQLite's ``quick_check`` over the whole file (a resume: a damaged page
    anywhere is refused before anything is written). ``empty_ok``: a file with no committed
    state is not an error (:attr:`n` is then ``None``). A damaged or foreign file raises
    :class:`StoreError`. Use as a context manager, or call :meth:`close`.
    """

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
                rows = self._con.execute("PRAGMA quick_check").fetchall()
                if rows != [("ok",)]:
                    raise sqlite3.DatabaseError(rows[0][0])
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
        self.status: bytes = fr["status"]
        self.outcome: bytes = fr.get("outcome", b"")  # (none in a state from before outcomes)
        self.alias: dict = fr.get("alias", {})
        self.continuous: bool = fr["continuous"]
        #: Whether the crawl kept its pages' out-links (``OPIC_KEEP_LINKS``): :meth:`links`.
        self.links_kept: bool = bool(fr.get("links", False))

    def _get(self, key: str) -> Any:
        try:
            row = self._con.execute("SELECT value FROM opic WHERE key = ?", (key,)).fetchone()
            return None if row is None else decode_row(row[0])
        except Exception as exc:  # sqlite3.DatabaseError, a checksum, unpickling
            raise damaged(self.path, exc) from None

    def engine(self, **engine_kw: Any) -> OpicEngine:
        """The engine of the snapshot, without page keys (ids only)."""
        state = self._get("engine")
        try:
            return OpicEngine.from_state(state, **engine_kw)
        except Exception as exc:
            raise damaged(self.path, exc) from None

    def meta(self) -> dict:
        return self._get("meta") or {}

    def page_chunks(self, first: int = 0) -> Iterator[tuple[int, list[tuple[Any, str | None]]]]:
        """``(first id, [(key, url), ...])`` per stored chunk, from chunk ``first``: one chunk in
        memory at a time."""
        for c in range(first, (self.n + CHUNK - 1) // CHUNK):
            rows = self._get(f"pages/{c}")
            if rows is None:
                raise damaged(self.path, ValueError(f"page rows {c} missing"))
            lo = c * CHUNK
            yield lo, rows[: max(0, self.n - lo)]

    def urls_of(self, ids: Sequence[int]) -> dict[int, str | None]:
        """The URL of each page in ``ids`` (reads only the chunks they are in)."""
        out: dict[int, str | None] = {}
        by_chunk: dict[int, list[int]] = {}
        for i in ids:
            by_chunk.setdefault(int(i) // CHUNK, []).append(int(i))
        for c, members in sorted(by_chunk.items()):
            rows = self._get(f"pages/{c}") or []
            for i in members:
                j = i - c * CHUNK
                out[i] = rows[j][1] if j < len(rows) else None
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

    def requests(self) -> Iterator[tuple[int, Any]]:
        """``(page id, row)`` of every stored request (a JOBDIR crawl's pending pages)."""
        try:
            cursor = self._con.execute("SELECT key, value FROM opic WHERE key LIKE 'req/%'")
            for key, value in cursor:
                yield int(key[4:]), decode_row(value)
        except Exception as exc:
            raise damaged(self.path, exc) from None

    def saved(self, **engine_kw: Any) -> Saved | None:
        """The whole snapshot, checked (``None`` if the file holds none yet)."""
        if self.n is None:
            return None
        n = self.n
        keys: list = []
        urls: list = []
        for _lo, rows in self.page_chunks():
            for key, url in rows:
                keys.append(key)
                urls.append(url)
        state = self._get("engine")
        try:
            state = dict(state)
            state["keys"] = keys[:n]
            engine = OpicEngine.from_state(state, **engine_kw)
            if engine.n != n or len(self.status) != n or len(keys) < n:
                raise ValueError(f"{n} pages in the frontier, {engine.n} in the engine")
            if max(self.status, default=0) >= len(STATUSES):
                raise ValueError("a page status out of range")
            if self.outcome and len(self.outcome) != 2 * n:
                raise ValueError(f"{len(self.outcome) // 2} page outcomes for {n} pages")
            if not isinstance(self.alias, dict) or any(
                not (0 <= i < n and 0 <= j < n) for i, j in self.alias.items()
            ):
                raise ValueError("a redirect alias out of range")
            cash = engine.total_cash()
            if not math.isfinite(cash) or abs(cash - 1.0) > 1e-3:
                raise ValueError(f"total cash {cash!r}, not 1")
        except Exception as exc:
            raise damaged(self.path, exc) from None
        return Saved(engine, self.status, urls[:n], self.meta(), self.outcome, self.alias)

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            with contextlib.suppress(Exception):
                con.close()
            self._con = None

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SqliteFrontier(MemoryFrontier):
    """The embedded frontier: a :class:`~scrapy_opic.opic.frontier.MemoryFrontier` whose state is
    checkpointed to a sqlite file (:class:`SqliteStore`) every ``commit_visits`` visits or
    ``commit_seconds`` seconds, and at close. Open one with :meth:`open`.

    With ``persist_requests`` (a resumable crawl: Scrapy's JOBDIR), every pending payload is also
    a row of the file, written as it changes, so that a resumed crawl finds its pending pages
    again; up to ``memory_requests`` payloads also stay in memory (a pop from memory skips the
    row read and the decoding), the others are handed out as the bytes of their row. A payload
    that ``encode`` cannot serialize (it returns ``None``) stays in memory only: it does not
    survive a restart. Without ``persist_requests``, payloads live in memory only and each crawl
    starts afresh; the checkpoints are there for the export commands.

    A kill -9 loses at most the visits since the last committed checkpoint: on resume those
    pages are pending again (their fetches are repeated) and the total cash is 1.
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
        memory_requests: int = 50_000,
        encode: Callable[[Any], bytes | None] = lambda payload: None,
        commit_visits: int = 500,
        commit_seconds: float = 10.0,
        meta: dict | None = None,
        keep_links: bool = False,
    ) -> None:
        super().__init__(engine, strategy, continuous, seed, keep_links=keep_links)
        self.store = store
        self.location = str(store.path)
        self.maintain_interval = max(0.05, commit_seconds / 2)
        self._persist = persist_requests
        self._memory_requests = memory_requests
        self._encode = encode
        self._cached: set[int] = set()  # pending pages whose payload is also in memory
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

        A saved state is read and checked (read-only: SQLite's ``quick_check``, each row's
        checksum, the cash) and ``accept(meta)`` may refuse it by raising, all before the file
        is opened for writing: a state that is refused, damaged or foreign is left as it was.
        A state is resumed with the ``keep_links`` it was made with (else refused: the links of
        the pages fetched so far would be missing). ``kw``: see the class."""
        lock = StateLock(path)
        try:
            saved, rows = None, {}
            if resume:
                with StateReader(path, check=True, empty_ok=True) as reader:
                    saved = reader.saved()
                    if saved is not None:
                        if accept is not None:
                            accept(saved.meta)
                        keep = bool(kw.get("keep_links", False))
                        if reader.links_kept != keep:
                            # Links missing for the pages fetched so far (or rows left to go
                            # stale): the graph's PageRank would be wrong, silently.
                            raise StoreError(
                                f"{path} holds a crawl made with OPIC_KEEP_LINKS="
                                f"{reader.links_kept}, resumed with {keep}: resume it with its "
                                "own value, or start afresh elsewhere"
                            )
                        if keep:
                            reader.links()  # every row's checksum, before anything is written
                        # Only the ids and slots come into memory: the payloads stay rows.
                        rows = {i: (row[0], row[1]) for i, row in reader.requests()}
            store = SqliteStore(path, lock, fresh=saved is None)
        except BaseException:
            lock.release(discard=True)
            raise
        try:
            if saved is None:
                engine = OpicEngine(epsilon=epsilon, refresh=refresh, window=parse_window(window))
                return cls(engine, store, **kw)
            store._pages_written = saved.engine.n
            frontier = cls(saved.engine, store, **kw)
            frontier._resume(saved, rows)
            return frontier
        except BaseException:
            store.close()
            raise

    def _resume(self, saved: Saved, rows: dict[int, tuple[int, Hashable]]) -> None:
        payloads = dict.fromkeys(rows, ON_DISK)
        back = self.restore(saved.status, payloads, rows, saved.urls, saved.outcome, saved.alias)
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

    # -- payloads: rows of the store ---------------------------------------------------------
    def _keep(self, i: int, payload: Any) -> None:
        if not self._persist:
            self.payloads[i] = payload
            return
        data = self._encode(payload)
        if data is None:  # cannot be serialized: in memory only (lost on restart)
            self.payloads[i] = payload
            self._cached.discard(i)
            self.store.del_request(i)  # (an older row would come back on resume)
            return
        priority, slot = self.tier_of(i)
        self.store.put_request(i, (priority, slot, data))
        if i in self._cached or len(self._cached) < self._memory_requests:
            self._cached.add(i)
            self.payloads[i] = payload
        else:
            self.payloads[i] = ON_DISK

    def _payload(self, i: int) -> Any:
        payload = self.payloads[i]
        if payload is ON_DISK:
            return self.store.get_request(i)[2]
        if not self.continuous:  # handed out for good: its memory place can serve another
            self._cached.discard(i)
        return payload

    def _forget(self, i: int) -> None:
        self.payloads.pop(i, None)
        self._cached.discard(i)
        if self._persist:
            self.store.del_request(i)

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
        return super().pop(full_slots)

    def maintain(self, leases: Collection[Lease]) -> None:
        if (
            self._due_since is not None
            or time.monotonic() - self._last_commit >= self._commit_seconds
        ):
            self._commit_when_ready()

    def commit(self, wait: bool = False) -> None:
        """Write a checkpoint (one sqlite transaction), with a point of the crawl's time series
        (what ``scrapy opic-report`` plots). Without ``wait`` (the periodic ones) the snapshot
        is serialized here and written by the store's thread: until it lands, a reader or a
        crash sees the previous checkpoint, never part of this one."""
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
            fetched=e.n - e.n_unfetched,
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


__all__ = [
    "CHUNK",
    "ON_DISK",
    "Saved",
    "SqliteFrontier",
    "SqliteStore",
    "StateReader",
    "StoreError",
]
