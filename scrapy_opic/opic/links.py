"""Kept out-links (``OPIC_KEEP_LINKS``): compact blobs of page ids, and the crawled graph.

A page's out-links are the ids of the pages its last parsed visit paid (the engine's dense
integer ids, < 2**32), kept as one blob per page: the ids sorted, repeats and the page itself
left out, each written as its gap from the previous one (the first: the id itself) in LEB128
varints (7 bits a byte, the high bit set on every byte but a number's last). A site's pages
link mostly to pages discovered near them, so most gaps take one or two bytes.

Both directions work on many pages at once with numpy (a commit encodes every page that changed
since the previous one; an export decodes every page): no Python loop per link.

:func:`crawl_graph` turns the kept links of a snapshot into the graph whose PageRank the export
reports, with the engine's rules (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from .graph import Graph, from_edges

#: The most bytes a varint of a 32-bit id takes.
_MAX_BYTES = 5


def encode_links(pages: Sequence[int], lists: Sequence[Sequence[int]]) -> list[bytes]:
    """One blob per page ``pages[k]`` for its link targets ``lists[k]`` (see the module
    docstring): sorted, without repeats nor ``pages[k]`` itself. An empty list is ``b""``."""
    k = len(lists)
    if k == 0:
        return []
    lengths = np.fromiter(map(len, lists), np.int64, count=k)
    total = int(lengths.sum())
    if total == 0:
        return [b""] * k
    flat = np.fromiter(chain.from_iterable(lists), np.int64, count=total)
    if flat.min() < 0 or flat.max() >= 1 << 32:
        raise ValueError("a link target out of the uint32 range")
    row = np.repeat(np.arange(k, dtype=np.int64), lengths)
    keep = flat != np.repeat(np.asarray(pages, dtype=np.int64), lengths)  # no self-link
    code = np.unique((row[keep] << 32) | flat[keep])  # sorted by (page, target), no repeats
    row = code >> 32
    val = code & 0xFFFFFFFF
    gap = val.copy()
    same = row[1:] == row[:-1]
    gap[1:][same] -= val[:-1][same]
    nb = np.ones(gap.size, np.int64)
    for b in range(1, _MAX_BYTES):
        nb += gap >= (1 << (7 * b))
    ends = np.cumsum(nb)
    starts = ends - nb
    buf = np.empty(int(ends[-1]) if ends.size else 0, np.uint8)
    for b in range(_MAX_BYTES):
        m = nb > b
        if not m.any():
            break
        byte = (gap[m] >> (7 * b)) & 0x7F
        byte |= (nb[m] > b + 1).astype(np.int64) << 7  # more bytes follow
        buf[starts[m] + b] = byte
    per_row = np.bincount(row, weights=nb, minlength=k).astype(np.int64)
    offsets = np.zeros(k + 1, np.int64)
    np.cumsum(per_row, out=offsets[1:])
    data = buf.tobytes()
    bounds = offsets.tolist()
    return [data[bounds[r] : bounds[r + 1]] for r in range(k)]


def decode_links(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, targets)`` of blobs made by :func:`encode_links`: the number of links of each
    blob, and all their targets one blob after the other (int64, sorted within each blob).
    :class:`ValueError` for bytes that are not such blobs."""
    k = len(blobs)
    lengths = np.fromiter(map(len, blobs), np.int64, count=k)
    b = np.frombuffer(b"".join(blobs), np.uint8)
    last = b < 0x80  # the last byte of a varint
    blob_ends = np.cumsum(lengths)
    if b.size and not last[blob_ends[lengths > 0] - 1].all():
        raise ValueError("a links blob ends inside a number")
    ends = np.flatnonzero(last)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    nb = ends - starts + 1
    if nb.size and nb.max() > _MAX_BYTES:
        raise ValueError("a links blob holds a number over 32 bits")
    gap = np.zeros(ends.size, np.int64)
    for j in range(_MAX_BYTES):
        m = nb > j
        if not m.any():
            break
        gap[m] |= (b[starts[m] + j] & 0x7F).astype(np.int64) << (7 * j)
    # Numbers ending before each blob's end: its count is the difference.
    done = np.zeros(b.size + 1, np.int64)
    np.cumsum(last, out=done[1:])
    counts = np.diff(done[np.concatenate(([0], blob_ends))])
    # Each blob's ids are the running sum of its gaps (from the blob's first number).
    run = np.zeros(gap.size + 1, np.int64)
    np.cumsum(gap, out=run[1:])
    first = np.concatenate(([0], np.cumsum(counts)[:-1])) if k else np.zeros(0, np.int64)
    targets = run[1:] - np.repeat(run[first], counts)
    if targets.size and targets.max() >= 1 << 32:
        raise ValueError("a links blob holds an id over 32 bits")
    return counts, targets


