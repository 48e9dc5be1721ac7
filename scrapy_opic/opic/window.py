"""History window policies: how a page's history H absorbs what it received at a visit.

What a page receives and the window measures is its *link credit* (the engine's docstring says
why: the cash a crawl starts with is not importance); the formulas are the paper's, with ``C`` the
link credit received since the last visit, and the clock ``G`` (the cash absorbed) or wall time.

Section 3.3 of the paper (Abiteboul, Preda, Cobena, WWW 2003) defines Adaptive OPIC by the *window*
over which a page's history is kept. Each policy here implements one of them:

``UnboundedHistory``
    Static OPIC: ``H += C`` forever. The only policy for which Lemma 2.3 holds exactly.
``Interpolation(T)``
    One measure per page: ``H`` estimates the cash the page received during the ``T`` time units
    before its last visit, assuming cash accumulates linearly (the paper's update formula)::

        H <- H * (T - (G - G[i])) / T + C     if G - G[i] < T
        H <- C * T / (G - G[i])               otherwise

``AdaptiveInterpolation(T, T_min)``
    Interpolation whose window never reaches back before the start of the last change of the
    link structure the crawl saw (nor below ``T_min``): not one of the paper's policies, a
    window for a site that changes.
``VariableWindow(k)``
    The last ``k`` measures ``(C, G)`` of every page.
``FixedWindow(T)``
    The measures taken since ``now - T`` (their number varies from page to page).
``ImprovedFixedWindow(T, m)``
    Fixed Window that always keeps at least the last ``m`` measures.

Time is the G-clock (total history, the paper's choice) or wall-clock seconds (``clock="wall"``),
which is what a crawl that is paused and resumed usually wants.

Every policy estimates a page's *share of the link-credit flow*: what it received in its window
divided by the window's length (a rate); the engine adds PageRank's teleport share and
normalises. For the unbounded history the estimate is ``H + C`` (Lemma 2.3: one exact
power-iteration step applied to what the parents passed on) or the slope of the received credit
over time (see :class:`UnboundedHistory`).

Policies hold per-page arrays that the engine grows with its own capacity; ``absorb`` and
``estimate`` are vectorised over arrays of page ids, so the engine's per-event path and its batch
path run the same formulas. A policy writes only what it is handed (the history array) and its
own arrays; it reads the engine through its public attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from .constants import BLEND_LEMMA, CHANGE_DECAY, CHANGE_LEVEL, ESTIMATORS, SLOPE_NOISE


class EngineView(Protocol):
    """What a window policy reads of the engine it is bound to (never writes): the per-page
    arrays of history and visit times, the clock, and the engine's O(1) totals."""

    capacity: int
    n: int
    G: float
    hist: np.ndarray
    last_g: np.ndarray
    last_t: np.ndarray
    default_rate: float
    moment1: np.ndarray  # the G-moments of the link credit each page received
    moment2: np.ndarray
    credit_total: float  # and their sums over all pages
    b_total: float
    d_total: float
    view: Any  # the crawl's sums, for a partition's engine (a CrawlView), or None


CLOCKS = ("g", "wall")


