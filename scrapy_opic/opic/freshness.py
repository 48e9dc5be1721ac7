"""Freshness of periodic refetches, and the allocation of a refetch budget that maximises it.

A page changing as a Poisson process of rate ``l`` and refetched every ``1/f`` is current a
share of the time (Cho and Garcia-Molina)::

    F(f, l) = (f / l) (1 - e^(-l / f)) = (1 - e^(-r)) / r,      r = l / f

(``F = 1`` for ``l = 0``, ``F = 0`` for ``f = 0 < l``). ``F`` is increasing and concave in ``f``::

    dF/df = g(r) / l,        g(r) = 1 - (1 + r) e^(-r)   (0 at r = 0, rising to 1)

Optimal allocation. Maximise ``sum w_i F(f_i, l_i)`` subject to ``sum f_i = B``, ``f_i >= floor``.
The problem is concave, so the KKT conditions are sufficient: a multiplier ``mu`` with

* ``w_i dF/df(f_i) = mu`` for every page above the floor, i.e. ``g(l_i / f_i) = mu l_i / w_i``;
* ``w_i dF/df(floor) <= mu`` for pages at the floor; since ``dF/df <= 1/l``, a page with
  ``w_i / l_i <= mu`` gets the floor only.

``f_i(mu)`` decreases in ``mu``, so ``sum f_i(mu) = B`` is solved by bisection on ``log mu``, and
``g(r) = y`` by Newton's method on the concave ``ln(1 + r) - r - ln(1 - y)`` from an upper bound
(monotone convergence). The allocation is not monotone in ``l``: at a given ``mu`` it rises with
``l`` from ``sqrt(l w / (2 mu))`` and falls to the floor at ``l = w / mu``: a page that changes
faster than the budget can follow is worth little. A page that never changes gains nothing from
a refetch (``dF/df = 0``): it gets the floor, the cheap check that would notice it start changing.
"""

from __future__ import annotations

import math

import numpy as np


def freshness(f: np.ndarray | float, rate: np.ndarray | float) -> np.ndarray:
    """``F(f, l)``, elementwise."""
    f, rate = np.broadcast_arrays(np.asarray(f, float), np.asarray(rate, float))
    r = np.divide(rate, f, out=np.full(f.shape, np.inf), where=f > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = -np.expm1(-r) / r
    out = np.where(rate <= 0, 1.0, out)
    return np.where((f <= 0) & (rate > 0), 0.0, out)


def marginal(f: np.ndarray | float, rate: np.ndarray | float) -> np.ndarray:
    """``dF/df``, elementwise (``1/l`` at ``f = 0``; 0 for ``l = 0``)."""
    f, rate = np.broadcast_arrays(np.asarray(f, float), np.asarray(rate, float))
    r = np.divide(rate, f, out=np.full(f.shape, np.inf), where=f > 0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        g = np.where(np.isinf(r), 1.0, -np.expm1(-r) - r * np.exp(-r))
        return np.where(rate > 0, g / rate, 0.0)


def weighted_freshness(f: np.ndarray, rate: np.ndarray, w: np.ndarray) -> float:
    """``sum w F(f, l) / sum w``: the importance-weighted share of pages that are current."""
    return float((w * freshness(f, rate)).sum() / w.sum())


def ratio_for(y: np.ndarray) -> np.ndarray:
    """``r`` with ``g(r) = y`` for ``0 < y < 1``. Starts above the root (``2 sqrt(y)`` for
    ``y <= 0.14``, where ``g(r) >= r^2/2 - r^3/3``; else ``2 ln(1.22 / (1 - y))``, since
    ``(1 + r) e^(-r/2) <= 2 e^(-1/2)``), where Newton on a concave decreasing function converges
    monotonically."""
    y = np.asarray(y, float)
    r = np.where(y <= 0.14, 2.0 * np.sqrt(y), 2.0 * np.log(1.22 / (1.0 - y)))
    c = np.log1p(-y)
    for _ in range(100):
        phi = np.log1p(r) - r - c  # <= 0 right of the root
        step = phi * (1.0 + r) / r
        r = r + step
        if not (np.abs(step) > 1e-13 * r).any():
            break
    return r


def _allocate(w: np.ndarray, rate: np.ndarray, mu: float, floor: float) -> np.ndarray:
    """``f_i(mu)``: the frequencies at which ``w dF/df = mu``, raised to ``floor``."""
    f = np.zeros(w.shape)
    y = np.divide(mu * rate, w, out=np.full(w.shape, np.inf), where=w > 0)
    live = (rate > 0) & (y < 1.0)
    f[live] = rate[live] / ratio_for(y[live])
    return np.maximum(f, floor)


def optimal_allocation(
    w: np.ndarray, rate: np.ndarray, budget: float, floor: float = 0.0
) -> np.ndarray:
    """The refetch frequencies ``f`` (``sum f = budget``, each ``>= floor``) that maximise
    ``sum w F(f, l)``: see the module docstring. With ``floor * n >= budget`` every page gets
    ``budget / n``; with no page worth a refetch, the budget is shared in proportion to
    ``w`` (nothing is lost: every page is fresh whatever its share)."""
    w, rate = np.asarray(w, float), np.asarray(rate, float)
    n = w.size
    if n == 0:
        return np.zeros(0)
    if floor * n >= budget:
        return np.full(n, budget / n)
    worth = (rate > 0) & (w > 0)
    if not worth.any():
        return proportional_allocation(w, budget - floor * n) + floor
    # Bracket: mu_hi = max w/rate gives nobody more than the floor; below it the sum grows
    # without bound as mu -> 0.
    hi = math.log(float((w[worth] / rate[worth]).max()))
    lo = hi - 2.0
    while _allocate(w, rate, math.exp(lo), floor).sum() < budget:
        lo -= 2.0 * (hi - lo)
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _allocate(w, rate, math.exp(mid), floor).sum() > budget:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    f = _allocate(w, rate, math.exp(hi), floor)
    above = f > floor  # (the rounding left by the bisection, shared by the pages it moves)
    if above.any():
        f[above] *= (budget - floor * (~above).sum()) / f[above].sum()
    return f


def uniform_allocation(n: int, budget: float) -> np.ndarray:
    """Every page refetched alike."""
    return np.full(n, budget / n) if n else np.zeros(0)


def proportional_allocation(w: np.ndarray, budget: float) -> np.ndarray:
    """Refetches in proportion to importance (what a cash-driven continuous crawl does)."""
    w = np.asarray(w, float)
    return budget * w / w.sum()
