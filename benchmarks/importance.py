"""Importance a user can trust: real Scrapy crawls on 127.0.0.1, judged against exact PageRank.

    python benchmarks/importance.py [--out benchmarks/results] [--skip-docs]

* Seed bias: a generated 300-page site plus a start page that links to 25 pages and that no
  page links to. After a one-pass crawl and a continuous one (5N fetches), with the default and
  the other estimators: the start page's exported importance over its PageRank (which is the
  teleport share, ``(1 - d) / N`` plus the dangling pages' share), and its children's summed
  importance over their summed PageRank (a shelf of borrowed importance shows as a ratio >> 1).
* Continuous crawls of two real manuals from their index page (PostgreSQL 15 and Django, from
  Debian's documentation packages, as in ``crawl_evidence.py``): N is the number of pages a
  one-pass crawl finds; the continuous crawl runs 5N fetches. Kendall tau between exported
  importance and the PageRank of the crawled graph (pages with in-links), and the fetch at
  which every page had been fetched once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from scipy.stats import kendalltau

from benchmarks.crawl_evidence import DOCS, crawl, crawled_graph, ensure_docs, log
from scrapy_opic.export import open_state
from scrapy_opic.simulator.graph import from_edges, power_law_graph
from scrapy_opic.simulator.pagerank import pagerank
from tests.sites import Site, StaticSite

ESTIMATORS = ("unbounded", "unbounded:lemma", "unbounded:regression", "interpolation:30")


def exported(workdir: Path) -> dict[str, float]:
    with open_state(workdir / ".scrapy" / "opic" / "evidence.sqlite") as state:
        return {p.url: p.importance for p in state.pages()}


def seed_bias(work: Path) -> list[dict]:
    n, kids = 300, 25
    g0 = power_law_graph(n, seed=1)
    children = np.random.default_rng(1).choice(n, kids, replace=False)
    # Every page reachable: the start page links to 25 pages, page 0 to every page.
    src = np.concatenate([g0.sources(), np.full(kids, n), np.zeros(n, dtype=np.int64)])
    dst = np.concatenate([g0.indices, children, np.arange(n)])
    g = from_edges(src, dst, n + 1)
    pr = pagerank(g, 0.85)
    rows = []
    with Site(g) as site:
        urls = [site.url(i) for i in range(g.n)]
        for continuous in (False, True):
            for window in ESTIMATORS if continuous else ESTIMATORS[:3]:
                wd = work / f"seed-{continuous}-{window.replace(':', '-')}"
                settings = {"OPIC_WINDOW": window, "CONCURRENT_REQUESTS": 4}
                if continuous:
                    settings.update(OPIC_CONTINUOUS=True, CLOSESPIDER_PAGECOUNT=5 * g.n)
                crawl(site.url(n), "opic", wd, **settings)
                imp = exported(wd)
                x = np.array([imp.get(u, 0.0) for u in urls])
                rows.append(
                    {
                        "crawl": "continuous, 5N" if continuous else "one-pass",
                        "window": window,
                        "seed / PageRank": float(x[n] / pr[n]),
                        "seed / ((1-d)/N)": float(x[n] / (0.15 / g.n)),
                        "seed rank": int((x > x[n]).sum()) + 1,
                        "children / PageRank": float(x[children].sum() / pr[children].sum()),
                    }
                )
                log(f"  seed bias {rows[-1]}")
    return rows


def docs_continuous(name: str, html: Path, work: Path) -> dict:
    with StaticSite(html) as site:
        start = site.url("index.html")
        t0 = time.perf_counter()
        first, _ = crawl(start, "opic", work / "one-pass")
        graph, node = crawled_graph([first])
        n = graph.n
        rows, stats = crawl(
            start,
            "opic",
            work / "continuous",
            OPIC_CONTINUOUS=True,
            CLOSESPIDER_PAGECOUNT=5 * n,
            CONCURRENT_REQUESTS=8,
        )
        log(f"  {name}: N={n}, {len(rows)} fetches in {time.perf_counter() - t0:.0f} s")
    pr = pagerank(graph, 0.85)
    imp = exported(work / "continuous")
    x = np.zeros(n)
    for url, v in imp.items():
        i = node.get(url)
        if i is not None:
            x[i] = max(x[i], v)
    linked = graph.in_degree > 0
    seen: set[int] = set()
    all_by = None
    for k, r in enumerate(rows):
        i = node.get(r["url"])
        if i is not None:
            seen.add(i)
        if len(seen) == n:
            all_by = k + 1
            break
    return {
        "pages (N)": n,
        "fetches": len(rows),
        "kendall tau": float(kendalltau(x[linked], pr[linked]).statistic),
        "every page fetched by fetch": all_by,
        "pages fetched": len(seen),
        "total cash": stats.get("opic/total_cash"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--skip-docs", action="store_true")
    args = ap.parse_args(argv)
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        result["seed bias"] = seed_bias(work)
        if not args.skip_docs:
            result["continuous docs"] = {}
            for name, (package, subdir) in DOCS.items():
                html = ensure_docs(package, subdir)
                wd = work / package
                result["continuous docs"][name] = docs_continuous(name, html, wd)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "importance.json").write_text(json.dumps(result, indent=2))
    lines = ["# Importance benchmark", "", "## Seed bias (start page with no in-links)", ""]
    cols = list(result["seed bias"][0])
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in result["seed bias"]:
        lines.append(
            "| "
            + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values())
            + " |"
        )
    if "continuous docs" in result:
        lines += ["", "## Continuous crawl of real manuals, 5N fetches from the index", ""]
        cols = list(next(iter(result["continuous docs"].values())))
        lines += ["| site | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for name, r in result["continuous docs"].items():
            vals = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()]
            lines.append(f"| {name} | " + " | ".join(vals) + " |")
    text = "\n".join(lines) + "\n"
    (args.out / "importance.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
