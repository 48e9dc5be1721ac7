"""How often a page changes, learned from refetches at irregular intervals; validators that lie.

Model. Page ``i`` changes as a Poisson process of rate ``l``. Two full observations of the page
``t`` apart differ with probability ``1 - e^(-l t)``. With the intervals that showed a change
(set ``C``) and those that did not (set ``U``), the log-likelihood and its derivative are::

    L(l)  = sum_C log(1 - e^(-l t)) - l * sum_U t
    L'(l) = sum_C h(t, l) - sum_U t,        h(t, l) = t / (e^(l t) - 1)

``h`` decreases in ``l`` from ``1/l`` (``l t -> 0``) to 0, so ``L'`` is strictly decreasing and
its root, the maximum-likelihood rate, is found by bisection (in ``log l``). Changes counted over
elapsed time (``|C| / sum t``) is biased low: it sees one change where several fell between two
fetches; the MLE is not.

Dated changes. A trusted ``Last-Modified`` at a page's first look dates its last change: it
changed then, and not since. Looking back from any moment, a Poisson process's last change is
``Exp(l)`` before it, so that observation's likelihood is ``l e^(-l s)`` (``s`` the time since
the change): an *exact* change, adding ``1/l`` to ``L'`` (the limit of ``h`` for a vanishing
interval), and ``s`` to the unchanged time. (Counted as unchanged time alone, it would read a
page that changed a minute before its first look as one that had not changed for a minute, and
every page's first rate low.)

Smoothing and bounds. Without unchanged intervals the MLE is infinite; without changed ones it is
0 ("static" after one look). Every page therefore carries a pseudo-observation of each kind, a
changed and an unchanged interval of length ``tau = ln 2 / prior_rate`` with weights ``(a_c,
a_u)`` (alone, with equal weights, they give exactly ``prior_rate``), and the root is clipped to
``bounds``. Both terms stay positive, so no finite evidence gives 0 or infinity. ``a_u`` bounds
the rate of a page seen changed at every look (about ``ln(1 + k t / (a_u tau)) / t`` after
``k`` changes ``t`` apart); ``a_c`` sets how fast a page never seen changing falls toward
static (about ``a_c / (U + a_u tau)`` after ``U`` time unchanged). A small ``a_c`` is the prior of a
site where a share of the pages never changes: ``benchmarks/freshness.py`` measures the choice.

Per-page state (O(1) update per observation). ``sum_U t`` is exact. ``sum_C h(t, l)`` depends on
every changed interval; it is kept as the count and the first three power sums of ``x = ln t``
over ``C``, and evaluated by the two-point Gauss quadrature those moments define::

    sum_C h(t, l) ~= n_C * (a1 h(e^x1, l) + a2 h(e^x2, l))

with nodes ``x1, x2`` and weights ``a1 + a2 = 1`` matching the mean, variance and third central
moment of ``x``. It is **exact whenever the changed intervals took at most two distinct
values** (a page refetched at one cadence, or an exploration cadence then a steady one), and
close otherwise (the tests bound its error on log-spread intervals against the exact MLE). A
single mean interval would not do: ``h`` is convex, and mixing short and long intervals would
underestimate fast pages badly.

Confidence: the standard error of ``ln l`` from the observed information at the estimate,
``1 / sqrt(sum_C (q / (2 sinh(q / 2)))^2)`` with ``q = l t`` (pseudo-observation included, so it
is finite; about 1 for a page with no evidence of change: its rate is only bounded above).

Last change: a change seen between fetches at ``p`` and ``s`` (``t = s - p``) happened, given a
Poisson process of rate ``l``, on average ``1/l - h(t, l)`` before ``s``.

Pages never seen to change: how fresh their copies are expected to be. A page whose looks all
found it unchanged (over ``U`` in total, and no dated change) may never change, or change at a
rate its looks were too few to show. Its smoothed rate is a point, near static after a short
``U`` (the prior's small changed weight), and ``e^(-rate * age)`` of it calls its copy fresh
when on a site of slow pages it may not be. Its expected freshness is read from a mixture
instead: static with probability ``p``, else of a rate drawn from an exponential law of mean
``m`` (the crawl's pooled rate), under which a page stays unchanged for ``t`` with probability
``S(t) = 1 / (1 + m t)``. Given ``U`` unchanged, its copy is still current after ``age`` more
with probability ``(p + (1 - p) S(U + age)) / (p + (1 - p) S(U))``. ``p`` is the share of such
pages that maximises the likelihood of what the crawl saw: pages seen to change (each
``1 - p``) and pages never seen to (each ``p + (1 - p) S(U)``); pages of a dated change only
stay out of it (a static page has a date too).

Nothing here does I/O; times are floats in any unit (seconds in a crawl), rates per that unit.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: Bisection steps in ``log l``: the default bounds span 2^60, so 64 steps leave a relative
#: error below 1e-9.
STEPS = 64


def _h(t: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``t / (e^(l t) - 1)``, 0 once ``l t`` overflows."""
    with np.errstate(over="ignore"):
        return t / np.expm1(np.minimum(lam * t, 700.0))