class WindowPolicy:
    """Base class. Subclasses own whatever per-page state their window needs.

    Contract with the engine:

    * ``bind(engine)`` is called once; ``grow(capacity)`` whenever the engine grows.
    * ``on_new(hist, ids, now, rate)`` for pages that just joined: writes their starting history
      into ``hist[ids]`` (a window's prior: the default history, ``rate`` cash per time unit).
    * ``absorb(hist, ids, cash, now, last)`` at a visit: ``last`` (aligned with ``ids``) is the
      time of each page's previous visit (or arrival) on the policy's clock; writes the pages' new
      history into ``hist[ids]``. ``absorb_one`` is the same for one page.
    * ``estimate(ids, cash, now)`` returns a non-negative, un-normalised importance estimate.
    * ``normaliser()`` is the sum of the estimates over all pages when the policy knows it in
      O(1), else ``None`` (the engine then sums them).

    ``windowed`` is false for the unbounded history only: a window forgets old cash, so a page
    just discovered needs a prior (the engine learns the default history for it).
    """

    name = "window"
    clock = "g"
    windowed = True
    #: Whether :meth:`observe_change` does anything (a driver may skip measuring change).
    watches_change = False

    def __init__(self) -> None:
        self.engine: EngineView | None = None

    @property
    def needs_moments(self) -> bool:
        """Whether the engine must keep each page's received-credit moments for this policy."""
        return False

    def _bound(self) -> EngineView:
        """The engine this policy serves (:meth:`bind`)."""
        if self.engine is None:
            raise RuntimeError("a window policy serves an engine only once bound to it")
        return self.engine

    # -- lifecycle -------------------------------------------------------------------------
    def bind(self, engine: EngineView) -> None:
        self.engine = engine
        self.grow(engine.capacity)

    def grow(self, capacity: int) -> None:
        """Resize per-page arrays to ``capacity`` rows (new rows zeroed)."""

    def on_new(self, hist: np.ndarray, ids: np.ndarray, now: float, rate: float) -> None:
        """Initialise the history (and window state) of newly added pages."""

    # -- formulas --------------------------------------------------------------------------
    def absorb(
        self, hist: np.ndarray, ids: np.ndarray, cash: np.ndarray, now: float, last: np.ndarray
    ) -> None:
        raise NotImplementedError

    def absorb_one(self, hist: Any, i: int, cash: float, now: float, last: float) -> None:
        """Scalar path (``hist`` may be a memoryview); policies with cheap scalar formulas
        override it."""
        ids = np.array([i], dtype=np.int64)
        # (np.asarray of a memoryview is a view of the same memory: the write lands in hist.)
        self.absorb(np.asarray(hist), ids, np.array([cash]), now, np.array([last]))

    def estimate(self, ids: np.ndarray, cash: np.ndarray, now: float) -> np.ndarray:
        raise NotImplementedError

    def estimate_one(self, i: int, cash: float, now: float) -> float:
        return float(self.estimate(np.array([i], dtype=np.int64), np.array([cash]), now)[0])

    def normaliser(self) -> float | None:
        """The sum of :meth:`estimate` over all pages in O(1), or ``None`` if unknown."""
        return None

    def observe_change(self, share: float, now: float) -> None:
        """The crawl saw a page whose links changed by ``share`` (0 to 1: the share of its
        links that are new or gone since its last parsed visit; 1 for a page that is gone).
        Only a policy that adapts its window to change uses it."""

    def measures_per_page(self, now: float) -> float:
        """Average number of measures a page's estimate currently uses (the paper's Fig. 5)."""
        raise NotImplementedError

    def nbytes(self) -> int:
        return 0

    def shift(self, delta: float, n: int) -> None:
        """The times this policy keeps per page (beyond the engine's), moved ``delta`` ahead
        (see :meth:`OpicEngine.shift_clock`)."""

    def page_arrays(self) -> dict[str, np.ndarray]:
        """The policy's per-page arrays at capacity (row ``i``: page ``i``), for a store that
        saves rows; none for most policies."""
        return {}

    def scalars(self) -> dict:
        """The policy's own scalars (what a store saves beside :meth:`page_arrays`)."""
        return {}

    def load_scalars(self, scalars: dict) -> None:
        """Restore what :meth:`scalars` gave."""

    @staticmethod
    def merge_scalars(parts: Sequence[dict]) -> dict:
        """The scalars of one policy standing for several engines' (their :meth:`scalars`,
        clocks made one): the first's, for a policy whose scalars are per-engine learning."""
        return parts[0] if parts else {}

    def spec(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec()}>"

    # -- helpers ---------------------------------------------------------------------------
    def _last(self) -> np.ndarray:
        """Time of each page's last visit (or arrival) on this policy's clock."""
        e = self._bound()
        return e.last_g if self.clock == "g" else e.last_t


