"""Crawl-ordering evidence on sites served on 127.0.0.1, and the scheduler's overhead.

    python -m benchmarks.crawl_evidence [--pages 2000] [--skip-docs] [--out DIR]
    python -m benchmarks.crawl_evidence --only-real [--real-graph EDGES] [--real-fraction 0.25]

* Orders: the share of the PageRank (damping 0.85) of the graph the crawls saw (fetched pages,
  their in-site links, redirects folded in) held by the first 1%, 10%, 25%, 50% of the pages
  fetched by OPIC, Scrapy's default (LIFO), breadth-first (DEPTH_PRIORITY=1, FIFO queues) and an
  omniscient order by PageRank, on a generated power-law site and the PostgreSQL 15 and Django
  manuals (Debian's packages, unpacked into ``benchmarks/.cache``); with ``--only-real``, on an
  edge list (cnr-2000) served one page per node, from the most important page that reaches 90%
  of it until ``--real-fraction`` of it is fetched.
* Spider trap: the generated site (1,000 pages) with an endless calendar linked from every page;
  the share of the first 1,000 fetches inside it. The calendar links only to itself (a PageRank
  sink): omniscient is its share of the first 1,000 pages by PageRank of the site plus the
  calendar cut at 3,000 days.
* Continuous crawl: Kendall tau (pages with in-links) of the exported importance against the
  PageRank of a 300-page generated site after 5N fetches with default settings.
* Scheduler overhead: enqueue then pop of 20,000 distinct requests over 50 hosts, OpicScheduler
  and Scrapy's Scheduler in the same run (best of 2), in memory and with JOBDIR.
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
from scrapy import Request
from scrapy.utils.httpobj import urlparse_cached

from benchmarks._harness import RESULTS, bare_scheduler, page, table, write_results
from benchmarks.paper_figures import REAL_GRAPH
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


def start_crawl(start_url: str, order: str, workdir: Path, **options) -> subprocess.Popen:
    """Start one crawl by ``tests/support/crawl_runner.py`` in a process of its own, its files
    in ``workdir``. ``options``: Scrapy settings (upper case) and the runner's other config
    keys (``spider``, by default ``evidence``; ``allowed``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    items, stats, path = (workdir / f for f in ("items.jsonl", "stats.json", "config.json"))
    config = {"spider": "evidence", "settings": {"LOG_LEVEL": "WARNING", "RETRY_TIMES": 2}}
    for k, v in options.items():
        (config["settings"] if k.isupper() else config)[k] = v
    config |= {"start_url": start_url, "order": order, "items": str(items), "stats": str(stats)}
    path.write_text(json.dumps(config))
    return subprocess.Popen([sys.executable, str(RUNNER), str(path)], cwd=workdir)


def crawl(start_url: str, order: str, workdir: Path, **options) -> tuple[list[dict], dict]:
    """One crawl (:func:`start_crawl`), waited for: its items and final stats."""
    proc = start_crawl(start_url, order, workdir, **options)
    if proc.wait():
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    rows = [json.loads(line) for line in (workdir / "items.jsonl").read_text().splitlines()]
    return rows, json.loads((workdir / "stats.json").read_text())


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
        node |= {alias: node.get(alias, pages[r["url"]]) for alias in r["aliases"]}
    node |= {s: node.get(s, node[t]) for s, t in (redirects or {}).items() if t in node}
    links = ((node[r["url"]], node.get(urldefrag(u)[0])) for r in crawls[0] for u in r["links"])
    src, dst = np.array([e for e in links if e[1] is not None], dtype=np.int64).reshape(-1, 2).T
    return from_edges(src, dst, len(pages)), node


def shares(order: list[int], pr: np.ndarray, fractions=FRACTIONS) -> list[float]:
    """Share of total PageRank held by the first x% of the fetches, for x in ``fractions``."""
    seen = np.array(order[: len(pr)])
    return [float(pr[seen[: max(1, round(f * len(pr)))]].sum()) for f in fractions]


def ordering(start_url: str, work: Path, graph: Graph | None = None, fractions=FRACTIONS, **s):
    """A crawl in each order from ``start_url`` (``s``: settings), and the shares of the
    PageRank of ``graph`` (served by :class:`Site`: a page's id is in its URL) or, without
    one, of the graph the crawls saw."""
    crawls = {order: crawl(start_url, order, work / order, **s)[0] for order in ORDERS}
    if graph is None:
        graph, node = crawled_graph(list(crawls.values()))
    else:
        urls = {r["url"] for rows in crawls.values() for r in rows}
        node = {u: int(u.rsplit("/", 1)[1].removesuffix(".html")) for u in urls}
    # (A page's first fetch: a start URL fetched again, or an alias, is no new page.)
    pages = {o: list(dict.fromkeys(node[r["url"]] for r in rows)) for o, rows in crawls.items()}
    pr = pagerank(graph, 0.85)
    out = {order: shares(seq, pr, fractions) for order, seq in pages.items()}
    out["omniscient"] = shares(list(np.argsort(-pr)), pr, fractions)
    log(f"  {start_url}: {graph.n} pages")
    return {"pages": graph.n, "links": graph.n_edges, "fractions": fractions, "shares": out}


def trap_graph(n: int, days: int) -> tuple[Graph, Graph]:
    """The trap site: a generated site of ``n`` pages, and the same with its endless calendar
    cut at ``days`` (pages ``n..``), every page linking to day 0, as :class:`Site` serves it
    with ``trap=True``."""
    graph = site_graph(n, seed=3)
    src, dst, d = [graph.sources(), np.arange(n)], [graph.indices, np.full(n, n)], np.arange(days)
    for k in CALENDAR_STEPS:
        src.append(n + d[d + k < days])
        dst.append(n + d[d + k < days] + k)
    return graph, from_edges(np.concatenate(src), np.concatenate(dst), n + days)


def trap_experiment(work: Path, n: int, days: int = 3000) -> dict[str, float]:
    graph, trapped = trap_graph(n, days)
    pr = pagerank(trapped, 0.85)
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


def continuous_tau(work: Path, n: int = 300) -> float:
    graph = site_graph(n, seed=4)
    with Site(graph) as site:
        settings = {"OPIC_CONTINUOUS": True, "CLOSESPIDER_PAGECOUNT": 5 * n}
        crawl(site.url(0), "opic", work / "continuous", **settings)
        urls = [site.url(i) for i in range(n)]
    imp, pr, linked = exported(work / "continuous"), pagerank(graph, 0.85), graph.in_degree > 0
    x = np.array([imp.get(u, 0.0) for u in urls])
    return float(kendalltau(x[linked], pr[linked]).statistic)


def scheduler_rate(path: str, jobdir: bool, work: Path, n: int = 20_000) -> float:
    """Requests per second through ``n`` enqueues then pops of the scheduler at ``path``, its
    files in a new directory of ``work`` (a JOBDIR remembers what it has seen)."""
    # Nothing completes here, so every slot must be able to hold all its requests: the
    # politeness check still runs on every pop, it just never says no.
    slots = SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
    scheduler = bare_scheduler(
        path, jobdir, work, lambda _crawler: slots, CONCURRENT_REQUESTS_PER_DOMAIN=n
    )
    requests = [Request(f"http://host{i % 50}.example/page/{i}") for i in range(n)]
    t0 = time.perf_counter()
    for r in requests:
        scheduler.enqueue_request(r)
    assert sum(1 for _ in iter(scheduler.next_request, None)) == n, path
    rate = n / (time.perf_counter() - t0)
    scheduler.close("finished")
    return rate


def shares_table(result: dict) -> str:
    at, opic = result["fractions"].index(0.10), result["shares"]["opic"]
    header = ["order", *(f"{f:.0%}" for f in result["fractions"]), "OPIC / order at 10%"]
    return table(header, [[o, *s, opic[at] / s[at]] for o, s in result["shares"].items()])


def measure(args: argparse.Namespace, work: Path) -> tuple[str, dict, str]:
    """Every experiment of a run without ``--only-real``: its stem, figures and page."""
    sites, name = {}, f"Generated power-law site ({args.pages} pages)"
    with Site(site_graph(args.pages, seed=1)) as site:
        sites[name] = ordering(site.url(0), work / "gen")
    for name, (package, subdir) in {} if args.skip_docs else DOCS.items():
        with StaticSite(ensure_docs(package, subdir)) as site:
            sites[name] = ordering(site.url("index.html"), work / package)
    paths = {"scrapy": "scrapy.core.scheduler.Scheduler", "opic": "scrapy_opic.OpicScheduler"}
    overhead = {
        mode: {k: max(scheduler_rate(p, jobdir, work) for _ in range(2)) for k, p in paths.items()}
        for mode, jobdir in {"in memory": False, "JOBDIR": True}.items()
    }
    trap, tau = trap_experiment(work, min(args.pages, 1000)), continuous_tau(work)
    summary = [[k, r["pages"], r["links"]] for k, r in sites.items()]
    trap_rows = [[o, f"{x:.1%}"] for o, x in trap.items()]
    rows = [[m, r["scrapy"], r["opic"], r["opic"] / r["scrapy"]] for m, r in overhead.items()]
    text = page(
        "Crawl-ordering evidence",
        "Share of the site's PageRank held by the first pages each order fetched (omniscient: "
        "by decreasing true PageRank, which no crawler has); the last column divides OPIC's "
        "share at 10% by the order's. The method is in the module's docstring.",
        table(["site", "pages fetched", "links"], summary),
        *(f"## {name}\n\n{shares_table(result)}" for name, result in sites.items()),
        "## Spider trap",
        table(["order", "first 1,000 fetches in the trap"], trap_rows),
        "## Continuous crawl",
        table(["pages", "fetches", "Kendall tau"], [[300, 5 * 300, tau]]),
        "## Scheduler overhead",
        table(["mode", "Scrapy requests/s", "OPIC requests/s", "OPIC / Scrapy"], rows),
    )
    data = {"sites": sites, "trap": trap, "continuous_tau": tau, "scheduler_overhead": overhead}
    return "crawl_evidence", data, text


def real_graph(args: argparse.Namespace, work: Path) -> tuple[str, dict, str]:
    """The orders on ``--real-graph`` served one page per node: stem, figures and page."""
    graph, fraction = load_edge_list(args.real_graph), args.real_fraction
    # A crawl started elsewhere (node 0 of cnr-2000) may see only a few hundred pages.
    by_pagerank = np.argsort(-pagerank(graph, 0.85)).tolist()
    seed = next(s for s in by_pagerank if len(reachable(graph, s)) >= 0.9 * graph.n)
    stop, fractions = int(fraction * graph.n), [f for f in FRACTIONS if f <= fraction]
    with Site(graph) as site:
        settings = {"CLOSESPIDER_PAGECOUNT": stop, "LOG_LEVEL": "ERROR"}
        r = ordering(site.url(seed), work, graph, fractions, **settings)
    head = ["pages", "links", "seed page", "stopped after (pages)"]
    summary = table(head, [[r["pages"], r["links"], seed, stop]])
    text = page("cnr-2000 served as pages", summary, shares_table(r))
    return "crawl_evidence_cnr2000", r | {"seed": seed, "stop": stop}, text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--pages", type=int, default=2000, help="pages of the generated site")
    ap.add_argument("--skip-docs", action="store_true", help="no real manuals")
    ap.add_argument("--only-real", action="store_true", help="crawl --real-graph only")
    ap.add_argument("--real-graph", type=Path, default=REAL_GRAPH, help="an edge list")
    ap.add_argument("--real-fraction", type=float, default=0.25)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        write_results(*(real_graph if args.only_real else measure)(args, Path(tmp)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