def _check_rows(n: int, pages: np.ndarray, targets: np.ndarray) -> None:
    """Refuse the rows of :func:`crawl_graph` unless in page order, all in ``range(n)``."""
    if pages.size and (pages.min() < 0 or pages.max() >= n):
        raise ValueError("links kept for a page out of range")
    if targets.size and (targets.min() < 0 or targets.max() >= n):
        raise ValueError("a kept link to a page out of range")
    if pages.size > 1 and (np.diff(pages) <= 0).any():
        raise ValueError("kept links not in page order")


def crawl_graph(
    n: int,
    pages: np.ndarray,
    counts: np.ndarray,
    targets: np.ndarray,
    closed: np.ndarray,
    redirects: tuple[np.ndarray, np.ndarray] | None = None,
) -> Graph:
    """The graph of a crawl on its ``n`` known pages (every page a node, as every page has an
    importance): page ``pages[k]`` links to the next ``counts[k]`` of ``targets`` (its kept
    links, each page at most once in ``pages``), with the engine's rules:

    * a closed page (``closed``: the engine's CLOSED flag: 404, robots.txt...) is no page to link
      to: a link to it is no link (out of the linking page's out-degree, as the engine leaves it
      out of the payout), and it links to nothing;
    * a page that redirected (``redirects``: ``(pages, targets)``) is its target: a link to it is
      a link to the page it redirected to (as the engine moves its cash and credit there),
      followed through chains; a redirect loop ends where it closes;
    * no self-links, each link once (a page links to another page once).

    Pages with no links (never fetched, failed, closed) are dangling: PageRank spreads their
    share uniformly."""
    pages = np.asarray(pages, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    _check_rows(n, pages, targets)
    if redirects is not None and redirects[0].size:
        to = np.arange(n, dtype=np.int64)
        to[redirects[0]] = redirects[1]
        for _ in range(64):  # chains: each round halves what is left of each one
            nxt = to[to]
            if np.array_equal(nxt, to):
                break
            to = nxt
        live = ~closed[pages]
        src = np.repeat(pages[live], counts[live])
        dst = to[targets[np.repeat(live, counts)]]
        keep = ~closed[dst]
        return from_edges(src[keep], dst[keep], n)
    # No redirect: the rows are already CSR (in page order, each sorted with no repeat and no
    # self-link), so the graph is built without a source array or a sort: 4 bytes per link.
    live = ~closed[pages]
    dst = targets if live.all() else targets[np.repeat(live, counts)]
    counts = np.where(live, counts, 0)
    if closed.any():
        keep = ~closed[dst]
        if not keep.all():
            # Each row keeps its links to open pages: its count is the sum of its mask.
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            kept = np.add.reduceat(keep.astype(np.int32), starts[counts > 0])
            counts = counts.copy()
            counts[counts > 0] = kept
            dst = dst[keep]
    per_page = np.zeros(n, np.int64)
    per_page[pages] = counts
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(per_page, out=indptr[1:])
    return Graph(indptr, dst.astype(np.int32, copy=False))
