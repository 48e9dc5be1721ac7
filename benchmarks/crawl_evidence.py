"""Crawl-ordering evidence on sites served on 127.0.0.1, and the scheduler's overhead.

    python -m benchmarks.crawl_evidence [--pages 2000] [--skip-docs] [--out DIR]
    python -m benchmarks.crawl_evidence --only-real --real-graph EDGES [--real-fraction 0.25]

* Share of the PageRank (damping 0.85) of the graph the crawls saw (fetched pages, their in-site
  links, redirects folded in) held by the first 1%, 10%, 25%, 50% of the pages fetched by OPIC,
  Scrapy's default order (LIFO), breadth-first (DEPTH_PRIORITY=1, FIFO queues) and an omniscient
  order by PageRank, on a generated power-law site and two manuals, PostgreSQL 15 and Django
  (Debian's packages, unpacked into ``benchmarks/.cache`` by ``apt-get download``, ``dpkg -x``).
* Spider trap: the generated site (1,000 pages) with an endless calendar linked from every page;
  the share of the first 1,000 fetches inside it. The calendar links only to itself (a PageRank
  sink): the omniscient row is its share of the first 1,000 pages by PageRank of the site plus
  the calendar cut at 3,000 days.
* Continuous crawl: Kendall tau (pages with in-links) of the exported importance against the
  PageRank of a 300-page generated site after 5N fetches with default settings.
* Scheduler overhead: enqueue then pop of distinct requests over 50 hosts, OpicScheduler and
  Scrapy's Scheduler in the same run (best of 2), in memory and with JOBDIR.
* ``--only-real``: an edge list (cnr-2000) served one page per node, crawled from the most
  important page that reaches 90% of it until ``--real-fraction`` of it is fetched.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urldefrag

import numpy as np
from scipy.stats import kendalltau
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object
from scrapy.utils.test import get_crawler

from benchmarks._harness import RESULTS, page, table, write_results
from scrapy_opic.export import open_state
from scrapy_opic.opic.graph import Graph, from_edges, load_edge_list
from scrapy_opic.opic.pagerank import pagerank
from tests.support import RUNNER
from tests.support.sites import CALENDAR_STEPS, Site, StaticSite, reachable, site_graph

CACHE = Path(__file__).resolve().parent / ".cache"
FRACTIONS = (0.01, 0.10, 0.25, 0.50)
ORDERS = ("opic", "default", "bfs")
DOCS = {
    "PostgreSQL 15 manual": ("postgresql-doc-15", "usr/share/doc/postgresql-doc-15/html"),
    "Django docs": ("python-django-doc", "usr/share/doc/python-django-doc/html"),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_docs(package: str, subdir: str) -> Path:
    """Unpack a Debian documentation package into the cache (download it if needed)."""
    root, cmd = CACHE / package, ["apt-get", "download", package]
    if not (root / subdir).exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        if not list(CACHE.glob(f"{package}_*.deb")) and subprocess.run(cmd, cwd=CACHE).returncode:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(cmd, cwd=CACHE, check=True)
        subprocess.run(["dpkg", "-x", next(CACHE.glob(f"{package}_*.deb")), root], check=True)
    return root / subdir


def crawl(start_url: str, order: str, workdir: Path, **options) -> tuple[list[dict], dict]:
    """One crawl by ``tests/support/crawl_runner.py`` in a process of its own: its items and
    final stats. ``options``: Scrapy settings (upper case) and the runner's other config keys
    (``spider``, by default ``evidence``; ``allowed``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    items, stats, config = (workdir / f for f in ("items.jsonl", "stats.json", "config.json"))
    settings = {"LOG_LEVEL": "WARNING", "RETRY_TIMES": 2}
    settings |= {k: v for k, v in options.items() if k.isupper()}
    keys = {"spider": "evidence"} | {k: v for k, v in options.items() if not k.isupper()}
    keys |= {"start_url": start_url, "order": order, "items": str(items), "stats": str(stats)}
    config.write_text(json.dumps({**keys, "settings": settings}))
    subprocess.run([sys.executable, str(RUNNER), str(config)], cwd=workdir, check=True)
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    return rows, json.loads(stats.read_text())


def crawled_graph(
    crawls: list[list[dict]], redirects: dict[str, str] | None = None
) -> tuple[Graph, dict[str, int]]:
    """The graph the crawls saw: fetched pages, their in-site links, redirects folded in. A link
    is to a page (its URL without the fragment, as the request fingerprint sees it), once.
    ``redirects`` (URL -> URL) adds redirects the crawls could not see: a crawl records one
    only when it follows it, not when its target was fetched already."""
    pages: dict[str, int] = {}  # dense ids, in the order of the first fetch
    for r in (r for rows in crawls for r in rows):
        pages.setdefault(r["url"], len(pages))
    node = dict(pages)  # and the aliases, with their page's id
    for r in (r for rows in crawls for r in rows):
        for alias in r["aliases"]:
            node.setdefault(alias, pages[r["url"]])
    for source, target in (redirects or {}).items():
        if target in node:
            node.setdefault(source, node[target])
    links = ((node[r["url"]], node.get(urldefrag(u)[0])) for r in crawls[0] for u in r["links"])
    src, dst = np.array([e for e in links if e[1] is not None], dtype=np.int64).reshape(-1, 2).T
    return from_edges(src, dst, len(pages)), node


def shares(order: list[int], pr: np.ndarray, fractions=FRACTIONS) -> list[float]:
    """Share of total PageRank held by the first x% of the fetches, for x in ``fractions``."""
    seen = np.array(order[: len(pr)])
    return [float(pr[seen[: max(1, round(f * len(pr)))]].sum()) for f in fractions]


def order_shares(graph: Graph, pages: dict[str, list[int]], fractions=FRACTIONS) -> dict:
    """The graph's size and the shares of each order (``pages``: the pages each fetched)."""
    pr = pagerank(graph, 0.85)
    out = {order: shares(seq, pr, fractions) for order, seq in pages.items()}
    out["omniscient"] = shares(list(np.argsort(-pr)), pr, fractions)
    return {"pages": graph.n, "links": graph.n_edges, "fractions": fractions, "shares": out}


def ordering_experiment(start_url: str, work: Path) -> dict:
    crawls = {order: crawl(start_url, order, work / order)[0] for order in ORDERS}
    graph, node = crawled_graph(list(crawls.values()))
    # (A page's first fetch: a start URL fetched again, or an alias, is no new page.)
    pages = {o: list(dict.fromkeys(node[r["url"]] for r in rows)) for o, rows in crawls.items()}
    log(f"  {start_url}: {graph.n} pages")
    return order_shares(graph, pages)


def real_graph_experiment(path: Path, work: Path, fraction: float) -> dict:
    graph = load_edge_list(path)
    by_pagerank = [int(s) for s in np.argsort(-pagerank(graph, 0.85))]
    # A crawl started elsewhere (node 0 of cnr-2000) may see only a few hundred pages.
    seed = next(s for s in by_pagerank if len(reachable(graph, s)) >= 0.9 * graph.n)
    stop, pages = int(fraction * graph.n), {}
    settings = {"CLOSESPIDER_PAGECOUNT": stop, "LOG_LEVEL": "ERROR"}
    with Site(graph) as site:
        for order in ORDERS:
            rows, _ = crawl(site.url(seed), order, work / f"real-{order}", **settings)
            ids = (int(r["url"].rsplit("/", 1)[1].removesuffix(".html")) for r in rows)
            pages[order] = list(dict.fromkeys(ids))  # (a start URL may be fetched again)
    fractions = [f for f in FRACTIONS if f <= fraction]
    return {"seed": seed, "stop": stop, **order_shares(graph, pages, fractions)}


def trap_experiment(work: Path, n: int, days: int = 3000) -> dict[str, float]:
    graph = site_graph(n, seed=3)
    # The site plus its calendar cut at ``days`` (every page links to day 0, as served).
    src, dst, d = [graph.sources(), np.arange(n)], [graph.indices, np.full(n, n)], np.arange(days)
    for k in CALENDAR_STEPS:
        src.append(n + d[d + k < days])
        dst.append(n + d[d + k < days] + k)
    pr = pagerank(from_edges(np.concatenate(src), np.concatenate(dst), n + days), 0.85)
    out = {"omniscient": float((np.argsort(-pr, kind="stable")[:1000] >= n).mean())}
    with Site(graph, trap=True) as site:
        for order in ORDERS:
            rows, _ = crawl(site.url(0), order, work / f"trap-{order}", CLOSESPIDER_PAGECOUNT=1000)
            out[order] = np.mean(["/cal/" in r["url"] for r in rows[:1000]])
    return out


def exported(workdir: Path) -> dict[str, float]:
    """The importance of every page a crawl of the ``evidence`` spider in ``workdir`` knows."""
    with open_state(workdir / ".scrapy" / "opic" / "evidence.sqlite") as state:
        return {p.url: p.importance for p in state.pages()}


def continuous_tau(work: Path, n: int) -> float:
    graph = site_graph(n, seed=4)
    with Site(graph) as site:
        settings = {"OPIC_CONTINUOUS": True, "CLOSESPIDER_PAGECOUNT": 5 * n}
        crawl(site.url(0), "opic", work / "continuous", **settings)
        urls = [site.url(i) for i in range(n)]
    imp = exported(work / "continuous")
    x, pr = np.array([imp.get(u, 0.0) for u in urls]), pagerank(graph, 0.85)
    linked = graph.in_degree > 0
    return float(kendalltau(x[linked], pr[linked]).statistic)


def scheduler_rate(path: str, n: int, jobdir: bool, work: Path) -> float:
    """Requests per second through ``n`` enqueues then pops of the scheduler at ``path``, its
    files in a new directory of ``work`` (a JOBDIR remembers what it has seen)."""
    # Nothing completes here, so every slot must be able to hold all its requests: the
    # politeness check still runs on every pop, it just never says no.
    settings = {"SCHEDULER": path, "LOG_ENABLED": False, "CONCURRENT_REQUESTS_PER_DOMAIN": n}
    tmp = tempfile.mkdtemp(dir=work)
    settings |= {"OPIC_STATE_PATH": f"{tmp}/state.sqlite"} | ({"JOBDIR": tmp} if jobdir else {})
    crawler = get_crawler(Spider, settings)
    crawler.engine = SimpleNamespace(  # what the schedulers read of the engine
        downloader=SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
    )
    crawler.spider = spider = Spider.from_crawler(crawler, name="overhead")
    scheduler = load_object(path).from_crawler(crawler)
    scheduler.open(spider)
    requests = [Request(f"http://host{i % 50}.example/page/{i}") for i in range(n)]
    t0 = time.perf_counter()
    for r in requests:
        scheduler.enqueue_request(r)
    popped = sum(1 for _ in iter(scheduler.next_request, None))
    rate = n / (time.perf_counter() - t0)
    scheduler.close("finished")
    assert popped == n, (path, popped)
    return rate


def measure(args: argparse.Namespace, work: Path) -> dict:
    """Every experiment of a run without ``--only-real``."""
    sites, name = {}, f"Generated power-law site ({args.pages} pages)"
    with Site(site_graph(args.pages, seed=1)) as site:
        sites[name] = ordering_experiment(site.url(0), work / "gen")
    for name, (package, subdir) in {} if args.skip_docs else DOCS.items():
        with StaticSite(ensure_docs(package, subdir)) as site:
            sites[name] = ordering_experiment(site.url("index.html"), work / package)
    paths = {"scrapy": "scrapy.core.scheduler.Scheduler", "opic": "scrapy_opic.OpicScheduler"}

    def best(path: str, jobdir: bool) -> float:
        return max(scheduler_rate(path, args.overhead_requests, jobdir, work) for _ in range(2))

    modes = {"in memory": False, "JOBDIR": True}
    overhead = {m: {k: best(p, jobdir) for k, p in paths.items()} for m, jobdir in modes.items()}
    return {
        "sites": sites,
        "trap": trap_experiment(work, min(args.pages, 1000)),
        "continuous_tau": continuous_tau(work, 300),
        "scheduler_overhead": overhead,
    }


def shares_table(result: dict) -> str:
    fractions = result["fractions"]
    at, opic = fractions.index(0.10), result["shares"]["opic"]
    header = ["order", *(f"{f:.0%}" for f in fractions), "OPIC / order at 10%"]
    return table(header, [[o, *s, opic[at] / s[at]] for o, s in result["shares"].items()])


def render(data: dict) -> str:
    sites, overhead = data["sites"].items(), data["scheduler_overhead"]
    sections = [
        "Share of the site's PageRank held by the first pages each order fetched (omniscient: "
        "by decreasing true PageRank, which no crawler has); the last column divides OPIC's "
        "share at 10% by the order's. The method is in the module's docstring.",
        table(["site", "pages fetched", "links"], [[k, r["pages"], r["links"]] for k, r in sites]),
    ]
    for name, result in sites:
        sections += [f"## {name}", shares_table(result)]
    trap = [[order, f"{share:.1%}"] for order, share in data["trap"].items()]
    sections += ["## Spider trap", table(["order", "first 1,000 fetches in the trap"], trap)]
    tau = table(["pages", "fetches", "Kendall tau"], [[300, 5 * 300, data["continuous_tau"]]])
    sections += ["## Continuous crawl", tau]
    head = ["mode", "Scrapy requests/s", "OPIC requests/s", "OPIC / Scrapy"]
    rows = [[m, r["scrapy"], r["opic"], r["opic"] / r["scrapy"]] for m, r in overhead.items()]
    sections += ["## Scheduler overhead", table(head, rows)]
    return page("Crawl-ordering evidence", *sections)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--pages", type=int, default=2000, help="pages of the generated site")
    ap.add_argument("--skip-docs", action="store_true", help="no real manuals")
    ap.add_argument("--overhead-requests", type=int, default=20_000)
    ap.add_argument("--only-real", action="store_true", help="crawl --real-graph only")
    ap.add_argument("--real-graph", type=Path, help="an edge list (cnr-2000)")
    ap.add_argument("--real-fraction", type=float, default=0.25)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.only_real:
            r = real_graph_experiment(args.real_graph, Path(tmp), args.real_fraction)
            head = ["pages", "links", "seed page", "stopped after (pages)"]
            summary = table(head, [[r["pages"], r["links"], r["seed"], r["stop"]]])
            text = page("cnr-2000 served as pages", summary, shares_table(r))
            write_results("crawl_evidence_cnr2000", r, text, args.out)
        else:
            data = measure(args, Path(tmp))
            write_results("crawl_evidence", data, render(data), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