def quadrature(
    n: np.ndarray, s1: np.ndarray, s2: np.ndarray, s3: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The two nodes (as intervals ``t1 <= t2``) and weights ``a1, a2`` of the Gauss quadrature
    matching ``n`` values of ``x = ln t`` with power sums ``s1, s2, s3``: the nodes are the roots
    of ``y^2 - (m3 / m2) y - m2`` (``y = x - mean``), the orthogonal polynomial of degree 2. A
    zero variance gives one node (weights 1/2, 1/2). ``n = 0`` gives nodes of no weight."""
    m = np.maximum(n, 1.0)
    mu = s1 / m
    e2, e3 = s2 / m, s3 / m
    m2 = e2 - mu * mu
    m3 = e3 - 3.0 * mu * e2 + 2.0 * mu**3
    flat = m2 <= 1e-12 * (1.0 + mu * mu)  # one distinct value (up to rounding)
    m2 = np.where(flat, 1.0, m2)
    skew = np.where(flat, 0.0, m3 / m2)
    disc = np.sqrt(skew * skew + 4.0 * m2)
    y1, y2 = (skew - disc) / 2.0, (skew + disc) / 2.0
    a1 = np.where(flat, 0.5, y2 / (y2 - y1))
    y1, y2 = np.where(flat, 0.0, y1), np.where(flat, 0.0, y2)
    return np.exp(mu + y1), np.exp(mu + y2), a1, 1.0 - a1


def solve_rates(
    n_changed: np.ndarray,
    s1: np.ndarray,
    s2: np.ndarray,
    s3: np.ndarray,
    unchanged: np.ndarray,
    prior_rate: float | np.ndarray = 1.0,
    prior_weights: tuple[float, float] = (1.0, 1.0),
    bounds: tuple[float, float] = (1e-9, 1e9),
    exact: np.ndarray | float = 0.0,
) -> np.ndarray:
    """The smoothed maximum-likelihood change rates (see the module docstring), vectorised:
    ``n_changed`` changed intervals with power sums ``s1, s2, s3`` of their logs, ``unchanged``
    the total length of the unchanged ones, ``exact`` the dated changes, per page. Solves by
    bisection in ``log l`` within ``bounds`` (a root outside them is clipped);
    ``prior_weights``: the pseudo-observations ``(changed, unchanged)``."""
    t1, t2, a1, a2 = quadrature(n_changed, s1, s2, s3)
    tau = np.broadcast_to(math.log(2.0) / np.asarray(prior_rate, float), t1.shape)
    a_c, a_u = prior_weights
    rhs = unchanged + a_u * tau
    lo = np.full(t1.shape, math.log(bounds[0]))
    hi = np.full(t1.shape, math.log(bounds[1]))
    for _ in range(STEPS):
        mid = (lo + hi) / 2.0
        lam = np.exp(mid)
        lhs = n_changed * (a1 * _h(t1, lam) + a2 * _h(t2, lam)) + a_c * _h(tau, lam)
        lhs = lhs + exact / lam
        above = lhs > rhs  # L' > 0: the root is higher
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.exp((lo + hi) / 2.0)


#: The weights of the pseudo-observations (changed, unchanged) of a crawl's change rates: a
#: small changed weight lets a page never seen changing fall toward static soon, as a site
#: where a share of the pages never changes wants; a small unchanged weight keeps the prior's
#: unchanged pseudo-interval from holding a fast page's rate (and the freshness it expects of
#: it) down long after its own looks say otherwise. ``benchmarks/freshness.py`` measures the
#: choice against the freshness it costs on sites where every page changes.
PRIOR_WEIGHTS = (0.05, 0.25)

#: The per-page fields that add up over pages into one page's worth of observations.
SUMS = ("n_c", "s1", "s2", "s3", "u", "u_e")


class ChangeRates:
    """Per-page change observations and the rates, confidences and last-change times they give.

    :param prior_rate: the rate a page with no observation gets (and the scale of the
        pseudo-observations; :meth:`rates` takes another, e.g. :meth:`pooled_rate`).
    :param prior_weights: the weights of the pseudo-observations (changed, unchanged).
    :param bounds: the rates are clipped to ``[low, high]``.

    Per page, 10 floats: the time of the last full observation, the changed-interval count and
    log power sums (4), the unchanged total and count (2), the time unchanged since a dated
    change (a first look's: 0 if none, see the module docstring), and the bracket of the last
    change.
    """

    FIELDS = ("last", "n_c", "s1", "s2", "s3", "u", "n_u", "u_e", "after", "by")

    def __init__(
        self,
        prior_rate: float = 1.0,
        prior_weights: tuple[float, float] = PRIOR_WEIGHTS,
        bounds: tuple[float, float] = (1e-9, 1e9),
        capacity: int = 0,
    ) -> None:
        if not (prior_rate > 0 and min(prior_weights) > 0 and 0 < bounds[0] < bounds[1]):
            raise ValueError("prior_rate, prior_weights and bounds must be positive")
        self.prior_rate, self.prior_weights, self.bounds = prior_rate, prior_weights, bounds
        self.n = 0
        self.a = {f: np.zeros(0) for f in self.FIELDS}
        self.grow(capacity)

    def grow(self, n: int) -> None:
        """Room for pages ``0..n-1`` (new pages: never observed)."""
        if n <= self.n:
            return
        cap = len(self.a["last"])
        if n > cap:
            cap = max(n, 2 * cap, 16)
            for f, old in self.a.items():
                new = np.full(cap, np.nan if f in ("last", "after", "by") else 0.0)
                new[: self.n] = old[: self.n]
                self.a[f] = new
        self.n = n

    def observe(self, i: int, now: float, changed: bool | None, at: float | None = None) -> None:
        """Page ``i`` was observed in full at ``now`` (a 200 whose signature was compared, or a
        304: unchanged). ``changed`` None: nothing to compare with (a first fetch); else an
        observation over the interval since its last one. ``at``: the change time if a trusted
        Last-Modified tells it. A non-positive interval only moves the reference time."""
        self.grow(i + 1)
        a = self.a
        last, a["last"][i] = a["last"][i], now
        t = now - last
        if changed is None or not t > 0:  # (nan: no previous observation)
            return
        if changed:
            x = math.log(t)
            a["n_c"][i] += 1.0
            a["s1"][i] += x
            a["s2"][i] += x * x
            a["s3"][i] += x * x * x
            a["after"][i], a["by"][i] = (last, now) if at is None else (at, at)
        else:
            a["u"][i] += t
            a["n_u"][i] += 1.0

    def dated(self, i: int, now: float, since: float) -> None:
        """Page ``i``, observed in full at ``now`` for the first time, last changed at
        ``since``, as a trusted ``Last-Modified`` says (before ``now``): an exact change then,
        and unchanged since (see the module docstring)."""
        self.grow(i + 1)
        a = self.a
        a["last"][i] = now
        a["u_e"][i] = now - since
        a["after"][i] = a["by"][i] = since

    def forget(
        self, ids: np.ndarray | Sequence[int], *, unchanged: bool = True, dated: bool = False
    ) -> None:
        """Pages ``ids`` drop what validators that lied told them: with ``unchanged``, their
        unchanged intervals (304s that hid changes: their changed intervals stand); with
        ``dated``, their dated change (a ``Last-Modified`` that lied)."""
        k = np.asarray(ids, dtype=np.int64)
        k = k[k < self.n]
        fields = ("u", "n_u") * unchanged + ("u_e",) * dated
        for f in fields:
            self.a[f][k] = 0.0

    def last_seen(self, i: int) -> float:
        """When page ``i`` was last observed in full (nan: never)."""
        return float(self.a["last"][i]) if i < self.n else math.nan

    def _ids(self, ids: np.ndarray | Sequence[int] | None) -> np.ndarray | slice:
        return slice(0, self.n) if ids is None else np.asarray(ids, dtype=np.int64)

    def rates(
        self, ids: np.ndarray | Sequence[int] | None = None, prior_rate: float | None = None
    ) -> np.ndarray:
        """The smoothed MLE rate of each page (all if ``ids`` is None)."""
        return self.rates_of(self.sums_of(ids), prior_rate)

    def sums_of(self, ids: np.ndarray | Sequence[int] | None = None) -> list[np.ndarray]:
        """The observation sums of pages ``ids`` (all if None) that :meth:`rates_of` reads:
        those of several parts concatenated column by column are one solve."""
        k, a = self._ids(ids), self.a
        u_e = a["u_e"][k]
        return [a["n_c"][k], a["s1"][k], a["s2"][k], a["s3"][k], a["u"][k] + u_e, u_e > 0]

    def rates_of(
        self, columns: Sequence[np.ndarray], prior_rate: float | None = None
    ) -> np.ndarray:
        """The smoothed MLE rate of each page of ``columns`` (:meth:`sums_of`)."""
        n_c, s1, s2, s3, u, n_e = columns
        return solve_rates(
            n_c, s1, s2, s3, u,
            self.prior_rate if prior_rate is None else prior_rate,
            self.prior_weights, self.bounds, exact=n_e,
        )  # fmt: skip

    def pooled_rate(self) -> float:
        """The prior for pages with little evidence of their own (empirical Bayes): the mean
        over the pages observed of their rough rates (:func:`pool_sums`; each page weighs
        one, however long it was watched: a page that never changes, watched for a day,
        would otherwise drag every page's prior toward none); before any change is seen, the
        rate of all observations together."""
        return self.rate_of_sums(self.sums())

    def sums(self) -> dict[str, float]:
        """What :meth:`rate_of_sums` reads, as totals over the pages (additive: pages of
        several parts pool by adding them): see :func:`pool_sums`."""
        return pool_sums({f: self.a[f][: self.n] for f in SUMS + ("n_u",)})

    def rate_of_sums(self, sums: Mapping[str, float]) -> float:
        """The rate :meth:`pooled_rate` gives of totals (:func:`pool_sums`, of many pages,
        read a part at a time: that of a saved crawl)."""
        if sums.get("looked", 0.0) > 0 and sums.get("crude", 0.0) > 0:
            low, high = self.bounds
            return float(min(max(sums["crude"] / sums["looked"], low), high))
        tot = {f: np.array([sums.get(f, 0.0)]) for f in ("n_c", "s1", "s2", "s3", "u", "n_e")}
        rate = solve_rates(
            tot["n_c"], tot["s1"], tot["s2"], tot["s3"], tot["u"],
            self.prior_rate, self.prior_weights, self.bounds, exact=tot["n_e"],
        )  # fmt: skip
        return float(rate[0])

    def log_se(
        self,
        ids: np.ndarray | Sequence[int] | None = None,
        rates: np.ndarray | None = None,
        prior_rate: float | None = None,
    ) -> np.ndarray:
        """The standard error of ``ln(rate)``: the confidence figure (the rate is known within
        a factor ``e^(+-se)``)."""
        k, a = self._ids(ids), self.a
        lam = self.rates(ids, prior_rate) if rates is None else rates
        t1, t2, a1, a2 = quadrature(a["n_c"][k], a["s1"][k], a["s2"][k], a["s3"][k])
        tau = math.log(2.0) / (self.prior_rate if prior_rate is None else prior_rate)

        def info(t: np.ndarray | float) -> np.ndarray:
            q = np.minimum(lam * t, 700.0) / 2.0
            return np.where(q > 0, (q / np.sinh(np.maximum(q, 1e-300))) ** 2, 1.0)

        total = a["n_c"][k] * (a1 * info(t1) + a2 * info(t2)) + self.prior_weights[0] * info(tau)
        return 1.0 / np.sqrt(total + (a["u_e"][k] > 0))  # (an exact change: the limit t -> 0)

    def last_changed(
        self, ids: np.ndarray | Sequence[int] | None = None, rates: np.ndarray | None = None
    ) -> np.ndarray:
        """The expected time of each page's last change seen (nan: none seen yet)."""
        k, a = self._ids(ids), self.a
        lam = self.rates(ids) if rates is None else rates
        after, by = a["after"][k], a["by"][k]
        t = by - after
        back = np.where(t > 0, 1.0 / lam - _h(np.where(t > 0, t, 1.0), lam), 0.0)
        return by - np.clip(back, 0.0, np.where(t > 0, t, 0.0))

    def observations(self, ids: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """Observations (intervals compared, dated changes) per page."""
        k = self._ids(ids)
        return self.a["n_c"][k] + self.a["n_u"][k] + (self.a["u_e"][k] > 0)


def pool_sums(columns: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The totals :meth:`ChangeRates.rate_of_sums` reads, of pages given as their arrays of
    :data:`SUMS` and ``n_u``: the changed intervals' sums, the unchanged time (``u``, the
    dated changes' included), the dated changes (``n_e``), the pages observed (``looked``) and the
    sum of their rough rates (``crude``): ``-ln(1 - k / (N + 1)) / t``, the rate at which
    ``k`` of ``N`` looks ``t`` apart would show a change (``t`` their mean interval, the
    changed ones counted by their geometric mean; a dated change is a look that showed one;
    ``N + 1`` keeps a page changed at every look finite)."""
    n_c, s1, n_u, u_e = columns["n_c"], columns["s1"], columns["n_u"], columns["u_e"]
    u, n_e = columns["u"] + u_e, (u_e > 0).astype(float)
    looks = n_c + n_u + n_e
    changed = n_c * np.exp(np.divide(s1, n_c, out=np.zeros_like(s1), where=n_c > 0))
    mean = np.divide(u + changed, looks, out=np.zeros_like(u), where=looks > 0)
    shown = -np.log1p(-(n_c + n_e) / (looks + 1.0))
    crude = np.divide(shown, mean, out=np.zeros_like(mean), where=mean > 0)
    out = {f: float(columns[f].sum()) for f in ("n_c", "s1", "s2", "s3")}
    out["u"], out["n_e"] = float(u.sum()), float(n_e.sum())
    out["looked"] = float((looks > 0).sum())
    out["crude"] = float(crude.sum())
    return out


def static_share(unchanged: np.ndarray, changed: int, mean_rate: float) -> float:
    """The share ``p`` of pages that never change, by maximum likelihood (see the module
    docstring: pages never seen to change): ``unchanged``, the time each page never seen to
    change was watched unchanged; ``changed``, how many pages were seen to change;
    ``mean_rate``, the mean ``m`` of the law of the changing pages' rates (a crawl gives its
    pooled rate). 1 when no page was seen to change; 0 when none was watched without one."""
    u = np.asarray(unchanged, float)
    if changed <= 0:
        return 1.0
    if not u.size:
        return 0.0
    miss = 1.0 - 1.0 / (1.0 + mean_rate * u)  # 1 - S(U): a changing page would have shown it
    lo, hi = 0.0, 1.0
    # The log-likelihood is concave in p: bisection on the sign of its derivative.
    for _ in range(STEPS):
        p = (lo + hi) / 2.0
        slope = float((miss / (p + (1.0 - p) * (1.0 - miss))).sum()) - changed / (1.0 - p)
        lo, hi = (p, hi) if slope > 0 else (lo, p)
    return (lo + hi) / 2.0


def unseen_change_freshness(
    unchanged: np.ndarray, age: np.ndarray, static: float, mean_rate: float
) -> np.ndarray:
    """The probability that the copy of each page never seen to change is current ``age``
    after its last look, given it was watched unchanged for ``unchanged``: static with
    probability ``static`` (:func:`static_share`), else of a rate drawn from an exponential
    law of mean ``mean_rate`` (see the module docstring)."""
    u = np.asarray(unchanged, float)
    a = np.maximum(np.asarray(age, float), 0.0)
    moving = 1.0 - static
    return (static + moving / (1.0 + mean_rate * (u + a))) / (
        static + moving / (1.0 + mean_rate * u)
    )


class Snapshot(NamedTuple):
    """What a full response showed: its validators (None when absent) and content signature."""

    etag: bytes | str | None
    last_modified: bytes | str | None
    signature: int


#: Validator kinds, as :class:`ValidatorAudit` names them.
KINDS = ("etag", "last_modified")


class ValidatorAudit:
    """Whether a server's validators can be trusted, judged against the content signature.

    Two consecutive full responses of a page are compared for each validator both carry:

    * same validator, same signature, or new validator, new signature: an **agreement**;
    * new validator, same signature: **noisy** (a fresh ETag on every response, Last-Modified
      always "now"): no 304 will ever come, each refetch is a full download;
    * same validator, new signature: **stale** (a constant Last-Modified or ETag while the
      content changes): a conditional request would get a false 304 and miss the change.

    A kind is distrusted, per ``key`` (a host), once its disagreements reach ``min_evidence``
    and are more than ``max_share`` of its comparisons. Stale ones can only be seen on full
    responses to requests that did not send that validator: :meth:`conditional` leaves the
    validators off one refetch in ``audit_every`` of each key (and all of them once distrusted).

    A server may also answer 304 whatever its validators (honest ETags on full responses, and
    a 304 to every conditional request): no pair of full responses shows it. Its refetches are
    compared instead (:meth:`refetched`): with validators sent, a page is found changed (a 200
    of new content) at some rate; without (the audits), at about the same rate on an honest
    server, since both come from one schedule. Changes that unconditional refetches find far
    more often than conditional ones (a one-sided binomial tail under ``1e-3``, at least
    ``min_evidence`` of them) are 304s that hid a change: the key's conditional requests stop.

    A key whose 304s may have hid changes (a stale kind distrusted, or false 304s) *lied*: the
    "unchanged" its pages were found before then is not evidence of their change rates
    (:meth:`lie_found` says since when, once :meth:`judge` has been told the time).
    """

    def __init__(self, min_evidence: int = 2, max_share: float = 0.1, audit_every: int = 16):
        self.min_evidence, self.max_share, self.audit_every = min_evidence, max_share, audit_every
        #: (key, kind) -> [agreements, noisy, stale]
        self.counts: dict[tuple[Hashable, str], list[int]] = {}
        #: key -> [conditional refetches, of them changed, unconditional ones, of them changed]
        self.refetches: dict[Hashable, list[int]] = {}
        #: The keys whose 304s were found to hide changes.
        self.false_304: set[Hashable] = set()
        #: key -> when it was found to lie (see the class docstring).
        self.lied: dict[Hashable, float] = {}
        self._asked: dict[Hashable, int] = {}

    def observe(self, key: Hashable, before: Snapshot, after: Snapshot) -> None:
        """Two consecutive full responses of one page of ``key``."""
        same_content = before.signature == after.signature
        for kind in KINDS:
            old, new = getattr(before, kind), getattr(after, kind)
            if old is None or new is None:
                continue
            c = self.counts.setdefault((key, kind), [0, 0, 0])
            same = old == new
            c[0 if same == same_content else (1 if same_content else 2)] += 1

    def refetched(self, key: Hashable, conditional: bool, changed: bool) -> bool:
        """A refetch of a page of ``key`` with validators sent (``conditional``: a 304 is
        unchanged) or without, and whether it found the page changed since its last full
        response; True when this makes the key's 304s untrusted (see the class docstring)."""
        c = self.refetches.setdefault(key, [0, 0, 0, 0])
        at = 0 if conditional else 2
        c[at] += 1
        c[at + 1] += changed
        if key in self.false_304 or conditional or not changed:
            return False
        n_c, changed_c, n_u, changed_u = c
        if changed_u < max(self.min_evidence, 3):
            return False
        p = (changed_c + 1) / (n_c + 2)  # (the conditional refetches' rate, smoothed)
        if _binomial_tail(changed_u, n_u, p) >= 1e-3:
            return False
        self.false_304.add(key)
        return True

    def judge(self, key: Hashable, now: float) -> None:
        """Note ``now`` as the time ``key`` was found to lie, if it lies and was not already
        (call it when a verdict may have changed)."""
        if key in self.lied:
            return
        stale = any(
            self.counts.get((key, kind), (0, 0, 0))[2] and not self.trusted(key, kind)
            for kind in KINDS
        )
        if stale or key in self.false_304:
            self.lied[key] = now

    def lie_found(self, key: Hashable) -> float | None:
        """When ``key`` was found to lie (None: it was not)."""
        return self.lied.get(key)

    def distrusted(self, key: Hashable) -> tuple[bool, ...]:
        """Which of ``key``'s validator kinds (:data:`KINDS`) are distrusted."""
        return tuple(not self.trusted(key, kind) for kind in KINDS)

    def verdict(self, key: Hashable) -> dict[str, Any]:
        """What the audit learned of ``key``, JSON-ready (:meth:`merge` takes it back)."""
        return {
            "counts": {kind: c for kind in KINDS if (c := self.counts.get((key, kind)))},
            "refetches": self.refetches.get(key, [0, 0, 0, 0]),
            "false_304": key in self.false_304,
            "lied": self.lied.get(key),
        }

    def merge(self, key: Hashable, verdict: Mapping[str, Any]) -> bool:
        """Take ``verdict`` (:meth:`verdict`, another process's or an earlier run's) on
        ``key`` if it distrusts a validator this audit trusts; whether it did.
        :class:`ValueError` if it is no verdict."""
        other = ValidatorAudit(self.min_evidence, self.max_share, self.audit_every)
        try:
            counts = {kind: [int(x) for x in c] for kind, c in verdict["counts"].items()}
            refetches = [int(x) for x in verdict["refetches"]]
            lied = verdict["lied"]
            lied = None if lied is None else float(lied)
            false_304 = bool(verdict["false_304"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a verdict on validators ({exc!r})") from None
        if set(counts) - set(KINDS) or any(len(c) != 3 for c in counts.values()):
            raise ValueError("not a verdict on validators (counts of another kind)")
        if len(refetches) != 4:
            raise ValueError("not a verdict on validators (refetches of another length)")
        other.counts = {(key, kind): c for kind, c in counts.items()}
        if false_304:
            other.false_304.add(key)
        if not any(a and not b for a, b in zip(other.distrusted(key), self.distrusted(key))):
            return False
        for kind in KINDS:
            self.counts.pop((key, kind), None)
        self.counts.update(other.counts)
        self.refetches[key] = refetches
        if false_304:
            self.false_304.add(key)
        if lied is not None:
            self.lied[key] = lied
        return True

    def trusted(self, key: Hashable, kind: str) -> bool:
        """Whether ``kind`` of ``key`` may be sent and its 304s believed."""
        return key not in self.false_304 and self.agrees(key, kind)

    def agrees(self, key: Hashable, kind: str) -> bool:
        """Whether ``kind`` of ``key`` agrees with the content on full responses, whatever
        its 304s: a ``Last-Modified`` that does dates a page's changes truly, even where the
        server answers 304 to every conditional request."""
        agree, noisy, stale = self.counts.get((key, kind), (0, 0, 0))
        bad = noisy + stale
        return not (bad >= self.min_evidence and bad > self.max_share * (agree + bad))

    def conditional(self, key: Hashable) -> tuple[bool, bool]:
        """For one refetch of a page of ``key``: send (If-None-Match, If-Modified-Since)? Both
        are off for an audit, each is off while distrusted."""
        n = self._asked[key] = self._asked.get(key, 0) + 1
        if self.audit_every and n % self.audit_every == 0:
            return False, False
        return self.trusted(key, "etag"), self.trusted(key, "last_modified")


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p**i * (1.0 - p) ** (n - i) for i in range(k, n + 1))