class UnboundedHistory(WindowPolicy):
    """Static OPIC: the history keeps every cash ever absorbed.

    Estimators of a page's importance (all normalised over pages by the engine):

    ``lemma``
        ``H + C``, the link credit the page received. By Lemma 2.3 it equals one exact power
        step applied to what its parents passed on.
    ``paper``
        The paper's ``(H + C) / (G + 1)``: on the credit, which has no initial ``C0`` in what
        pages receive, the same estimate as ``lemma`` (kept as a name for existing settings).
    ``regression``
        The slope of the page's received credit over G-time, fitted by least squares over
        ``[0, G]``: ``6 * sum_k a_k t_k (G - t_k) / G^3`` for the amounts ``a_k`` received at
        times ``t_k``. Credit reaches a page in lumps, when its parents are visited; what the
        parents still hold is a lag below the true inflow. That lag biases ``H + C`` by
        ``O(1/G)`` but shifts the fitted line without tilting it, and the fit also gives the
        start-up transient little weight. Needs two more floats per page (the moments
        ``sum a t`` and ``sum a t^2``).
    ``blend`` (default)
        The mean of the normalised ``lemma`` and ``regression`` estimates, with equal weights:
        ``lemma`` is the better one in the first passes, ``regression`` once pages have been
        visited a few times; the mean stays close to the better of the two at every horizon
        measured (``benchmarks/results/paper_figures.md``).
    """

    name = "unbounded"
    windowed = False
    ESTIMATORS = ESTIMATORS

    def __init__(self, estimator: str = "blend") -> None:
        super().__init__()
        if estimator not in self.ESTIMATORS:
            raise ValueError(f"estimator must be one of {self.ESTIMATORS}, not {estimator!r}")
        self.estimator = estimator

    @property
    def needs_moments(self) -> bool:
        return self.estimator in ("regression", "blend")

    def absorb(
        self, hist: np.ndarray, ids: np.ndarray, cash: np.ndarray, now: float, last: np.ndarray
    ) -> None:
        hist[ids] += cash

    def absorb_one(self, hist: Any, i: int, cash: float, now: float, last: float) -> None:
        hist[i] += cash

    def estimate(self, ids: np.ndarray, cash: np.ndarray, now: float) -> np.ndarray:
        e = self._bound()
        est = e.hist[ids] + cash
        if self.estimator in ("lemma", "paper"):
            return est
        slope = self._slope(e.moment1[ids], e.moment2[ids])
        if self.estimator == "regression":
            return slope
        received, slopes = self._received_total(), self._slope_total()
        return BLEND_LEMMA * (est / received if received > 0 else est) + (1.0 - BLEND_LEMMA) * (
            slope / slopes if slopes > 0 else slope
        )

    def _slope(self, b: np.ndarray, d: np.ndarray) -> np.ndarray:
        G = self._bound().G
        if G <= 0:
            return np.zeros_like(b)
        spread = G * b - d  # sum a t (G - t) >= 0; 0 when all cash came at one instant
        # Below SLOPE_NOISE of G * b the difference is rounding, not a slope: call it 0, the
        # same way on every path.
        return np.where(spread > SLOPE_NOISE * G * b, 6.0 * spread / G**3, 0.0)

    def normaliser(self) -> float:
        """Sum of :meth:`estimate` over all pages, in O(1) (the blend's parts are each
        normalised already)."""
        if self.estimator == "blend":
            return 1.0
        if self.estimator == "regression":
            return self._slope_total()
        return self._received_total()

    def _received_total(self) -> float:
        """Link credit received by all pages so far, in O(1): the crawl's, for a partition's
        engine (its view)."""
        e = self._bound()
        return e.view.credit_total if e.view is not None else e.credit_total

    def _slope_total(self) -> float:
        """Sum over pages of the regression slope of their received credit, in O(1)."""
        e = self._bound()
        b, d = (e.b_total, e.d_total) if e.view is None else (e.view.b_total, e.view.d_total)
        G = e.G
        spread = G * b - d
        return 6.0 * spread / G**3 if G > 0 and spread > SLOPE_NOISE * G * b else 0.0

    def measures_per_page(self, now: float) -> float:
        return 1.0

    def spec(self) -> str:
        return "unbounded" if self.estimator == "blend" else f"unbounded:{self.estimator}"


