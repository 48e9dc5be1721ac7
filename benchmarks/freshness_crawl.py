"""Freshness of a real continuous Scrapy crawl of a site whose pages change at known rates.

    python -m benchmarks.freshness_crawl [--set NAME=VALUE ...] [--pages 300] [--pace 60]
                                         [--static 0.3] [--lying always-304] [--repeat 1]
                                         [--out benchmarks/results/freshness_crawl.md]

The site, ``tests.support.changing_site.PoissonSite``: N pages, 30% (``--static``) never changing,
the others at rates log-uniform over 0.1 to 10 changes per N requests, regardless of links or the
fastest for the highest PageRank; honest validators (``--lying``: validators that lie, as
``PoissonSite`` says, the default cases crawled again beside it); ``--pace`` requests a second
whatever the crawler's concurrency; ``--repeat`` crawls per case, each of its own site (seeds 1, 2,
...). A crawl (the add-on, continuous, 4 concurrent requests, 6N requests) per case with the
defaults, then with ``--set`` (``OPIC_REFETCH=cash``: by cash, blind to change;
``OPIC_STORE=redis``: on Redis). Requests 3N to 6N in the server's log, against the true change
times: *freshness* weighted by PageRank (fresh while the page's last 200 is current) and its
*ratio* to the optimal allocation's at the same fetch rate; *unchanged 200s*, of the version the
crawler had; *static*, fetches of pages that never change; *304*s (*false*: of changed pages);
*static over changing*, the static pages fetched more than once more than a changing page of at
least their PageRank; *tau*, of the importance at the end against PageRank; *report*, the expected
freshness ``opic-report`` gives at the end (``OpicState.change_summary``), beside *end*, the
server's: the crawl's importance held by the pages whose copy is current at the crawl's last
request, and *end (true rates)*, what the report would say knowing each page's true rate
(``e^(-rate * age)``, the age since the server last served or confirmed the copy's version): *end*
is one draw of it, as noisy as a few heavy pages make it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from benchmarks._harness import RESULTS, page, table, write_results
from scrapy_opic.export import open_state
from scrapy_opic.opic import freshness as alloc
from tests.support import RUNNER
from tests.support.changing_site import LYING, PoissonSite

COLUMNS = ("case", "settings", "freshness", "ratio", "unchanged 200s (%)", "static (%)", "304")
COLUMNS += ("false 304", "static over changing", "tau", "report", "end", "end (true rates)")
#: The server's two figures the report is held against.
ENDS = ("end", "end (true rates)")


def crawl(site: PoissonSite, sets: list[str], work: Path) -> tuple[np.ndarray, float]:
    """A continuous crawl of ``site`` (``sets``: Scrapy settings) until Scrapy has 6N responses
    (the server as many page requests, or a few more): the exported importance by page id,
    and the expected freshness the state reports."""
    key, path = f"freshness-{os.getpid()}-{work.name}", str(work / "opic.sqlite")
    settings = {"OPIC_STATE_PATH": path, "OPIC_REDIS_KEY": key, "OPIC_REDIS_RESET": True}
    settings |= dict(s.split("=", 1) for s in sets)
    settings |= {"OPIC_CONTINUOUS": True, "CONCURRENT_REQUESTS": 4}
    settings["CLOSESPIDER_PAGECOUNT"] = 6 * site.n
    config = {"start_url": site.url(0), "order": "addon", "settings": settings}
    config |= {"items": str(work / "items.jsonl"), "stats": str(work / "stats.json")}
    (work / "config.json").write_text(json.dumps(config))
    with open(work / "crawl.log", "w") as log:
        cmd = [sys.executable, str(RUNNER), str(work / "config.json")]
        subprocess.run(cmd, cwd=work, stderr=log, check=True, timeout=18 * site.n / site.pace + 90)
    if settings.get("OPIC_STORE") == "redis":  # (read back from Redis)
        path = f"{settings.get('OPIC_REDIS_URL', 'redis://127.0.0.1:6379/0')}#{key}"
    x = np.zeros(site.total)
    with open_state(path) as state:
        for p in state.pages():
            x[int(p.url.rsplit("/", 1)[1])] = p.importance
        reported = state.change_summary().get("freshness", float("nan"))
    return x, reported


def measure(
    case: str,
    n: int,
    pace: float,
    sets: list[str],
    work: Path,
    static: float = 0.3,
    lying: str | None = None,
    seed: int = 1,
) -> dict:
    """One crawl of ``case``'s site drawn from ``seed``: the figures of the module docstring."""
    rates = (0.1 * pace / n, 10.0 * pace / n)
    kw = {"rates": rates, "linked_fastest": case == "linked", "pace": pace, "static": static}
    with PoissonSite(n, seed, lying=lying, **kw) as site:
        x, reported = crawl(site, sets, work)
    log = [f for f in site.log if f.page >= 0]
    t0, t1, window = log[3 * n - 1].t, log[6 * n - 1].t, log[3 * n : 6 * n]
    w, rate, budget = site.pagerank_before()[:n], site.rates[:n], len(window) / (t1 - t0)
    optimum = alloc.weighted_freshness(alloc.optimal_allocation(w, rate, budget), rate, w)
    fresh = site.weighted_freshness(log, t0, t1, site.pagerank_before())
    ended = log[-1].t  # (the crawl's last request: the time the report's figure is for)
    copies = {f.page: f.version for f in log if f.status == 200}  # (each page's last 200)
    fetches = np.bincount([f.page for f in window], minlength=site.total)[:n]
    changing = np.flatnonzero(rate > 0)
    over = sum(
        int(fetches[i] > fetches[changing[w[changing] >= w[i]]].min(initial=1 << 30) + 1)
        for i in np.flatnonzero(rate == 0)
    )
    current = np.array([copies.get(i, -1) == site.version(i, ended) for i in range(n)])
    confirmed = {f.page: f.t for f in log if f.current}  # (its copy known current then)
    expected = np.array(
        [np.exp(-rate[i] * (ended - confirmed[i])) if i in confirmed else 0.0 for i in range(n)]
    )
    return {
        "case": case,
        "settings": ", ".join([*sets, *([f"lying={lying}"] if lying else [])]) or "defaults",
        "freshness": fresh,
        "ratio": fresh / optimum,
        "unchanged 200s (%)": 100 * np.mean([f.status == 200 and f.had for f in window]),
        "static (%)": 100 * np.mean([rate[f.page] == 0 for f in window]),
        "304": sum(f.status == 304 for f in window),
        "false 304": sum(f.status == 304 and not f.had for f in window),
        "static over changing": over,
        "tau": kendalltau(x[:n], w).statistic,
        "report": reported,
        "end": float((x[:n] * current).sum() / x[:n].sum()),
        "end (true rates)": float((x[:n] * expected).sum() / x[:n].sum()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--pace", type=float, default=60.0, help="server requests per second")
    p.add_argument("--static", type=float, default=0.3, help="share of pages never changing")
    p.add_argument("--lying", choices=[x for x in LYING if x], help="validators that lie")
    p.add_argument("--repeat", type=int, default=1, help="crawls per case (the table: means)")
    p.add_argument("--out", type=Path, default=RESULTS / "freshness_crawl.md")
    args = p.parse_args(argv)
    rows, crawls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        runs: list[tuple[list[str], str | None]] = [([], None)]
        runs += [(args.sets, args.lying)] if args.sets or args.lying else []
        for k, (sets, lying) in enumerate(runs):
            for case in ("independent", "linked"):
                got = []
                for r in range(args.repeat):
                    (work := Path(tmp) / f"{k}-{case}-{r}").mkdir()
                    # Each repeat its own site (rates, links, change times): the server's
                    # end figure is one draw of the change times, and the same draw
                    # repeated would average nothing.
                    kw = {"static": args.static, "lying": lying, "seed": 1 + r}
                    got.append(measure(case, args.pages, args.pace, sets, work, **kw))
                crawls.append(got)
                rows.append({c: got[0][c] if isinstance(got[0][c], str) else
                             float(np.mean([g[c] for g in got])) for c in COLUMNS})  # fmt: skip
    gaps = [
        [g[0]["case"], g[0]["settings"]]
        + [", ".join(f"{x['report'] - x[end]:+.3f}" for x in g) for end in ENDS]
        + [float(np.mean([x["report"] - x[end] for x in g])) for end in ENDS]
        for g in crawls
        if not np.isnan(g[0]["report"])
    ]
    text = page(
        "Freshness of a continuous crawl",
        f"{args.pages} pages ({args.static:.0%} never changing) at {args.pace:g} requests/s; "
        "page requests 3N to 6N from the "
        "server's access log (each column: the docstring of `benchmarks/freshness_crawl.py`)"
        + (f"; each row the mean of {args.repeat} crawls." if args.repeat > 1 else "."),
        table(COLUMNS, [[r[k] for k in COLUMNS] for r in rows]),
        "The report against the server, crawl by crawl (*end* is one draw of *end (true rates)*):",
        table(
            [
                "case",
                "settings",
                "report - end",
                "report - end (true rates)",
                "mean",
                "mean (true rates)",
            ],
            gaps,
        ),  # fmt: skip
    )
    write_results(args.out.stem, [x for g in crawls for x in g], text, args.out.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
