"""Refetch policies on a site whose pages change at known Poisson rates: an offline simulation.

    python -m benchmarks.freshness [--nodes 2000] [--seeds 1 2 3] [--out benchmarks/results]

The site: a power-law link graph of ``n`` pages (``power_law_graph``; importance: its PageRank,
damping 0.85). A share of the pages (``static``) never changes; the others change at rates
spread log-uniformly over ``span`` (two orders of magnitude) around ``center`` changes per pass
(a *pass*, ``n`` fetches, is the time unit: the budget refetches each page once per pass on
average). Case ``independent``: rates drawn regardless of links. Case ``linked``: the most
linked pages (in-degree) change fastest, the least linked never change.

A run makes one fetch every ``1/n``: a discovery pass (every page once, in a random order that
all policies share), then each policy's refetches, the same budget for all. A stored copy is
*fresh* from its fetch until the page's next change. Over the window (``3n`` to ``6n`` fetches)
the run measures the time-averaged importance-weighted freshness ``sum w fresh / sum w``
(exactly, from the change times), and the share of fetches that went to pages that never change.

Policies (all but ``cash`` refetch through ``RefetchSchedule``, earliest due first):

* ``optimal``: ``optimal_allocation`` of the true rates and importance (no floor);
* ``learned``: what its own fetches saw (changed or not since the previous fetch) feeds
  ``ChangeRates``; every ``replan`` fetches (``n/20``) the allocation of the estimated rates
  (pooled rate as prior) is planned again (``plan(..., now)``), with a floor of ``floor`` x the
  mean frequency per page. Importance: the true PageRank, or OPIC's (``learned-opic``: an
  engine runs over the graph, each fetch is a visit, plus ``settle`` Greedy visits per fetch
  without a download, see ``scrapy_opic/opic/refetch.py``);
* ``uniform`` and ``proportional`` (to importance) allocations;
* ``cash``: today's continuous crawl, the page with the most OPIC cash next, one visit per fetch.

OPIC runs use ``interpolation:30`` (the continuous crawl's default); Kendall tau of their
importance against PageRank (pages with in-links) is read at ``3n`` fetches.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._harness import write_results
from scrapy_opic.opic.change import ChangeRates
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.opic.freshness import (
    freshness,
    optimal_allocation,
    proportional_allocation,
    uniform_allocation,
)
from scrapy_opic.opic.graph import Graph, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from scrapy_opic.opic.refetch import RefetchSchedule
from scrapy_opic.opic.selection import GreedySelection

CASES = ("independent", "linked")
#: The site's defaults: the share of pages that never change, the ratio of the fastest rate to
#: the slowest, their geometric mean (changes per pass).
STATIC, SPAN, CENTER = 0.3, 100.0, 1.0
POLICIES = ("optimal", "learned", "learned-opic", "uniform", "proportional", "cash")


@dataclass
class ChangingSite:
    """A graph, its PageRank ``weight``, each page's change ``rate`` and its change times (CSR:
    page ``i``'s sorted times are ``times[ptr[i]:ptr[i + 1]]``)."""

    graph: Graph
    weight: np.ndarray
    rate: np.ndarray
    ptr: np.ndarray
    times: np.ndarray

    @property
    def n(self) -> int:
        return self.graph.n

    def next_change(self, i: int, t: float) -> float:
        """The first change of page ``i`` after ``t`` (inf: none before the horizon)."""
        lo, hi = self.ptr[i], self.ptr[i + 1]
        k = lo + int(np.searchsorted(self.times[lo:hi], t, side="right"))
        return float(self.times[k]) if k < hi else math.inf

    def optimum(self) -> float:
        """The expected weighted freshness of the optimal allocation (periodic refetches)."""
        f = optimal_allocation(self.weight, self.rate, float(self.n))
        return float((self.weight * freshness(f, self.rate)).sum() / self.weight.sum())


def make_site(
    n: int,
    case: str = "independent",
    static: float = STATIC,
    span: float = SPAN,
    center: float = CENTER,
    horizon: float = 10.0,
    seed: int = 0,
) -> ChangingSite:
    """A site of ``n`` pages (see the module docstring), change times up to ``horizon``."""
    if case not in CASES:
        raise ValueError(f"case must be one of {CASES}")
    rng = np.random.default_rng(seed)
    graph = power_law_graph(n, seed=seed)
    weight = pagerank(graph, 0.85)
    moving = n - int(round(static * n))
    rates = center * np.exp(rng.uniform(-0.5, 0.5, moving) * math.log(span))
    rate = np.zeros(n)
    if case == "independent":
        rate[rng.permutation(n)[:moving]] = rates
    else:  # the most linked first (random among equal in-degrees) get the fastest rates
        order = np.lexsort((rng.random(n), -graph.in_degree))
        rate[order[:moving]] = np.sort(rates)[::-1]
    counts = rng.poisson(rate * horizon)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    owner = np.repeat(np.arange(n), counts)
    times = rng.uniform(0.0, horizon, ptr[-1])
    return ChangingSite(graph, weight, rate, ptr, times[np.lexsort((times, owner))])