class Interpolation(WindowPolicy):
    """The paper's Interpolation policy (the one Xyleme used): one measure per page.

    ``engine.hist[i]`` holds the interpolated cash received during the ``T`` time units before the
    last visit; the time of that visit is ``engine.last_g`` (or ``engine.last_t`` for wall-clock
    windows). A new page starts with the default history ``r0 * T`` stamped at its arrival time,
    ``r0`` being the engine's learned cash rate of recently introduced pages.
    """

    name = "interpolation"

    def __init__(self, T: float, clock: str = "g") -> None:
        super().__init__()
        if not T > 0:
            raise ValueError("Interpolation window T must be > 0")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}")
        self.T = float(T)
        self.clock = clock

    def on_new(self, hist: np.ndarray, ids: np.ndarray, now: float, rate: float) -> None:
        hist[ids] = rate * self.T

    @staticmethod
    def _window_cash(h: np.ndarray, dt: np.ndarray, cash: np.ndarray, T: Any) -> np.ndarray:
        """The paper's formula, both cases, vectorised."""
        inside = dt < T
        # For dt >= T the first branch is unused; guard the division for dt == 0 (never inside).
        with np.errstate(divide="ignore", invalid="ignore"):
            outside = cash * T / dt
        return np.where(inside, h * (T - dt) / T + cash, outside)

    def absorb(
        self, hist: np.ndarray, ids: np.ndarray, cash: np.ndarray, now: float, last: np.ndarray
    ) -> None:
        hist[ids] = self._window_cash(hist[ids], now - last, cash, self.T)

    def absorb_one(self, hist: Any, i: int, cash: float, now: float, last: float) -> None:
        dt = now - last
        T = self.T
        hist[i] = hist[i] * (T - dt) / T + cash if dt < T else cash * T / dt

    def estimate(self, ids: np.ndarray, cash: np.ndarray, now: float) -> np.ndarray:
        # The same interpolation, evaluated now without mutating: the cash received during the
        # last T time units, as a rate.
        dt = now - self._last()[ids]
        return self._window_cash(self._bound().hist[ids], dt, cash, self.T) / self.T

    def measures_per_page(self, now: float) -> float:
        return 1.0

    def spec(self) -> str:
        return f"interpolation:{self.T:g}" + (":wall" if self.clock == "wall" else "")


class AdaptiveInterpolation(Interpolation):
    """Interpolation whose window shrinks when the site's link structure changes and grows
    back with the time since::

        T(now) = min(T, max(T_min, now - changed_at))

    A long window averages out the lumps in which credit arrives (a steadier ranking); once the
    links move, what a page received before the move is the old graph's PageRank, which a long
    window keeps for ``T``. The crawl reports what it sees (:meth:`observe_change`): at each
    parsed revisit the share of the page's links that changed since its last parsed visit, and
    1 for a page that is gone. A change starts when their running mean
    (:data:`~.constants.CHANGE_DECAY`) rises above :data:`~.constants.CHANGE_LEVEL` and ends
    when it falls below half of it: ``changed_at`` is the start of the last change, so a site
    whose links keep changing at a steady rate gets its long window back, and a new change
    needs a quiet spell first.

    ``engine.hist[i]`` holds ``T`` times the rate the page's interpolated history stood for at
    its last visit; a visit and an estimate read it over the window of the moment (the rate
    kept when the window changes), so a change of window costs nothing per page. With no change
    seen, every formula is :class:`Interpolation`'s.
    """

    name = "adaptive"
    watches_change = True

    def __init__(self, T: float, minimum: float | None = None, clock: str = "g") -> None:
        super().__init__(T, clock)
        self.T_min = self.T / 6 if minimum is None else float(minimum)
        if not 0 < self.T_min <= self.T:
            raise ValueError("the adaptive window's minimum must be > 0 and at most T")
        self.level = 0.0  #: running mean of the share of links changed per observed visit
        self.changed_at: float | None = None  #: when the last change started
        self.changing = False  #: whether the level is above the change threshold

    def window(self, now: float) -> float:
        """The window's length at ``now``."""
        if self.changed_at is None:
            return self.T
        return min(self.T, max(self.T_min, now - self.changed_at))

    def observe_change(self, share: float, now: float) -> None:
        self.level = CHANGE_DECAY * self.level + (1.0 - CHANGE_DECAY) * share
        if not self.changing and self.level > CHANGE_LEVEL:
            self.changing, self.changed_at = True, now
        elif self.changing and self.level < CHANGE_LEVEL / 2:
            self.changing = False

    def on_new(self, hist: np.ndarray, ids: np.ndarray, now: float, rate: float) -> None:
        hist[ids] = rate * self.T

    def absorb(
        self, hist: np.ndarray, ids: np.ndarray, cash: np.ndarray, now: float, last: np.ndarray
    ) -> None:
        w = self.window(now)
        got = self._window_cash(hist[ids] * (w / self.T), now - last, cash, w)
        hist[ids] = got * (self.T / w)

    def absorb_one(self, hist: Any, i: int, cash: float, now: float, last: float) -> None:
        w, dt, T = self.window(now), now - last, self.T
        if dt < w:
            hist[i] = hist[i] * (w - dt) / w + cash * (T / w)  # (T / w: 1 with no change)
        else:
            hist[i] = cash * T / dt

    def estimate(self, ids: np.ndarray, cash: np.ndarray, now: float) -> np.ndarray:
        w = self.window(now)
        dt = now - self._last()[ids]
        return self._window_cash(self._bound().hist[ids] * (w / self.T), dt, cash, w) / w

    def shift(self, delta: float, n: int) -> None:
        if self.clock == "g" and self.changed_at is not None:
            self.changed_at += delta

    def scalars(self) -> dict:
        return {"level": self.level, "changed_at": self.changed_at, "changing": self.changing}

    def load_scalars(self, scalars: dict) -> None:
        self.level = float(scalars.get("level", 0.0))
        at = scalars.get("changed_at")
        self.changed_at = None if at is None else float(at)
        self.changing = bool(scalars.get("changing", False))

    @staticmethod
    def merge_scalars(parts: Sequence[dict]) -> dict:
        """The latest change any part saw (the shortest window): what a view of several
        engines' pages on one clock estimates them with."""
        seen = [p for p in parts if p.get("changed_at") is not None]
        return max(seen, key=lambda p: p["changed_at"]) if seen else (parts[0] if parts else {})

    def spec(self) -> str:
        base = f"adaptive:{self.T:g}"
        if self.T_min != self.T / 6:
            base += f":{self.T_min:g}"
        return base + (":wall" if self.clock == "wall" else "")


