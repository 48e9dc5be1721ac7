"""A page's importance, read from an engine: PageRank's split of the credit flow.

Cash orders the crawl; importance is measured on the credit that moves with it (see "Importance"
in :mod:`~scrapy_opic.opic.engine`). The window policy estimates each page's share of the link
credit; a page's importance is::

    x_j = a / n + (1 - a) * est_j / sum(est),    a = eps + (1 - eps) * D

with ``D`` the share of the credit flow that passed through dangling pages. Nothing here moves
cash or credit: these functions only read an engine (or a partition's engine with the crawl's
sums in its :class:`CrawlView`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .constants import CLOSED, FETCHED
from .window import WindowPolicy

#: Pages a whole-frontier scan (total cash, the best page) handles at a time: its memory.
SCAN = 1 << 18
#: A sum of estimates below this is the rounding of values of the order of the crawl's credit
#: (1 per pass): no evidence of any page's share, so importance is uniform (else that noise,
#: divided by itself, would rank the pages).
NOISE = 1e-12


class CrawlView(NamedTuple):
    """What one partition's engine knows of the rest of its crawl (a pooled engine: see
    :mod:`~scrapy_opic.opic.partition`), as the crawl's pool last told it: the live pages and
    the pages never fetched in the *other* partitions (how the virtual page's cash is split),
    and the crawl's sums that tell a page's importance (:func:`importance_of`)."""

    live_others: int  #: live pages of the other partitions
    unfetched_others: int  #: of which never fetched
    n: int  #: pages known in the crawl
    credit_total: float  #: link credit received by all pages
    b_total: float  #: the received-credit moments' sums (the regression estimator)
    d_total: float
    credit_passed: float  #: credit passed on by visits, and by dangling pages' visits
    credit_dangling: float
    normaliser: float  #: the sum of the window's estimates (windowed policies)
    teleport: float = 0.0  #: the teleport credit every page of the crawl was given


class OpicEngine(Protocol):
    """What these functions read of an :class:`~.engine.OpicEngine` (the engine calls them:
    this module does not import it)."""

    n: int
    G: float
    epsilon: float
    view: CrawlView | None
    credit_passed: float
    credit_dangling: float
    window: WindowPolicy
    flags: np.ndarray
    held_credit: np.ndarray
    held_credit_mv: Any
    norm_cache: tuple[float, int, float] | None

    def now(self) -> float: ...


def mix(est: np.ndarray, flags: np.ndarray, a: float, total: float, kept: int) -> np.ndarray:
    """Importance from the window's estimates ``est`` of pages with ``flags``: the teleport
    share ``a / kept`` plus ``1 - a`` by share of the link credit (``total``: the sum of the
    estimates of the open pages). A closed page's credit counts for nothing, so a page never
    fetched for good (robots.txt, offsite) holds the teleport share, what PageRank gives a page
    no link leads to; a page *gone* (fetched, then closed: 404, 410, a permanent redirect) holds
    nothing, and ``kept`` counts the pages that are not gone. Sums to 1 over all pages."""
    closed = (flags & CLOSED) != 0
    if total > NOISE:
        out = a / kept + (1.0 - a) / total * np.where(closed, 0.0, est)
    else:
        out = np.full(len(est), 1.0 / kept)
    out[closed & ((flags & FETCHED) != 0)] = 0.0
    return out


def teleport_share(e: OpicEngine) -> float:
    """PageRank's uniform share ``a = eps + (1 - eps) * D``: a page with no in-link has
    importance ``a / n``."""
    view = e.view
    passed = e.credit_passed if view is None else view.credit_passed
    spent = e.credit_dangling if view is None else view.credit_dangling
    return e.epsilon + (1.0 - e.epsilon) * (spent / passed if passed > 0 else 0.0)


def estimates(e: OpicEngine, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """The window's estimate of the share of the history of pages ``lo..hi`` (all by default):
    not normalised, comparable between the engines of one crawl's partitions (one clock)."""
    hi = e.n if hi is None else min(hi, e.n)
    return e.window.estimate(np.arange(lo, hi), e.held_credit[lo:hi], e.now())


def normaliser(e: OpicEngine) -> float:
    """The sum of the window's estimates over all pages: the window's when it keeps it, the
    crawl's as the engine's :attr:`~.engine.OpicEngine.view` tells, else a scan (cached until
    the clock or the page count moves by 1%)."""
    total = e.window.normaliser()
    if total is not None:
        return float(total)
    if e.view is not None:
        return e.view.normaliser
    cached = e.norm_cache
    if (
        cached is None
        or abs(e.G - cached[0]) > 0.01 * max(e.G, 1e-300)
        or (abs(e.n - cached[1]) > 0.01 * e.n)
    ):
        total = sum(
            float(estimates(e, lo, min(e.n, lo + SCAN)).sum()) for lo in range(0, e.n, SCAN)
        )
        e.norm_cache = cached = (e.G, e.n, total)
    return cached[2]


def importance_of_parts(engines: Sequence[OpicEngine]) -> list[np.ndarray]:
    """The importance of every page of ``engines``, the parts of one crawl (one engine, or the
    partitions of a crawl a process owns: their clocks are one), per engine: :func:`mix` over
    all their pages together, the teleport share and the crawl's page count (its view's, if
    any) the first engine's."""
    ests = [estimates(e) for e in engines]
    flags = [e.flags[: e.n] for e in engines]
    total = sum(float(est[(f & CLOSED) == 0].sum()) for est, f in zip(ests, flags))
    gone = sum(int((((f & CLOSED) != 0) & ((f & FETCHED) != 0)).sum()) for f in flags)
    first = engines[0]
    n_all = first.view.n if first.view is not None else sum(e.n for e in engines)
    a = teleport_share(first)
    return [mix(est, f, a, total, max(1, n_all - gone)) for est, f in zip(ests, flags)]


def importance_of(e: OpicEngine, i: int) -> float:
    """Importance of page ``i``. O(1) for the unbounded history; windowed policies reuse a
    normaliser refreshed whenever the clock or the page count moved by 1%."""
    est = e.window.estimate_one(i, e.held_credit_mv[i], e.now())
    total = normaliser(e)
    n = e.n if e.view is None else e.view.n
    a = teleport_share(e)
    return a / n + (1.0 - a) / total * est if total > NOISE else 1.0 / n


def best_page(e: OpicEngine) -> tuple[int, float] | None:
    """The most important page and its importance (None without pages): O(n) time,
    :data:`SCAN` pages at a time in memory."""
    n = e.n
    if not n:
        return None
    best, best_est, total = 0, -np.inf, 0.0
    for lo in range(0, n, SCAN):
        est = estimates(e, lo, lo + SCAN)
        est[(e.flags[lo : lo + est.size] & CLOSED) != 0] = 0.0  # (closed: no importance of its own)
        total += float(est.sum())
        k = int(est.argmax())
        if est[k] > best_est:
            best, best_est = lo + k, float(est[k])
    norm = e.window.normaliser()
    total = float(norm) if norm is not None else total
    if not total > NOISE:
        return best, 1.0 / n
    a = teleport_share(e)
    return best, a / (n if e.view is None else e.view.n) + (1.0 - a) / total * best_est
