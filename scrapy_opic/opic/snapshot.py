"""What a store saves of an engine, and how it is rebuilt: a *header* (parameters and scalars,
O(1)) and the rows of its per-page arrays (:func:`engine_arrays`).

A store writes the header and the first ``n`` rows of every array; :func:`engine_from_header`
gives back an engine with those parameters and scalars and room for ``n`` pages, whose rows the
store then fills. The arrays are the engine's own: a store reads rows of them, never keeps them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .engine import SCALARS, OpicEngine
from .importance import CrawlView


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


__all__ = ["engine_arrays", "engine_from_header", "engine_header", "shift_clock"]
