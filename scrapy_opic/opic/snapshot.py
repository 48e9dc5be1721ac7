"""What a store saves of an engine, and how it is rebuilt: a *header* (parameters and scalars,
O(1)) and the rows of its per-page arrays (:func:`engine_arrays`); and a frontier's pages
taken back over its reloaded engine (:func:`restore_frontier`).

A store writes the header and the first ``n`` rows of every array; :func:`engine_from_header`
gives back an engine with those parameters and scalars and room for ``n`` pages, whose rows the
store then fills. The arrays are the engine's own: a store reads rows of them, never keeps them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from .constants import FETCHED, IN_FLIGHT, OK, PENDING, STATUSES, VISITED
from .engine import SCALARS, OpicEngine
from .frontier import MemoryFrontier
from .importance import CrawlView
from .selection import TieredSelection


def engine_arrays(e: OpicEngine) -> dict[str, np.ndarray]:
    """Every per-page array at capacity (row ``i``: page ``i``) by its saved name, the engine's
    (:data:`~.engine.COLUMNS`) then the window policy's (``w.<name>``)."""
    out = {saved: getattr(e, name) for name, saved, _dtype in e.columns}
    out.update({f"w.{k}": a for k, a in e.window.page_arrays().items()})
    return out


def engine_header(e: OpicEngine) -> dict:
    """The engine's parameters and scalars, the window policy's included."""
    return {
        "params": {
            "epsilon": e.epsilon,
            "refresh": e.refresh,
            "window": e.window.spec(),
            "self_links": e.self_links,
            "votes": e.votes,
        },
        "scalars": {k: getattr(e, k) for k in SCALARS},
        "window": e.window.scalars(),
        "view": None if e.view is None else tuple(e.view),
    }


def engine_from_header(header: dict, **kw: Any) -> OpicEngine:
    """An engine with the parameters and scalars of ``header`` (:func:`engine_header`) and room
    for its ``n`` pages, whose rows are still zero: the caller fills the first ``n`` rows of
    each of :func:`engine_arrays`. ``kw``: more parameters (``keys``, ``time_fn``...)."""
    n = int(header["scalars"]["n"])
    engine = OpicEngine(capacity=max(1, n), **{**header["params"], **kw})
    # (A scalar the header does not give keeps its initial value: a state merged from several
    # engines gives only the sums it knows.)
    for k, v in header["scalars"].items():
        if k in SCALARS:
            setattr(engine, k, type(getattr(engine, k))(v))
    engine.window.load_scalars(header["window"])
    view = header.get("view")
    engine.view = None if view is None else CrawlView(*view)
    return engine


def shift_clock(e: OpicEngine, delta: float) -> None:
    """Move the G-clock of ``e`` ``delta`` ahead, and every time it recorded with it (the last
    visits, the window's measures, the received-credit moments): what a partition whose clock
    lags the crawl's is given to be read with the crawl's clock (an export). A wall clock needs
    no shift."""
    if delta <= 0 or e.wall:
        return
    n = e.n
    e.G += delta
    e.g_others += delta
    e.last_g[:n] += delta
    if e.tracks_moments:
        received = e.hist[:n] + e.held_credit[:n]  # (what each page received: sum a)
        e.moment2[:n] += 2.0 * delta * e.moment1[:n] + delta * delta * received
        e.moment1[:n] += delta * received
        e.d_total += 2.0 * delta * e.b_total + delta * delta * e.credit_total
        e.b_total += delta * e.credit_total
    e.window.shift(delta, n)


def restore_frontier(
    fr: MemoryFrontier,
    status: np.ndarray | bytes,
    outcome: np.ndarray | None = None,
    tier: np.ndarray | None = None,
    tiers: Sequence[tuple[int, Hashable]] = (),
    alias: dict[int, int] | None = None,
    kept: np.ndarray | None = None,
) -> int:
    """Take a saved frontier's per-page arrays over ``fr``, whose engine is reloaded: the
    statuses, outcomes and tier codes by id (uint8, uint16, uint32), the ``(priority,
    slot)`` pairs of codes 1, 2..., the aliases. ``kept``: the mask of the pages whose
    payload the rows still have (``None``: every page with a tier code). Pages that were in
    flight are pending again (their fetch may not have happened; their cash is still
    theirs); a pending page without a payload is given up (cash to the virtual page).
    Vectorised: no Python step per page but for those given up. Returns how many pages were
    in flight."""
    n = len(status)
    fr.grow(fr.engine.capacity)
    st = np.frombuffer(fr.status, np.uint8)[:n]
    st[:] = np.frombuffer(status, np.uint8) if isinstance(status, bytes) else status
    if outcome is not None and len(outcome):
        np.frombuffer(fr.outcome, np.uint16)[:n] = outcome
        fr.n_ok = int((np.asarray(outcome)[:n] == OK).sum())
    for priority, slot in tiers:
        fr.tiers.code(priority, slot)  # (codes 1, 2... again, in their order)
    codes = np.frombuffer(fr.tier, np.uint32)[:n]
    if tier is not None:
        codes[:] = tier
    fr.alias = dict(alias or {})
    back = int((st == IN_FLIGHT).sum())
    st[st == IN_FLIGHT] = PENDING
    waiting = (st == PENDING) & (codes != 0)
    if kept is not None:
        waiting &= kept[:n]
    lost = np.flatnonzero((st == PENDING) & ~waiting)
    st[lost] = VISITED  # nothing to fetch them with: given up
    codes[lost] = 0
    ids = np.flatnonzero(waiting)
    del st, codes  # (exported buffers would keep the arrays from growing)
    for i in lost.tolist():
        fr.engine.forfeit(i)
    saved = np.frombuffer(fr.status, np.uint8, count=n)
    fr.counts = [int(c) for c in np.bincount(saved, minlength=len(STATUSES))]
    del saved
    _push_back(fr, ids)
    return back


def _push_back(fr: MemoryFrontier, ids: np.ndarray) -> None:
    """Make the pending pages ``ids`` candidates again (a tiered selection: all at once, the
    fetched pages of a continuous crawl in their refetch tier)."""
    sel = fr.selection
    if isinstance(sel, TieredSelection):
        if fr.continuous and ids.size:
            _refetch_tiers(fr, ids[(fr.engine.flags[ids] & FETCHED) != 0])
        sel.load(ids)
    else:
        for i in ids.tolist():
            sel.push(i)


def _refetch_tiers(fr: MemoryFrontier, ids: np.ndarray) -> None:
    """The refetch tier (see :class:`~.frontier.MemoryFrontier`) of many fetched pages at
    once (a resumed continuous crawl)."""
    tiers = fr.tiers
    zero = np.arange(len(tiers) + 1, dtype=np.uint32)  # code -> the code of (0, its slot)
    for c in range(1, len(zero)):
        if tiers.priority(c):
            zero[c] = tiers.code(0, tiers.slot(c))
    view = np.frombuffer(fr.tier, dtype=np.uint32)
    view[ids] = zero[view[ids]]
    del view  # (an exported buffer would keep the array from growing)
