"""Importance a user can trust: real Scrapy crawls on 127.0.0.1, judged against exact PageRank.

    python -m benchmarks.importance [--skip-docs] [--out DIR]

* Seed bias: a generated 300-page site plus a start page that links to 25 pages and that no page
  links to; after a one-pass crawl and a continuous one (5N fetches), with every estimator: the
  start page's importance over its PageRank, its rank, and its children's summed importance over
  their summed PageRank (a shelf of borrowed importance shows as a ratio >> 1).
* The two manuals of ``crawl_evidence``, from their index page (N: the pages a one-pass crawl
  finds): after 5N continuous fetches, the Kendall tau of importance against the crawled graph's
  PageRank (pages with in-links) and the fetch by which every page had been fetched.
* Revisits, with refetches ordered by cash alone (``OPIC_REFETCH = "cash"``): over the last 3N
  requests of 6N continuous fetches (the server's access log), each
  page's requests against its fair share, its PageRank times 3N: their Spearman correlation
  (pages with in-links) beside an ideal proportional allocator's (each page once every 1/fair
  share, at a random phase) and a random one's (Poisson counts), means of 20 draws; and the
  largest ratio among pages whose fair share is 2 requests or more. On each manual, and on a
  300-page generated site with a real one's hazards: its two most important pages answer 503
  once, a page redirects to another, one to a page nothing else links to, and
  ``DEPTH_PRIORITY = 1`` files every request at minus its depth.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from scipy.stats import kendalltau, spearmanr

from benchmarks._harness import RESULTS, page, table, write_results
from benchmarks.crawl_evidence import DOCS, crawl, crawled_graph, ensure_docs, exported
from scrapy_opic.opic.graph import from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from tests.support.sites import Site, StaticSite, site_graph

ESTIMATORS = ("unbounded", "unbounded:lemma", "unbounded:regression", "interpolation:30")


def seed_bias(work: Path) -> list[list]:
    n, kids = 300, 25
    g0 = power_law_graph(n, seed=1)
    children = np.random.default_rng(1).choice(n, kids, replace=False)
    # Every page reachable: the start page links to 25 pages, page 0 to every page.
    src = np.concatenate([g0.sources(), np.full(kids, n), np.zeros(n, dtype=np.int64)])
    g = from_edges(src, np.concatenate([g0.indices, children, np.arange(n)]), n + 1)
    pr, rows = pagerank(g, 0.85), []
    with Site(g) as site:
        for continuous, window in [(0, w) for w in ESTIMATORS[:3]] + [(1, w) for w in ESTIMATORS]:
            wd = work / f"seed-{continuous}-{window.replace(':', '-')}"
            more = {"OPIC_CONTINUOUS": True, "CLOSESPIDER_PAGECOUNT": 5 * g.n} if continuous else {}
            crawl(site.url(n), "opic", wd, OPIC_WINDOW=window, CONCURRENT_REQUESTS=4, **more)
            imp = exported(wd)
            x = np.array([imp.get(site.url(i), 0.0) for i in range(g.n)])
            kind = "continuous, 5N" if continuous else "one-pass"
            rows.append([kind, window, x[n] / pr[n], int((x > x[n]).sum()) + 1])
            rows[-1].append(x[children].sum() / pr[children].sum())
    return rows


def revisits(site, start: str, graph, node: dict, work: Path, **settings) -> tuple[dict, list]:
    """The figures of a crawl of 6N continuous fetches (see the module's docstring), and each
    page's requests and fair share."""
    del site.hits[:]
    # Refetches by cash alone: what a fair share measures (by default a refetch also weighs
    # the page's learned change rate, and a site that never changes needs few).
    more = {"OPIC_CONTINUOUS": True, "OPIC_REFETCH": "cash", "CLOSESPIDER_PAGECOUNT": 6 * graph.n}
    crawl(start, "opic", work, **more, **settings)
    by_path = {urlsplit(url).path: i for url, i in node.items()}  # (the log has paths)
    hits = [i for i in map(by_path.get, site.hits) if i is not None][-3 * graph.n :]
    pr, linked = pagerank(graph, 0.85), graph.in_degree > 0
    counts = np.bincount(hits, minlength=graph.n).astype(float)
    fair, rng = pr / pr.sum() * len(hits), np.random.default_rng(0)
    ideal = [np.floor(fair[linked] + rng.random(int(linked.sum()))) for _ in range(20)]
    poisson = [rng.poisson(fair[linked]) for _ in range(20)]
    return {
        "pages (N)": graph.n,
        "requests": len(hits),
        "Spearman": spearmanr(counts[linked], pr[linked]).statistic,
        "Spearman, ideal": np.mean([spearmanr(c, pr[linked]).statistic for c in ideal]),
        "Spearman, random": np.mean([spearmanr(c, pr[linked]).statistic for c in poisson]),
        "max requests / fair share": (counts[fair >= 2] / fair[fair >= 2]).max(),
    }, [counts, fair]


def manual(html: Path, work: Path) -> tuple[dict, dict]:
    """A manual's continuous crawl figures, and its revisits'."""
    with StaticSite(html) as site:
        start, eight = site.url("index.html"), {"CONCURRENT_REQUESTS": 8}
        graph, node = crawled_graph([crawl(start, "opic", work / "one-pass")[0]])
        settings = {"OPIC_CONTINUOUS": True, "CLOSESPIDER_PAGECOUNT": 5 * graph.n, **eight}
        rows, _ = crawl(start, "opic", work / "5N", **settings)
        figures, _ = revisits(site, start, graph, node, work / "6N", **eight)
    x, pr, linked = np.zeros(graph.n), pagerank(graph, 0.85), graph.in_degree > 0
    for url, v in exported(work / "5N").items():
        if url in node:  # (a page's highest, over its aliases)
            x[node[url]] = max(x[node[url]], v)
    first: dict = {}  # page id -> the fetch that first fetched it
    for k, r in enumerate(rows, 1):
        first.setdefault(node.get(r["url"]), k)
    first.pop(None, None)
    return {
        "pages (N)": graph.n,
        "Kendall tau": kendalltau(x[linked], pr[linked]).statistic,
        "every page fetched by fetch": max(first.values()) if len(first) == graph.n else None,
    }, figures


def hazards(work: Path) -> tuple[dict, list[list]]:
    """The hazard site's revisits, and the requests, fair share and ratio of its hazard pages."""
    n = 300
    g0 = site_graph(n, seed=3)
    top = [int(i) for i in np.argsort(-pagerank(g0, 0.85))]
    g = from_edges(g0.sources(), g0.indices, n + 1)  # n: a page only a redirect leads to
    # Redirects among the top 20 (their fair shares are counts, not fractions of a request).
    moves = {top[10]: top[11], top[12]: n}
    pages = {"503 once, top page": top[0], "503 once, second page": top[1]}
    pages |= {"redirect target": top[11], "redirect target, no other link": n}
    with Site(g, redirects=moves) as site:
        first, _ = crawl(site.url(0), "opic", work / "hazard-one-pass")  # the graph, N
        graph, node = crawled_graph([first], {site.url(a): site.url(b) for a, b in moves.items()})
        site.fail_once = {top[0], top[1]}
        settings = {"DEPTH_PRIORITY": 1, "CONCURRENT_REQUESTS": 2}
        figures, (counts, fair) = revisits(
            site, site.url(0), graph, node, work / "hazard", **settings
        )
        ids = {name: node[site.url(i)] for name, i in pages.items()}
    return figures, [[name, counts[j], fair[j], counts[j] / fair[j]] for name, j in ids.items()]


def render(data: dict) -> str:
    head = ["crawl", "window", "seed / PageRank", "seed rank", "children / PageRank"]
    sections = ["## Seed bias (start page with no in-links)", table(head, data["seed bias"])]
    for title, rows in (
        ("Continuous crawls of real manuals, 5N fetches", data["continuous docs"]),
        ("Revisits: the last 3N requests of 6N continuous fetches", data["revisits"]),
    ):
        if rows:
            head = ["site", *next(iter(rows.values()))]
            sections += [f"## {title}", table(head, [[k, *r.values()] for k, r in rows.items()])]
    head = ["hazard page", "requests", "fair share", "requests / fair share"]
    sections.append(table(head, data["hazard pages"]))
    return page("Importance benchmark", *sections)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--skip-docs", action="store_true", help="no real manuals")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data: dict = {"seed bias": seed_bias(Path(tmp)), "continuous docs": {}}
        hazard, data["hazard pages"] = hazards(Path(tmp))
        data["revisits"] = {"generated site with hazards": hazard}
        for name, (package, subdir) in {} if args.skip_docs else DOCS.items():
            figures = manual(ensure_docs(package, subdir), Path(tmp) / package)
            data["continuous docs"][name], data["revisits"][name] = figures
    write_results("importance", data, render(data), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
