"""Refetch policies on a site whose pages change at known Poisson rates: an offline simulation.

    python -m benchmarks.freshness [--nodes 2000] [--seeds 1 2 3] [--static 0 0.3 0.4]
                                   [--out benchmarks/results]

The site of ``benchmarks/freshness_crawl.py`` (``tests.support.changing_site.PoissonSite``), not
served, its time in *passes* (``n`` fetches, the budget): ``n`` pages, importance their PageRank,
a share ``--static`` never changing (a table per share), the others at rates log-uniform over 0.1
to 10 changes per pass, regardless of links or the fastest for the highest PageRank. A discovery
pass (an order all policies share), then the refetches, earliest due first
(``RefetchSchedule``) of an allocation: ``optimal``, the ``optimal_allocation`` of the true
rates; ``learned``, of the rates its own fetches saw (``ChangeRates``, the crawl's change prior
``PRIOR_WEIGHTS`` or as said), planned every ``n/20`` fetches with a floor of 0.05 the mean
frequency; ``uniform``; ``proportional`` to importance. Over fetches ``3n`` to ``6n``:
*freshness* (``sum w fresh / sum w``, fresh from a fetch to the page's next change) and
*static*, the share of fetches to pages that never change. (The crawl's own policy, on OPIC's
importance, and one by cash: ``benchmarks/freshness_crawl.py``.)
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, page, table, write_results
from scrapy_opic.opic import change, refetch
from scrapy_opic.opic import freshness as alloc
from tests.support.changing_site import PoissonSite

CASES = {"independent": "rates independent of links", "linked": "the highest PageRank fastest"}
RUNS = {p: (p, change.PRIOR_WEIGHTS) for p in ("optimal", "learned", "uniform", "proportional")}
RUNS["learned, prior weights (0.05, 1)"] = ("learned", (0.05, 1.0))  # (a policy, its prior)
RUNS["learned, prior weights (1, 1)"] = ("learned", (1.0, 1.0))


def make_site(n: int, case: str = "independent", static: float = 0.3, seed: int = 0) -> PoissonSite:
    """The site of ``case`` (the module docstring), its time in passes, its links never changed."""
    kw = {"static": static, "rates": (0.1, 10.0), "remove_share": 0.0, "new_pages": 0}
    return PoissonSite(n, seed, linked_fastest=case == "linked", **kw)


def simulate(
    site: PoissonSite, policy: str, prior: tuple[float, float] = change.PRIOR_WEIGHTS
) -> dict:
    """``policy`` for ``6n`` fetches: its ``freshness`` and ``static`` share, passes 3 to 6."""
    w, rate, n = site.pagerank_before(), site.rates, site.n
    schedule = refetch.RefetchSchedule()
    rates = change.ChangeRates(prior_weights=prior, capacity=n)
    schedule.grow(n)
    fixed = {"optimal": (w, rate, n), "uniform": (n, n), "proportional": (w, n)}
    if policy in fixed:
        schedule.plan(getattr(alloc, f"{policy}_allocation")(*fixed[policy]))
    order = np.random.default_rng(site.seed).permutation(n)  # of the discovery pass
    last, until = np.full(n, np.nan), np.zeros(n)  # each copy's fetch, the page's next change
    fresh, static = np.zeros(n), []  # the time each page was fresh within passes 3 to 6
    for k in range(6 * n):
        now = k / n
        if policy == "learned" and k >= n and (k - n) % (n // 20) == 0:
            pooled = rates.pooled_rate() if rates.observations().sum() else rates.prior_rate
            f = alloc.optimal_allocation(w, rates.rates(prior_rate=pooled), n, 0.05)
            schedule.plan(f, now=now)
        i = int(order[k]) if k < n else schedule.pop()
        changed = None
        if not math.isnan(last[i]):
            fresh[i] += max(0.0, min(until[i], now, 6.0) - max(last[i], 3.0))
            changed = bool(until[i] <= now)
        last[i], until[i] = now, site.next_change(i, now)
        schedule.fetched(i, now)
        rates.observe(i, now, changed)
        if k >= 3 * n:
            static.append(rate[i] == 0)
    seen = ~np.isnan(last)
    fresh[seen] += np.maximum(0.0, np.minimum(until, 6.0) - np.maximum(last, 3.0))[seen]
    return {"freshness": float((w * fresh).sum() / (w.sum() * 3.0)), "static": np.mean(static)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--static", type=float, nargs="+", default=[0.0, 0.3, 0.4])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    data, sections = {"nodes": args.nodes, "seeds": args.seeds}, []
    cases = [(case, title, share) for share in args.static for case, title in CASES.items()]
    for k, (case, title, share) in enumerate(cases):
        sites = [make_site(args.nodes, case, share, seed) for seed in args.seeds]
        runs = {name: [simulate(s, *run) for s in sites] for name, run in RUNS.items()}
        data[f"{case}, static {share:g}"] = runs
        best, rows = np.array([r["freshness"] for r in runs["optimal"]]), []
        for name, rs in runs.items():
            fresh = np.array([r["freshness"] for r in rs])
            static, ratio = 100 * np.mean([r["static"] for r in rs]), fresh / best
            rows.append([name, fresh.mean(), ratio.mean(), ratio.min(), static])
        header = ["policy", "freshness", "ratio", "lowest ratio", "static (%)"]
        sections += [f"## Case {k + 1}: {title}, {share:.0%} static", table(header, rows)]
    text = page(
        "Freshness: refetch policies on a site with known change rates",
        f"{args.nodes} pages, seeds {', '.join(map(str, args.seeds))}; the site, the policies "
        "and each column: the docstring of `benchmarks/freshness.py`. *freshness*: fetches 3n to "
        "6n, mean of the seeds; *ratio*: to the simulated `optimal` (mean and lowest).",
        *sections,
    )
    write_results("freshness", data, text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
