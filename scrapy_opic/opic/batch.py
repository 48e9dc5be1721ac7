"""Many visits at once, with numpy: the simulator's path through an engine.

:func:`visit_batch` applies the rules of :meth:`OpicEngine.visit <.engine.OpicEngine.visit>`
to a set of distinct pages in one vectorised step: every page's cash is taken at the same
instant (the batch's G-time), then all of it is paid out, so a page of the batch linked from
another page of the batch keeps what it receives for its next visit. With batches of one page
it is the per-event path (a test holds the two together).
"""

from __future__ import annotations

import numpy as np

from .constants import CLOSED, FETCHED
from .engine import OpicEngine


def visit_batch(
    e: OpicEngine,
    ids: np.ndarray,
    offsets: np.ndarray,
    children: np.ndarray,
    weights: np.ndarray | None = None,
) -> float:
    """Visit the distinct pages ``ids`` of ``e`` at once; returns the total cash absorbed.

    The out-links of ``ids[k]`` are ``children[offsets[k]:offsets[k + 1]]`` (CSR layout, with
    optional per-link ``weights``). An engine that keeps votes (the web order's) is refused:
    this path does not pass them on.
    """
    if e.votes:
        raise ValueError("visit_batch: the engine keeps votes, which this path does not pass on")
    ids = np.asarray(ids, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    children = np.asarray(children, dtype=np.int64)
    if ids.size == 0:
        return 0.0
    c, k, total = _absorb(e, ids)
    children, row, w = _links(e, ids, offsets, children, weights)
    if w is None:
        wsum = np.bincount(row, minlength=ids.size).astype(float)
    else:
        wsum = np.bincount(row, weights=w, minlength=ids.size)
    live = wsum > 0
    to_virtual = float(c[~live].sum()) + e.epsilon * float(c[live].sum())
    e.credit_passed += float(k.sum())
    e.credit_dangling += float(k[~live].sum())
    if children.size:
        per_weight = np.zeros(ids.size)
        per_weight[live] = (1.0 - e.epsilon) * c[live] / wsum[live]
        share = per_weight[row] if w is None else per_weight[row] * w
        per_weight[live] = (1.0 - e.epsilon) * k[live] / wsum[live]
        got = per_weight[row] if w is None else per_weight[row] * w
        _credit(e, children, share, got)
    e.virtual_cash += to_virtual
    return total


def _absorb(e: OpicEngine, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Every page of ``ids`` gives up its cash and link credit at the batch's instant, into its
    history; returns the cash and credit taken per page, and the total cash (the clock moved
    by it)."""
    for obs in e.observers:
        obs.taken(ids.tolist())
    if e.n_closed:
        for i in ids[(e.flags[ids] & CLOSED) != 0].tolist():
            e.reopen_page(i)
    flags = e.flags[ids]
    first = (flags & FETCHED) == 0
    c = np.maximum(e.stored[ids] + e.acc_all + e.acc_unfetched * first, 0.0)  # (see _take)
    e.flags[ids] = flags | FETCHED
    e.n_unfetched -= int(first.sum())
    e.stored[ids] = -e.acc_all
    received = e.held_credit[ids]
    k = e.acc_credit - e.baseline[ids] + received
    e.baseline[ids] = e.acc_credit
    e.held_credit[ids] = 0.0
    now = e.now()
    last = (e.last_t if e.wall else e.last_g)[ids]
    e.window.absorb(e.hist, ids, received, now, last)
    e.last_g[ids] = e.G
    if e.wall:
        e.last_t[ids] = now
    e.visits[ids] += 1
    total = float(c.sum())
    e.G += total
    e.g_real += total
    e.record_visits(total / ids.size, ids.size)
    if e.learns_default and first.any():
        new = ids[first]
        rates = e.window.estimate(new, np.zeros(new.size), now)
        e.learn_rate(float(rates.mean()), new.size)
    return c, k, total


def _links(
    e: OpicEngine,
    ids: np.ndarray,
    offsets: np.ndarray,
    children: np.ndarray,
    weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The links that count: ``(children, the batch row of each, their weights)``, less
    self-links (unless kept) and links to closed pages."""
    row = np.repeat(np.arange(ids.size), np.diff(offsets))
    w = None if weights is None else np.asarray(weights, dtype=float)
    if children.size and (not e.self_links or e.n_closed):
        keep = np.ones(children.size, dtype=bool)
        if not e.self_links:
            keep &= children != ids[row]
        if e.n_closed:  # links to closed pages are no links
            keep &= (e.flags[children] & CLOSED) == 0
        if not keep.all():
            children, row = children[keep], row[keep]
            w = None if w is None else w[keep]
    return children, row, w


def _credit(e: OpicEngine, children: np.ndarray, share: np.ndarray, got: np.ndarray) -> None:
    """Credit cash ``share`` and link credit ``got`` to ``children`` (repeats summed)."""
    if children.size * 8 < e.n:
        np.add.at(e.stored, children, share)
        np.add.at(e.held_credit, children, got)
    else:
        e.stored[: e.n] += np.bincount(children, weights=share, minlength=e.n)
        e.held_credit[: e.n] += np.bincount(children, weights=got, minlength=e.n)
    paid = float(got.sum())
    e.credit_total += paid
    if e.tracks_moments:
        t = e.G
        np.add.at(e.moment1, children, got * t)
        np.add.at(e.moment2, children, got * (t * t))
        e.b_total += paid * t
        e.d_total += paid * t * t
    if e.observers:
        raised = np.unique(children).tolist()
        for obs in e.observers:
            obs.changed(raised)
