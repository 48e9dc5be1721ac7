"""Link graphs: compressed sparse rows, an edge-list reader and a generator.

A :class:`Graph` stores out-links in CSR form (``indptr``, ``indices``): 8 bytes per node and
4 bytes per link. Parallel links are collapsed (a page linking twice to the same page is one edge,
as in ``networkx.DiGraph``), and self-links are dropped unless asked for: that matches the engine's
default (``OpicEngine(self_links=False)``), so the simulator and its reference PageRank see the same
graph.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np


@dataclass
class Graph:
    """A directed graph on nodes ``0..n-1`` in CSR form, with optional original node names."""

    indptr: np.ndarray
    indices: np.ndarray
    names: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_edges(self) -> int:
        return int(self.indptr[-1])

    @property
    def out_degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.indices, minlength=self.n)

    def sources(self) -> np.ndarray:
        """Source node of every edge (aligned with ``indices``)."""
        return np.repeat(np.arange(self.n, dtype=np.int64), self.out_degree)

    def gather(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Out-links of ``ids`` as ``(offsets, children)`` for :meth:`OpicEngine.visit_batch`."""
        starts = self.indptr[ids]
        deg = self.indptr[ids + 1] - starts
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(deg, out=offsets[1:])
        idx = np.repeat(starts - offsets[:-1], deg) + np.arange(offsets[-1])
        return offsets, self.indices[idx]

    def children(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def name(self, i: int) -> str:
        return str(i) if self.names is None else str(self.names[i])


def from_edges(
    src: np.ndarray,
    dst: np.ndarray,
    n: int,
    names: np.ndarray | None = None,
    self_links: bool = False,
) -> Graph:
    """Build a :class:`Graph` from edge arrays; collapses parallel edges."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if not self_links:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    # Sorted by source, then target; duplicates gone. (A sort beats np.unique's hash path here.)
    code = np.sort(src * n + dst)
    if code.size:
        code = code[np.concatenate(([True], code[1:] != code[:-1]))]
    src, dst = code // n, code % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return Graph(indptr, dst.astype(np.int32), names)


def _read_bytes(path: str | Path | io.BufferedIOBase | BinaryIO) -> bytes:
    """The whole text of an edge list, gunzipped if it is gzip: read once, so that a pipe
    (``/dev/stdin``, a FIFO, a stream) works as a file does."""
    if isinstance(path, (str, Path)):
        with open(path, "rb") as fh:
            data = fh.read()
    else:
        data = path.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_edge_list(
    path: str | Path | io.BufferedIOBase | BinaryIO, self_links: bool = False
) -> Graph:
    """Read a SNAP-style edge list: ``src dst`` per line, whitespace separated, ``#`` lines
    ignored, node ids any strings (gzip is detected). Node names keep the file's spelling.
    ``path``: a file name (a pipe such as ``/dev/stdin`` too) or a binary stream."""
    data = _read_bytes(path)
    if not isinstance(path, (str, Path)):
        path = getattr(path, "name", "stdin")
    if b"#" in data:
        data = b"\n".join(line for line in data.splitlines() if not line.lstrip().startswith(b"#"))
    tokens = data.split()
    if not tokens:
        raise ValueError(f"{path}: no edges")
    _check_columns(path, data, len(tokens))
    arr = np.array(tokens)
    keys: np.ndarray
    try:
        keys = arr.astype(np.int64)
        numeric = True
    except ValueError:
        keys, numeric = arr, False
    uniq, inverse = np.unique(keys, return_inverse=True)
    names = uniq.astype(str) if numeric else np.char.decode(uniq, "utf-8")
    inverse = inverse.reshape(-1, 2)
    return from_edges(inverse[:, 0], inverse[:, 1], len(uniq), names, self_links=self_links)


def _check_columns(path: object, data: bytes, tokens: int) -> None:
    """Refuse an edge list whose ``tokens`` are not two per data line of ``data``."""
    lines = [line for line in data.splitlines() if line.strip()]
    if tokens != 2 * len(lines):
        k, bad = next((k, ln) for k, ln in enumerate(lines, 1) if len(ln.split()) != 2)
        shown = bad.decode(errors="replace")
        raise ValueError(
            f"{path}: data line {k} has {len(bad.split())} columns ({shown!r}): every line "
            "must be 'src dst' (weights are not read)"
        )


def power_law_graph(n: int, exponent: float = 2.1, seed: int = 0) -> Graph:
    """A synthetic web-like graph: in-degrees follow ``P(I = k) ~ k^-exponent`` (k >= 1, capped at
    ``n - 1``) and every in-link comes from a source chosen uniformly at random (the paper's
    "simple graph model based on the power distribution on incoming edges"). Out-degrees are then
    close to Poisson; a few pages end up dangling, and collapsing duplicates leaves a few pages
    without in-links."""
    rng = np.random.default_rng(seed)
    indeg = np.minimum(rng.zipf(exponent, size=n), n - 1)
    dst = np.repeat(np.arange(n, dtype=np.int64), indeg)
    src = rng.integers(0, n, size=dst.size)
    return from_edges(src, dst, n)


def write_edge_list(graph: Graph, path: str | Path) -> None:
    """Write ``graph`` as a ``src<TAB>dst`` edge list (node names if it has them)."""
    src = graph.sources()
    dst = graph.indices
    with open(path, "w") as fh:
        fh.write(f"# {graph.n} nodes, {graph.n_edges} edges\n")
        if graph.names is None:
            np.savetxt(fh, np.column_stack([src, dst]), fmt="%d", delimiter="\t")
        else:
            for a, b in zip(graph.names[src], graph.names[dst]):
                fh.write(f"{a}\t{b}\n")
