"""Read a crawl's OPIC state and write per-URL importance (no Scrapy needed).

    from scrapy_opic.export import read_state
    state = read_state(".scrapy/opic/site.sqlite")
    for url, importance in state.top(10): ...

Reading opens the sqlite file read-only, so a crawl writing it meanwhile is not disturbed (it
sees the last committed snapshot).
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .core.engine import OpicEngine
from .core.store import SqliteStore, StoreError

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".jl": "jsonl"}


@dataclass
class OpicState:
    """A snapshot of a crawl: the engine and the URL of every page."""

    engine: OpicEngine
    urls: list[str]

    def importance(self) -> np.ndarray:
        return self.engine.importance()

    def rows(self) -> Iterator[tuple[str, float]]:
        """``(url, importance)`` for every known page, importance summing to 1."""
        x = self.importance()
        for i in range(self.engine.n):
            yield (self.urls[i] if i < len(self.urls) else str(i)), float(x[i])

    def top(self, n: int = 10) -> list[tuple[str, float]]:
        x = self.importance()
        order = np.argsort(-x)[:n]
        return [(self.urls[i] if i < len(self.urls) else str(i), float(x[i])) for i in order]


def read_state(path: str | os.PathLike) -> OpicState:
    """Open a state file read-only; :class:`StoreError` if it is missing or not a state."""
    store = SqliteStore(path, readonly=True)
    try:
        loaded = store.load()
    finally:
        store.close()
    if loaded is None:
        raise StoreError(f"{path} holds no OPIC state yet")
    engine, _status, meta = loaded
    return OpicState(engine, list(meta.get("urls", [])))


def write_importance(state: OpicState, out: str) -> int:
    """Write ``url,importance`` rows to ``out`` (.csv, .jsonl; ``-`` = CSV on stdout)."""
    fmt = "csv" if out == "-" else FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        raise ValueError(f"unknown output format for {out!r}: use .csv or .jsonl")
    fh = sys.stdout if out == "-" else open(out, "w", newline="")  # noqa: SIM115
    try:
        n = 0
        if fmt == "csv":
            writer = csv.writer(fh)
            writer.writerow(["url", "importance"])
            for url, imp in state.rows():
                writer.writerow([url, repr(imp)])
                n += 1
        else:
            for url, imp in state.rows():
                fh.write(json.dumps({"url": url, "importance": imp}) + "\n")
                n += 1
        return n
    finally:
        if fh is not sys.stdout:
            fh.close()


__all__ = ["OpicState", "StoreError", "read_state", "write_importance"]
