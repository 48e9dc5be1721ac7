"""The embedded store's file: its layout, the checks that guard it, and a read-only view of
one committed snapshot of it (:class:`StateReader`, for exports and for a crawl that resumes).

File layout (one file, one connection, one transaction per checkpoint):

table ``opic`` (sqlitedict's face: pickled rows behind a CRC-32)
    ``"engine"``: the engine's parameters and scalars (:meth:`OpicEngine.header`);
    ``"frontier"``: the format, the number of pages, the row layout of the blocks, the crawl
    mode, the tier codes (each ``(priority, download slot)``), the redirect aliases, the
    partition's own state;
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

While a crawl has it open the file is in WAL mode: a reader reads one consistent snapshot inside
one read transaction while the crawl goes on committing; neither blocks the other and the reader
never writes. At close the file goes back to a rollback journal: one file, with no
``-wal``/``-shm`` beside it. (The one wait: a crawl that starts on a closed state while a reader
is inside it waits for that reader, up to :data:`BUSY_TIMEOUT`, to switch the file into WAL
mode.)
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import pickle
import sqlite3
import time
import zlib
from array import array
from collections.abc import Collection, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..opic.constants import STATUSES
from ..opic.engine import OpicEngine
from ..opic.index import KeyIndex, key_hash
from ..opic.links import decode_links
from ..opic.refresh import COLUMNS as REFRESH_COLUMNS
from ..opic.snapshot import engine_arrays, engine_from_header
from . import StoreError

FORMAT = 4
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
TABLES = (BLOCKS_TABLE, PAGES_TABLE, REQUESTS_TABLE, LINKS_TABLE)


def check_sqlite(path: Path) -> None:
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
        f"the OPIC state {path} is damaged ({one_line(exc)}): nothing was changed; move it "
        "away (or delete the JOBDIR) to start afresh"
    )


class DamagedRow(StoreError):
    """A row of a state in use (a page's key and URL, a request) fails its checksum: read
    mid-crawl, long after the resume's checks. The rest of the state is sound."""


def damaged_row(path: Path, what: str) -> DamagedRow:
    return DamagedRow(f"the OPIC state {path} has a damaged row ({what})")


def one_line(exc: BaseException) -> str:
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
    failed_visits: int = 0
    discovery_debt: float = 0.0
    #: A crawl that refetched by change: its refresher's arrays (``r.<name>``).
    refresh: dict = field(default_factory=dict)
    #: The partition's own state (:meth:`~scrapy_opic.opic.partition.Partition.own_state`).
    own: dict = field(default_factory=dict)
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


def into_wal(path: Path) -> None:
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
    tables = ["opic", BLOCKS_TABLE] if _has_table(con, BLOCKS_TABLE) else ["opic"]
    for table in tables:
        rows = con.execute(f'PRAGMA quick_check("{table}")').fetchall()
        if rows != [("ok",)]:
            raise sqlite3.DatabaseError(rows[0][0])


def _has_table(con: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return con.execute(query, (name,)).fetchone() is not None


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
        check_sqlite(self.path)
        if empty_ok and self.path.stat().st_size == 0:
            return
        fr = self._frontier(check, empty_ok)
        if fr is None:
            return
        self.n = fr["n"]
        self.alias: dict = fr["alias"]
        self.continuous: bool = fr["continuous"]
        #: ``(priority, download slot)`` of tier codes 1, 2...
        self.tiers: list = fr["tiers"]
        #: Whether the crawl kept its pages' out-links (``OPIC_KEEP_LINKS``): :meth:`links`.
        self.links_kept: bool = bool(fr["links"])
        self._layout: Layout = [(name, dt, tuple(shape)) for name, dt, shape in fr["layout"]]
        #: Pages whose last fetch was parsed, and visits of failed fetches.
        self.fetched: int = fr["fetched"]
        self.failed_visits: int = fr["failed_visits"]
        #: The partition's own state, and the crawl's discovery debt.
        self.own: dict = fr["own"]
        self.discovery_debt = float(fr["discovery_debt"])
        #: Whether the crawl refetched by freshness: its pages' change observations are saved.
        self.changes_kept = any(name.startswith("r.") for name, *_ in self._layout)

    def _frontier(self, check: bool, empty_ok: bool) -> dict | None:
        """The frontier row, its format checked, read in the one read transaction opened here;
        ``None`` (the file closed) if the file holds no state yet and ``empty_ok``."""
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
            if tables and ("opic",) not in tables:
                raise StoreError(f"{self.path} is not an OPIC state (another kind of sqlite file)")
            # (No table: an empty database, a crawl creating its state this moment.)
            fr = self._get("frontier") if tables else None
            if fr is not None:
                _check_format(self.path, fr)
            elif not empty_ok:
                raise StoreError(f"{self.path} holds no OPIC state yet")
        except Exception as exc:
            self.close()
            if isinstance(exc, StoreError):
                raise
            raise damaged(self.path, exc) from None
        if fr is None:
            self.close()
        return fr

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Reads of the file: an error but a :class:`StoreError` is the file's damage."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:
            raise damaged(self.path, exc) from None

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
        with self._reading():
            return engine_from_header(self.header(), **engine_kw)

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
        with self._reading():
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

    def saved(self, **engine_kw: Any) -> Saved | None:
        """The whole snapshot, loaded and checked (``None`` if the file holds none yet): every
        page's arrays in memory (for a resume)."""
        if self.n is None:
            return None
        n = self.n
        engine = self.header_engine(**engine_kw)
        with self._reading():
            nblocks = (n + BLOCK - 1) >> BLOCK_SHIFT
            engine.reserve(max(1, nblocks * BLOCK))
            status = np.zeros(n, np.uint8)
            outcome = np.zeros(n, np.uint16)
            tier = np.zeros(n, np.uint32)
            hashes = np.zeros(n, np.uint64)
            refresh: dict[str, np.ndarray] = {}
            if self.changes_kept:
                refresh = {f"r.{f}": np.zeros(n) for f in REFRESH_COLUMNS}
            # (Where each column goes: a frontier's array, a refresher's, or the engine's.)
            into: dict[str, np.ndarray] = {**engine_arrays(engine), **refresh}
            into |= {"f.status": status, "f.outcome": outcome, "f.tier": tier, "f.hash": hashes}
            names = {c[0] for c in self._layout}
            if names != set(into):
                raise ValueError(f"columns {sorted(names)} do not fit the engine")
            for lo, cols in self.columns():
                for name, rows in cols.items():
                    into[name][lo : lo + len(rows)] = rows
            del into
            self._check(engine, status, tier)
            engine.keys = HashedKeys(KeyIndex.from_hashes(hashes))
        return Saved(
            engine,
            status,
            outcome,
            tier,
            dict(self.alias),
            list(self.tiers),
            self.meta(),
            self.continuous,
            self.failed_visits,
            self.discovery_debt,
            refresh,
            dict(self.own),
        )

    def _check(self, engine: OpicEngine, status: np.ndarray, tier: np.ndarray) -> None:
        """:class:`ValueError` if the loaded pages do not hold together: their count, statuses,
        tiers and aliases in range, the total cash 1."""
        n = self.n or 0
        if engine.n != n:
            raise ValueError(f"{n} pages in the frontier, {engine.n} in the engine")
        if int(status.max(initial=0)) >= len(STATUSES):
            raise ValueError("a page status out of range")
        if int(tier.max(initial=0)) > len(self.tiers):
            raise ValueError("a tier code out of range")
        if not isinstance(self.alias, dict) or any(
            not (0 <= i < n and 0 <= j < n) for i, j in self.alias.items()
        ):
            raise ValueError("a redirect alias out of range")
        cash = engine.total_cash()
        if not math.isclose(cash, 1.0, rel_tol=0.0, abs_tol=1e-3):  # (NaN and infinities too)
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
        counts = [np.zeros(0, np.int64)]  # (the counts of decode_links: int64)
        targets = [np.zeros(0, np.int32)]
        alias_pages: list[int] = []
        alias_targets: list[int] = []
        try:
            if _has_table(self._con, LINKS_TABLE):
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
            np.frombuffer(pages, np.int64),
            np.concatenate(counts),
            np.concatenate(targets),
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