@dataclass
class Result:
    policy: str
    freshness: float = 0.0
    static_share: float = 0.0
    tau: float | None = None
    #: (time, instantaneous weighted freshness) every quarter pass.
    series: list[tuple[float, float]] = field(default_factory=list)


class Opic:
    """An OPIC engine over the site's graph: each fetch is a visit, plus ``settle`` visits
    without a download to the pages Greedy picks."""

    def __init__(self, graph: Graph, settle: int, window: str = "interpolation:30") -> None:
        self.graph, self.settle = graph, settle
        self.engine = OpicEngine(epsilon=0.15, refresh=1.0, window=window, capacity=graph.n)
        self.engine.add_pages(graph.n)
        self.engine.init_uniform()
        self.greedy = GreedySelection(self.engine)
        for i in range(graph.n):
            self.greedy.push(i)

    def _visit(self, i: int) -> None:
        self.engine.visit(i, self.graph.children(i).tolist())
        self.greedy.push(i)

    def fetched(self, i: int) -> None:
        self.engine.payout()  # (the frontier's pop pays out first)
        self.greedy.discard(i)
        self._visit(i)
        for _ in range(self.settle):
            self._visit(self.greedy.pop())

    def richest(self) -> int:
        i = self.greedy.peek()
        assert i is not None
        return i

    def tau(self, weight: np.ndarray) -> float:
        from scipy.stats import kendalltau

        linked = self.graph.in_degree > 0
        return float(kendalltau(self.engine.importance()[linked], weight[linked]).statistic)


