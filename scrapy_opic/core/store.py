"""The embedded store: one sqlite file (through sqlitedict) holding a crawl's OPIC state.

Layout: one table, ``opic``, so that everything that must change together is written by one
connection and committed in one sqlite transaction:

``"engine"``
    :meth:`OpicEngine.state_dict` (scalars, per-page arrays, window state, page keys);
``"frontier"``
    each page's life-cycle status and the crawl mode;
``"meta"``
    whatever the caller adds (URLs of pages, settings, a time series...);
``"req/<id>"``
    one row per pending page: its serialized payload (the request).

:meth:`SqliteStore.commit` writes a snapshot and commits it together with the request rows
changed since the previous commit. A process killed at any moment (``kill -9``) leaves the last
committed snapshot: never half a visit. Pages that were in flight in that snapshot go back to
pending on load.

Cost: a snapshot writes the per-page arrays (~45 bytes per page), so commit every K visits or T
seconds, not at every event; request rows are written as they change.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlitedict import SqliteDict

from .engine import OpicEngine
from .frontier import Frontier

FORMAT = 1


class StoreError(Exception):
    """The state file is missing, unreadable or not an OPIC state."""


class SqliteStore:
    """Read and write a crawl's OPIC state in ``path`` (created if missing, unless read-only)."""

    def __init__(self, path: str | os.PathLike, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly and not self.path.exists():
            raise StoreError(f"no OPIC state at {self.path}")
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb") as fh:
                if fh.read(16) != b"SQLite format 3\x00":
                    raise StoreError(f"{self.path} is not an OPIC state (not a sqlite file)")
        try:
            self.db = SqliteDict(
                str(self.path),
                tablename="opic",
                flag="r" if readonly else "c",
                autocommit=False,
                outer_stack=False,
            )
        except Exception as exc:  # sqlite3.DatabaseError, RuntimeError from sqlitedict...
            raise StoreError(f"cannot open OPIC state {self.path}: {exc}") from None

    # -- requests ---------------------------------------------------------------------------
    def put_request(self, i: int, data: Any) -> None:
        self.db[f"req/{i}"] = data

    def del_request(self, i: int) -> None:
        with contextlib.suppress(KeyError):
            del self.db[f"req/{i}"]

    def requests(self) -> Iterator[tuple[int, Any]]:
        for key, value in self.db.items():
            if key.startswith("req/"):
                yield int(key[4:]), value

    # -- snapshots --------------------------------------------------------------------------
    def commit(self, frontier: Frontier, meta: dict | None = None) -> None:
        """Write a snapshot of ``frontier`` (and its engine) and commit everything pending."""
        self.db["engine"] = frontier.engine.state_dict()
        self.db["frontier"] = {
            "format": FORMAT,
            "status": bytes(frontier.status[: frontier.engine.n]),
            "continuous": frontier.continuous,
        }
        if meta is not None:
            self.db["meta"] = meta
        self.db.commit(blocking=True)

    def load(self, **engine_kw) -> tuple[OpicEngine, bytes, dict] | None:
        """``(engine, status bytes, meta)`` of the last snapshot, or ``None`` for an empty
        store."""
        try:
            if "engine" not in self.db:
                return None
            fr = self.db["frontier"]
            if fr.get("format") != FORMAT:
                raise StoreError(f"{self.path}: unknown OPIC state format {fr.get('format')!r}")
            engine = OpicEngine.from_state(self.db["engine"], **engine_kw)
            meta = self.db.get("meta", {})
        except StoreError:
            raise
        except Exception as exc:
            raise StoreError(f"cannot read OPIC state {self.path}: {exc}") from None
        return engine, fr["status"], meta

    def clear(self) -> None:
        self.db.clear()
        self.db.commit(blocking=True)

    def close(self) -> None:
        self.db.close()


__all__ = ["SqliteStore", "StoreError"]