class _MeasureWindow(WindowPolicy):
    """Shared storage for the policies that keep several measures ``(C, t)`` per page.

    Measures live in two ``(capacity, K)`` arrays, right-aligned (newest in the last column) with
    ``count`` real measures per page; ``t_before`` is the time of the visit that preceded the
    oldest stored measure, so that the cash of the stored measures accumulated over
    ``(t_before, t_newest]``. A page's rate is::

        (sum of the measures in its window + current cash) / (now - start of the window)

    A new page gets one pseudo-measure carrying the default history (``r0 * span``) over a prior
    span, so its estimate starts at the rate of recently introduced pages and fades as real
    measures arrive.
    """

    def __init__(self, slots: int, clock: str = "g") -> None:
        super().__init__()
        if slots < 1 or slots > 255:
            raise ValueError("measure windows keep between 1 and 255 measures per page")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}")
        self.K = int(slots)
        self.clock = clock
        self.mc = np.zeros((0, self.K))
        self.mt = np.full((0, self.K), -np.inf)
        self.count = np.zeros(0, dtype=np.uint8)
        self.t_before = np.zeros(0)
        self.span_ema = 0.0  # mean time between two visits of a page: the prior span

    def grow(self, capacity: int) -> None:
        old = self.count.shape[0]
        if capacity <= old:
            return
        mc = np.zeros((capacity, self.K))
        mt = np.full((capacity, self.K), -np.inf)
        mc[:old], mt[:old] = self.mc, self.mt
        self.mc, self.mt = mc, mt
        self.count = np.concatenate([self.count, np.zeros(capacity - old, dtype=np.uint8)])
        self.t_before = np.concatenate([self.t_before, np.zeros(capacity - old)])

    def prior_span(self) -> float:
        return self.span_ema

    def on_new(self, hist: np.ndarray, ids: np.ndarray, now: float, rate: float) -> None:
        self.mc[ids] = 0.0
        self.mt[ids] = -np.inf
        self.count[ids] = 0
        span = self.prior_span()
        self.t_before[ids] = now
        if span > 0 and rate > 0:
            self.t_before[ids] = now - span
            self.mc[ids, -1] = rate * span
            self.mt[ids, -1] = now
            self.count[ids] = 1

    def _make_room(self, ids: np.ndarray, now: float) -> None:
        """Free the oldest column of full rows. Variable Window drops it (the window moves)."""
        full = ids[self.count[ids] == self.K]
        if full.size:
            self.t_before[full] = self.mt[full, 0]
            self.count[full] -= 1

    def absorb(
        self, hist: np.ndarray, ids: np.ndarray, cash: np.ndarray, now: float, last: np.ndarray
    ) -> None:
        span = now - last
        pos = span[np.isfinite(span) & (span > 0)]
        if pos.size:  # running mean of the time between visits (prior span for new pages)
            w = 1.0 - 0.999**pos.size
            self.span_ema += w * (float(pos.mean()) - self.span_ema)
        self._make_room(ids, now)
        mc, mt = self.mc[ids], self.mt[ids]
        mc[:, :-1] = mc[:, 1:]
        mt[:, :-1] = mt[:, 1:]
        mc[:, -1] = cash
        mt[:, -1] = now
        self.mc[ids], self.mt[ids] = mc, mt
        self.count[ids] += 1
        used, _ = self._used(ids, now)
        hist[ids] = np.where(used, mc, 0.0).sum(axis=1)

    def _used(self, ids: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Mask of the measures in each page's window, and the start time of that window."""
        used = np.arange(self.K)[None, :] >= (self.K - self.count[ids].astype(np.int64))[:, None]
        return used, self.t_before[ids]

    def estimate(self, ids: np.ndarray, cash: np.ndarray, now: float) -> np.ndarray:
        used, start = self._used(ids, now)
        total = np.where(used, self.mc[ids], 0.0).sum(axis=1) + cash
        span = now - start
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = total / span
        # A page that arrived this very instant has no span yet: give it the default rate.
        return np.where(span > 0, rate, self._bound().default_rate)

    def measures_per_page(self, now: float) -> float:
        n = self._bound().n
        if n == 0:
            return 0.0
        used, _ = self._used(np.arange(n), now)
        return float(used.sum() / n)

    def nbytes(self) -> int:
        return self.mc.nbytes + self.mt.nbytes + self.count.nbytes + self.t_before.nbytes

    def page_arrays(self) -> dict[str, np.ndarray]:
        return {"mc": self.mc, "mt": self.mt, "count": self.count, "t_before": self.t_before}

    def shift(self, delta: float, n: int) -> None:
        if self.clock == "g":
            self.mt[:n] += delta  # (-inf, an empty measure, stays so)
            self.t_before[:n] += delta

    def scalars(self) -> dict:
        return {"span_ema": self.span_ema}

    def load_scalars(self, scalars: dict) -> None:
        self.span_ema = float(scalars.get("span_ema", 0.0))


class VariableWindow(_MeasureWindow):
    """The last ``k`` measures of every page (the paper's Variable Window)."""

    name = "variable"

    def __init__(self, k: int, clock: str = "g") -> None:
        super().__init__(k, clock)

    def spec(self) -> str:
        return f"variable:{self.K}" + (":wall" if self.clock == "wall" else "")


class FixedWindow(_MeasureWindow):
    """The measures taken since ``now - T`` (the paper's Fixed Window).

    Storage per page is bounded by ``slots``: when a page is visited more than ``slots`` times
    within ``T``, its two oldest measures are merged into one (the paper's suggested compression:
    the merged measure covers the same cash over the same span, so rates are unchanged).
    """

    name = "fixed"

    def __init__(self, T: float, clock: str = "g", slots: int = 32, min_measures: int = 0) -> None:
        super().__init__(slots, clock)
        if not T > 0:
            raise ValueError("Fixed Window T must be > 0")
        if not 0 <= min_measures <= slots:
            raise ValueError("min_measures must be between 0 and slots")
        self.T = float(T)
        self.m = int(min_measures)

    def prior_span(self) -> float:
        return self.T

    def _make_room(self, ids: np.ndarray, now: float) -> None:
        full = ids[self.count[ids] == self.K]
        if not full.size:
            return
        expired = self.mt[full, 0] < now - self.T
        drop = full[expired]
        if drop.size:  # the oldest measure left the window: forget it
            self.t_before[drop] = self.mt[drop, 0]
            self.count[drop] -= 1
        merge = full[~expired]
        if merge.size:  # still inside the window: fold it into its successor
            self.mc[merge, 1] += self.mc[merge, 0]
            self.mc[merge, 0] = 0.0
            self.mt[merge, 0] = -np.inf
            self.count[merge] -= 1

    def _used(self, ids: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        K = self.K
        cols = np.arange(K)[None, :]
        real = cols >= (K - self.count[ids].astype(np.int64))[:, None]
        mt = self.mt[ids]
        used = real & (mt >= now - self.T)
        if self.m:
            used |= real & (cols >= K - self.m)
        # The window starts where the newest *unused* real measure ended, or at t_before.
        n_unused = K - used.sum(axis=1)  # unused columns form a prefix (times ascend)
        idx = n_unused - 1
        has_real_unused = (idx >= 0) & (idx >= K - self.count[ids].astype(np.int64))
        rows = np.arange(len(ids))
        start = np.where(has_real_unused, mt[rows, np.maximum(idx, 0)], self.t_before[ids])
        return used, start

    def spec(self) -> str:
        base = f"fixed:{self.T:g}" if not self.m else f"improved:{self.T:g}:{self.m}"
        return base + (":wall" if self.clock == "wall" else "")


class ImprovedFixedWindow(FixedWindow):
    """Fixed Window that keeps at least the last ``m`` measures of every page (paper: m = 3)."""

    name = "improved"

    def __init__(self, T: float, m: int = 3, clock: str = "g", slots: int = 32) -> None:
        super().__init__(T, clock=clock, slots=slots, min_measures=m)


#: The spec forms :func:`parse_window` accepts, by policy.
WINDOW_FORMS = {
    "unbounded": "unbounded[:blend|lemma|paper|regression]",
    "interpolation": "interpolation:T[:wall]",
    "adaptive": "adaptive:T[:MIN][:wall]",
    "variable": "variable:K[:wall]",
    "fixed": "fixed:T[:wall]",
    "improved": "improved:T[:M][:wall]",
}
_ARITY = {"unbounded": (0, 1), "interpolation": (1, 1), "variable": (1, 1), "fixed": (1, 1)}
_ARITY["improved"] = _ARITY["adaptive"] = (1, 2)


def parse_window(spec: str | WindowPolicy | None) -> WindowPolicy:
    """Build a policy from a short spec.

    ``unbounded[:blend|lemma|paper|regression]`` | ``interpolation:T`` | ``adaptive:T[:MIN]`` |
    ``variable:K`` | ``fixed:T`` | ``improved:T[:M]``; append ``:wall`` to a windowed policy for
    wall-clock seconds instead of G-time, e.g. ``interpolation:86400:wall``. :class:`ValueError`
    for anything else (an unknown policy or estimator, a missing or extra part, a number that
    is not finite or out of range).
    """
    if spec is None:
        return UnboundedHistory()
    if isinstance(spec, WindowPolicy):
        return spec
    kind, args, clock = _split_spec(str(spec))
    try:
        return _BUILD[kind](args, clock)
    except ValueError as exc:
        raise ValueError(f"bad window spec {spec!r}: {exc}") from None


def _split_spec(spec: str) -> tuple[str, list[str], str]:
    """A spec's policy, its arguments and its clock, their number checked."""
    text = spec.strip().lower()
    parts = [p.strip() for p in text.split(":")]
    if not text or "" in parts:
        raise ValueError(f"bad window spec {spec!r}: empty part")
    clock = parts.pop() if parts[-1] in CLOCKS and len(parts) > 1 else "g"
    kind, args = parts[0], parts[1:]
    if kind not in WINDOW_FORMS:
        raise ValueError(f"unknown window policy {kind!r}: {', '.join(WINDOW_FORMS.values())}")
    low, high = _ARITY[kind]
    if not low <= len(args) <= high or (kind == "unbounded" and clock != "g"):
        raise ValueError(f"bad window spec {spec!r}: the form is {WINDOW_FORMS[kind]}")
    return kind, args, clock


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text} is not a finite number")
    return x


#: Each policy from its spec's arguments and clock.
_BUILD: dict[str, Callable[[list[str], str], WindowPolicy]] = {
    "unbounded": lambda a, c: UnboundedHistory(*a),
    "interpolation": lambda a, c: Interpolation(_finite(a[0]), clock=c),
    "adaptive": lambda a, c: AdaptiveInterpolation(
        _finite(a[0]), _finite(a[1]) if len(a) > 1 else None, c
    ),
    "variable": lambda a, c: VariableWindow(int(a[0]), clock=c),
    "fixed": lambda a, c: FixedWindow(_finite(a[0]), clock=c),
    "improved": lambda a, c: ImprovedFixedWindow(_finite(a[0]), int(a[1]) if len(a) > 1 else 3, c),
}
