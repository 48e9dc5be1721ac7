"""Importance a user can trust: real Scrapy crawls on 127.0.0.1, judged against exact PageRank.

    python -m benchmarks.importance [--out benchmarks/results] [--skip-docs]

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
* Revisits follow importance: a second continuous crawl of each manual runs 6N fetches; over
  the last 3N requests in the server's access log, each page's request count against its fair
  share (its PageRank times 3N): Spearman correlation (pages with in-links) and the largest
  ratio. Then the same on a generated 300-page site with the hazards of a real one: its two
  most important pages answer 503 once, one page redirects to another page, one to a page
  nothing else links to, and ``DEPTH_PRIORITY = 1`` files every request at minus its depth;
  no page may take more than twice its fair share.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from scipy.stats import kendalltau, spearmanr

from benchmarks._harness import command, write_results
from benchmarks.crawl_evidence import DOCS, crawl, crawled_graph, ensure_docs, log
from scrapy_opic.export import open_state
from scrapy_opic.opic.graph import from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from tests.support.sites import Site, StaticSite, site_graph

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


def docs_continuous(name: str, html: Path, work: Path) -> tuple[dict, list[dict]]:
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
    }, first


def share_figures(hits: list[int], pr: np.ndarray, linked: np.ndarray) -> dict:
    """Request counts per page over ``hits`` (page ids, in the server's order) against each
    page's fair share, ``pr * len(hits)``: Spearman over the pages with in-links, and the largest
    count / fair share among pages whose fair share is at least 2 requests (below that one
    request more or less is the ratio)."""
    counts = np.bincount(np.asarray(hits, dtype=np.int64), minlength=len(pr)).astype(float)
    fair = pr / pr.sum() * len(hits)
    big = fair >= 2.0
    ratio = counts[big] / fair[big]
    # The same correlation for counts drawn at random in proportion to PageRank (Poisson, the
    # mean of 20 draws): what a perfectly fair but memoryless allocator would score, since
    # with ~3 requests a page most counts tie.
    rng = np.random.default_rng(0)
    poisson = np.mean(
        [spearmanr(rng.poisson(fair[linked]), pr[linked]).statistic for _ in range(20)]
    )
    # And for an ideal proportional allocator: each page fetched exactly once every 1/fair of
    # the window, at a random phase (floor(fair + U)): the best a fair allocation can score.
    periodic = np.mean(
        [
            spearmanr(np.floor(fair[linked] + rng.random(int(linked.sum()))), pr[linked]).statistic
            for _ in range(20)
        ]
    )
    return {
        "requests": len(hits),
        "spearman": float(spearmanr(counts[linked], pr[linked]).statistic),
        "spearman of Poisson(fair share) counts": float(poisson),
        "spearman of periodic(fair share) counts": float(periodic),
        "max requests / fair share": float(ratio.max()),
        "pages with fair share >= 2": int(big.sum()),
        "counts": counts,
        "fair": fair,
    }


def last_hits(hits: list[str], node: dict[str, int], k: int) -> list[int]:
    """The page ids of the last ``k`` requests in an access log of paths that name a page
    (``node``: URL -> id; matched by path, so that another server of the same site may have
    served the crawl that built it)."""
    by_path = {urlsplit(url).path: i for url, i in node.items()}
    ids = [by_path.get(path) for path in hits]
    return [i for i in ids if i is not None][-k:]


def docs_revisits(name: str, html: Path, work: Path, first: list[dict]) -> dict:
    graph, node = crawled_graph([first])
    n = graph.n
    with StaticSite(html) as site:
        crawl(
            site.url("index.html"),
            "opic",
            work / "revisits",
            OPIC_CONTINUOUS=True,
            CLOSESPIDER_PAGECOUNT=6 * n,
            CONCURRENT_REQUESTS=8,
        )
        hits = last_hits(site.hits, node, 3 * n)
    pr = pagerank(graph, 0.85)
    figures = share_figures(hits, pr, graph.in_degree > 0)
    top = np.argsort(-pr)[:10]
    figures["top 10: requests / fair share"] = [
        round(float(figures["counts"][i] / figures["fair"][i]), 2) for i in top
    ]
    del figures["counts"], figures["fair"]
    log(f"  {name} revisits: {figures}")
    return {"pages (N)": n, **figures}


def hazard_revisits(work: Path) -> dict:
    """A 300-page site with retries, redirects and priorities, 6N continuous fetches."""
    n = 300
    g0 = site_graph(n, seed=3)
    pr0 = pagerank(g0, 0.85)
    order = np.argsort(-pr0)
    top2 = {int(order[0]), int(order[1])}
    # Redirects among the top 20 (their fair shares are counts, not fractions of a request);
    # n is a page that only a redirect leads to.
    moved, to_known, to_new = int(order[10]), int(order[11]), n
    g = from_edges(g0.sources(), g0.indices, n + 1)
    settings = {"OPIC_CONTINUOUS": True, "DEPTH_PRIORITY": 1, "CONCURRENT_REQUESTS": 2}
    moves = {moved: to_known, int(order[12]): to_new}
    with Site(g, redirects=moves) as site:
        first, _ = crawl(site.url(0), "opic", work / "hazard-one-pass")  # the graph, N
        graph, node = crawled_graph([first], {site.url(a): site.url(b) for a, b in moves.items()})
        pr = pagerank(graph, 0.85)
        site.fail_once = set(top2)
        del site.hits[:]
        crawl(site.url(0), "opic", work / "hazard", CLOSESPIDER_PAGECOUNT=6 * n, **settings)
        hits = last_hits(site.hits, node, 3 * graph.n)
        failed_once = [site.hits.count(f"/p/{i}.html") for i in sorted(top2)]
    figures = share_figures(hits, pr, graph.in_degree > 0)
    counts, fair = figures.pop("counts"), figures.pop("fair")

    def ratio(i: int) -> str:
        j = node[site.url(i)]
        return f"{counts[j]:.0f}/{fair[j]:.1f} = {counts[j] / fair[j]:.2f}"

    top = np.argsort(-fair)[:10]
    figures["top 10: requests / fair share"] = [round(float(counts[j] / fair[j]), 2) for j in top]
    figures["503-once pages: requests / fair share"] = [ratio(i) for i in sorted(top2)]
    figures["503-once pages: requests in all"] = failed_once
    figures["redirect targets: requests / fair share"] = [ratio(to_known), ratio(to_new)]
    log(f"  hazard site revisits: {figures}")
    return {"pages (N)": graph.n, **figures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--skip-docs", action="store_true")
    args = ap.parse_args(argv)
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        result["seed bias"] = seed_bias(work)
        result["revisits"] = {"generated site with hazards": hazard_revisits(work)}
        if not args.skip_docs:
            result["continuous docs"] = {}
            for name, (package, subdir) in DOCS.items():
                html = ensure_docs(package, subdir)
                wd = work / package
                result["continuous docs"][name], first = docs_continuous(name, html, wd)
                result["revisits"][name] = docs_revisits(name, html, wd, first)
    lines = ["# Importance benchmark", "", f"`{command()}`", ""]
    lines += ["## Seed bias (start page with no in-links)", ""]
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
    lines += [
        "",
        "## Revisits follow importance: the last 3N requests of 6N continuous fetches",
        "",
        "Requests per page from the server's access log against each page's fair share "
        "(PageRank x 3N); the largest ratio is over pages whose fair share is 2 requests or "
        "more.",
        "",
    ]
    for name, r in result["revisits"].items():
        lines.append(f"* **{name}**: " + "; ".join(f"{k} {v}" for k, v in r.items()))
    text = "\n".join(lines) + "\n"
    write_results("importance", result, text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