def simulate(
    site: ChangingSite,
    policy: str,
    passes: float = 6.0,
    window: tuple[float, float] = (3.0, 6.0),
    floor: float = 0.05,
    replan: int | None = None,
    settle: int = 1,
    prior_weights: tuple[float, float] = (0.1, 1.0),
    seed: int = 0,
) -> Result:
    """Run ``policy`` for ``passes * n`` fetches (see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}")
    n, w, rate = site.n, site.weight, site.rate
    order = np.random.default_rng(seed).permutation(n)
    opic = None
    if policy in ("cash", "learned-opic"):
        opic = Opic(site.graph, settle if policy == "learned-opic" else 0)
    schedule = RefetchSchedule()
    schedule.grow(n)
    rates = ChangeRates(prior_weights=prior_weights, capacity=n)
    replan = replan or max(1, n // 20)
    budget = float(n)  # fetches per pass

    def plan(now: float | None = None) -> None:
        if policy == "optimal":
            f = optimal_allocation(w, rate, budget)
        elif policy == "uniform":
            f = uniform_allocation(n, budget)
        elif policy == "proportional":
            f = proportional_allocation(w, budget)
        elif policy.startswith("learned"):
            prior = rates.pooled_rate() if rates.observations().sum() else rates.prior_rate
            wt = w if opic is None else opic.engine.importance()
            f = optimal_allocation(wt, rates.rates(prior_rate=prior), budget, floor * budget / n)
        else:
            return
        schedule.plan(f, now=now)

    plan()
    t0, t1 = window
    last = np.full(n, np.nan)
    until = np.zeros(n)  # each stored copy is fresh until then
    fresh = np.zeros(n)  # time each page was fresh within the window
    result = Result(policy)
    static = counted = 0
    sample = max(1, n // 4)
    for k in range(int(round(passes * n))):
        now = k / n
        if k % sample == 0:
            result.series.append((now, float(w[(until > now) & (last <= now)].sum() / w.sum())))
        if k < n:
            i = int(order[k])
        elif opic is not None and policy == "cash":
            i = opic.richest()
        else:
            if policy.startswith("learned") and (k - n) % replan == 0:
                plan(now)
            i = schedule.pop()
        changed = None
        if last[i] == last[i]:  # (fetched before: not nan)
            fresh[i] += max(0.0, min(until[i], now, t1) - max(last[i], t0))
            changed = bool(until[i] <= now)
        last[i], until[i] = now, site.next_change(i, now)
        schedule.fetched(i, now)
        rates.observe(i, now, changed)
        if opic is not None:
            opic.fetched(i)
            if k == int(t0 * n):
                result.tau = opic.tau(w)
        if t0 <= now < t1:
            counted += 1
            static += bool(rate[i] == 0)
    seen = last == last
    fresh[seen] += np.maximum(0.0, np.minimum(until, t1) - np.maximum(last, t0))[seen]
    result.freshness = float((w * fresh).sum() / (w.sum() * (t1 - t0)))
    result.static_share = static / max(counted, 1)
    return result


#: Variations of the learned policy (OPIC importance) run on seed 1 of each case.
VARIANTS = {
    "as above": {},
    "prior weights (1, 1)": {"prior_weights": (1.0, 1.0)},
    "prior weights (0.25, 1)": {"prior_weights": (0.25, 1.0)},
    "no settle visits": {"settle": 0},
    "re-plan every n/5 fetches": {"replan_share": 0.2},
    "floor 0.01": {"floor": 0.01},
    "40% static pages": {"site": {"static": 0.4}},
    "rates 3x faster": {"site": {"center": 3.0}},
    "rates 3x slower": {"site": {"center": 1 / 3}},
}


def run(n: int, seeds: list[int]) -> dict:
    out: dict = {"nodes": n, "seeds": seeds, "cases": {}, "variants": {}}
    for case in CASES:
        rows = []
        for seed in seeds:
            site = make_site(n, case, seed=seed)
            runs = {p: simulate(site, p, seed=seed) for p in POLICIES}
            best = runs["optimal"].freshness
            for r in runs.values():
                row = asdict(r) | {"seed": seed, "ratio": r.freshness / best}
                row["analytic_optimum"] = site.optimum()
                rows.append(row)
            print(case, seed, {p: round(r.freshness / best, 3) for p, r in runs.items()})
        out["cases"][case] = rows
        sites: dict[str, tuple] = {}  # one site per set of site parameters
        for name, v in VARIANTS.items():
            kw = {k: x for k, x in v.items() if k not in ("site", "replan_share")}
            if "replan_share" in v:
                kw["replan"] = int(v["replan_share"] * n)
            key = json.dumps(v.get("site", {}), sort_keys=True)
            if key not in sites:
                site = make_site(n, case, seed=seeds[0], **v.get("site", {}))
                best = simulate(site, "optimal", seed=seeds[0]).freshness
                cash = simulate(site, "cash", seed=seeds[0]).freshness / best
                sites[key] = site, best, cash
            site, best, cash = sites[key]
            r = simulate(site, "learned-opic", seed=seeds[0], **kw)
            out["variants"].setdefault(case, []).append(
                {
                    "variant": name,
                    "ratio": r.freshness / best,
                    "freshness": r.freshness,
                    "static_share": r.static_share,
                    "tau": r.tau,
                    "cash_ratio": cash,
                }
            )
            print(case, name, round(r.freshness / best, 3), round(r.static_share, 3))
    return out


def markdown(data: dict, command: str) -> str:
    n = data["nodes"]
    lines = [
        "# Freshness: refetch policies on a site with known change rates",
        "",
        f"Generated by `{command}` (offline simulation, `benchmarks/freshness.py`: the site, "
        "the policies and the measures are described there).",
        "",
        f"{n} pages of a power-law graph (importance: PageRank); {STATIC:.0%} never change, the "
        f"others change at Poisson rates log-uniform over {CENTER / SPAN**0.5:g} to "
        f"{CENTER * SPAN**0.5:g} changes per pass (a pass: n "
        "fetches, the budget: one refetch per page per pass on average). Weighted freshness "
        "is measured from 3n to 6n fetches, after a discovery pass; *ratio* is to the "
        "simulated optimal allocation of the true rates (same budget, periodic refetches); "
        "*static* is the share of the window's fetches that went to pages that never change; "
        "*tau*: Kendall tau of OPIC's importance against PageRank at 3n fetches (pages with "
        "in-links). Mean over the seeds, with the lowest ratio in brackets.",
    ]
    for case, rows in data["cases"].items():
        title = {"independent": "Case 1: rates independent of links",
                 "linked": "Case 2: the most linked pages change fastest"}[case]  # fmt: skip
        lines += ["", f"## {title}", "", "| policy | freshness | ratio (lowest) | static | tau |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for p in POLICIES:
            rs = [r for r in rows if r["policy"] == p]
            ratio = [r["ratio"] for r in rs]
            taus = [r["tau"] for r in rs if r["tau"] is not None]
            tau = f"{np.mean(taus):.3f}" if taus else ""
            lines.append(
                f"| {p} | {np.mean([r['freshness'] for r in rs]):.3f} | {np.mean(ratio):.3f} "
                f"({min(ratio):.3f}) | {np.mean([r['static_share'] for r in rs]):.1%} | {tau} |"
            )
        opt = np.mean([r["analytic_optimum"] for r in rows if r["policy"] == "optimal"])
        lines += ["", f"Expected freshness of the optimal allocation (analytic): {opt:.3f}."]
    lines += ["", "## Variations of `learned-opic` (seed 1)", "",
              "*cash*: today's crawl on the same site, for comparison.", "",
              "| variation | case 1 ratio | static | cash | case 2 ratio | static | cash |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    v1, v2 = data["variants"]["independent"], data["variants"]["linked"]
    for a, b in zip(v1, v2):
        lines.append(
            f"| {a['variant']} | {a['ratio']:.3f} | {a['static_share']:.1%} | "
            f"{a['cash_ratio']:.3f} | {b['ratio']:.3f} | {b['static_share']:.1%} | "
            f"{b['cash_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args(argv)
    t = time.perf_counter()
    data = run(args.nodes, args.seeds)
    data["seconds"] = round(time.perf_counter() - t, 1)
    command = "python -m benchmarks.freshness" + (
        f" --nodes {args.nodes} --seeds {' '.join(map(str, args.seeds))}"
    )
    write_results("freshness", data, markdown(data, command), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
