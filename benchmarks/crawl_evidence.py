"""Crawl-ordering evidence on sites served on 127.0.0.1, and the scheduler's overhead.

    python -m benchmarks.crawl_evidence [--out benchmarks/results] [--skip-docs]

* Share of the site's PageRank captured after fetching 1%, 10%, 25%, 50% of its pages, for
  OPIC greedy, Scrapy's default order (LIFO, depth-first), breadth-first (DEPTH_PRIORITY=1 with
  FIFO queues) and an omniscient order by true PageRank, on a generated power-law site and on two
  real manuals: PostgreSQL 15 (Debian's postgresql-doc-15) and Django (python-django-doc),
  unpacked with ``apt-get download`` + ``dpkg -x`` into ``benchmarks/.cache`` (the system is not
  touched). The site graph is the one the crawls saw: every fetched page and its in-site links
  (redirected URLs folded into their targets); PageRank with damping 0.85.
* Spider trap: the generated site with an endless calendar linked from every page; the share of
  the first 1,000 fetches spent inside it, per order.
* Continuous crawl: Kendall tau (pages with in-links) of the exported importance against the
  site's PageRank after 5N fetches with default settings.
* Scheduler overhead: enqueue + pop throughput of OpicScheduler against Scrapy's Scheduler in
  the same run, in memory and with JOBDIR.
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

from benchmarks._harness import write_results
from scrapy_opic.opic.graph import Graph, from_edges
from scrapy_opic.opic.pagerank import pagerank
from tests.support import RUNNER
from tests.support.sites import Site, StaticSite, site_graph

ROOT = Path(__file__).resolve().parent
CACHE = ROOT / ".cache"
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
    root = CACHE / package
    html = root / subdir
    if html.exists():
        return html
    CACHE.mkdir(parents=True, exist_ok=True)
    debs = list(CACHE.glob(f"{package}_*.deb"))
    if not debs:
        cmd = ["apt-get", "download", package]
        if subprocess.run(cmd, cwd=CACHE, capture_output=True).returncode:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
            subprocess.run(cmd, cwd=CACHE, check=True, capture_output=True)
        debs = list(CACHE.glob(f"{package}_*.deb"))
    subprocess.run(["dpkg", "-x", str(debs[0]), str(root)], check=True)
    return html


def crawl(start_url: str, order: str, workdir: Path, **settings) -> tuple[list[dict], dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {"LOG_LEVEL": "WARNING", "RETRY_TIMES": 2, **settings}
    items, stats = workdir / "items.jsonl", workdir / "stats.json"
    cfg = workdir / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "start_url": start_url,
                "order": order,
                "spider": "evidence",
                "settings": settings,
                "items": str(items),
                "stats": str(stats),
            }
        )
    )
    subprocess.run([sys.executable, str(RUNNER), str(cfg)], cwd=workdir, check=True)
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    return rows, json.loads(stats.read_text())


def crawled_graph(
    crawls: list[list[dict]], redirects: dict[str, str] | None = None
) -> tuple[Graph, dict[str, int]]:
    """The graph the crawls saw: fetched pages, their in-site links, redirects folded in. A link
    is to a page (its URL without the fragment, as the request fingerprint sees it), once.
    ``redirects`` (URL -> URL) adds redirects the crawls could not see: a crawl records one
    only when it follows it, not when its target was fetched already."""
    node: dict[str, int] = {}
    pages = 0  # dense ids: aliases share their page's id
    for rows in crawls:
        for r in rows:
            if r["url"] not in node:
                node[r["url"]] = pages
                pages += 1
            i = node[r["url"]]
            for alias in r["aliases"]:
                node.setdefault(alias, i)
    for source, target in (redirects or {}).items():
        if target in node:
            node.setdefault(source, node[target])
    src, dst = [], []
    for r in crawls[0]:
        i = node[r["url"]]
        for url in r["links"]:
            j = node.get(urldefrag(url)[0])
            if j is not None:
                src.append(i)
                dst.append(j)
    return from_edges(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), pages), node


def shares(order: list[int], pr: np.ndarray, fractions=FRACTIONS) -> list[float]:
    """Share of total PageRank held by the first x% of the fetches, for x in ``fractions``."""
    n = len(pr)
    out = []
    seen = np.array(order[:n])
    for f in fractions:
        k = max(1, int(round(f * n)))
        out.append(float(pr[seen[:k]].sum()))
    return out


def ordering_experiment(name: str, start_url: str, work: Path, **settings) -> dict:
    crawls = {}
    for order in ORDERS:
        t0 = time.perf_counter()
        rows, stats = crawl(start_url, order, work / order, **settings)
        crawls[order] = rows
        log(f"  {name}, {order}: {len(rows)} pages in {time.perf_counter() - t0:.1f} s")
    graph, node = crawled_graph([crawls["opic"], crawls["default"], crawls["bfs"]])
    pr = pagerank(graph, 0.85)
    result = {"pages": graph.n, "links": graph.n_edges, "shares": {}}
    for order, rows in crawls.items():
        seq, seen = [], set()
        for r in rows:
            i = node[r["url"]]
            if i not in seen:
                seen.add(i)
                seq.append(i)
        result["shares"][order] = shares(seq, pr)
    result["shares"]["omniscient"] = shares(list(np.argsort(-pr)), pr)
    return result


def real_graph_experiment(path: Path, work: Path, fraction: float) -> dict:
    """The cnr-2000 web graph served one page per node; each order crawls ``fraction`` of it
    from one seed; shares of the whole graph's PageRank at 1%, 10%, 25% of its pages."""
    from scrapy_opic.opic.graph import load_edge_list

    graph = load_edge_list(path)
    pr = pagerank(graph, 0.85)
    seed = seed_node(graph, pr)
    limit = int(fraction * graph.n)
    fractions = [f for f in FRACTIONS if f <= fraction]
    result = {
        "pages": graph.n,
        "links": graph.n_edges,
        "crawled": limit,
        "shares": {},
        "fractions": fractions,
        "seed": seed,
    }
    with Site(graph) as site:
        for order in ORDERS:
            t0 = time.perf_counter()
            rows, _ = crawl(
                site.url(seed),
                order,
                work / f"real-{order}",
                CLOSESPIDER_PAGECOUNT=limit,
                LOG_LEVEL="ERROR",
            )
            seq = [int(r["url"].rsplit("/", 1)[1].removesuffix(".html")) for r in rows]
            result["shares"][order] = shares(seq, pr, fractions)
            log(f"  cnr-2000, {order}: {len(rows)} pages in {time.perf_counter() - t0:.0f} s")
    result["shares"]["omniscient"] = shares(list(np.argsort(-pr)), pr, fractions)
    return result


def seed_node(graph: Graph, pr: np.ndarray) -> int:
    """The most important page from which at least 90% of the graph is reachable (a crawl
    started elsewhere, e.g. at node 0 of cnr-2000, may see only a few hundred pages)."""
    for s in np.argsort(-pr)[:50]:
        seen = np.zeros(graph.n, dtype=bool)
        seen[s] = True
        frontier = np.array([s])
        while frontier.size:
            _, kids = graph.gather(frontier)
            kids = np.unique(kids)
            frontier = kids[~seen[kids]]
            seen[frontier] = True
        if seen.sum() >= 0.9 * graph.n:
            return int(s)
    return int(np.argmax(pr))


def trap_pagerank_share(graph: Graph, days: int = 3000, first: int = 1000) -> float:
    """The omniscient order on the trap site: the share of calendar pages among the ``first``
    pages by true PageRank of the site plus its calendar cut at ``days`` days (every real page
    links to day 0, as the served site does). The calendar has no link back to the site: it is a
    PageRank sink, so a PageRank-first order enters it too."""
    from tests.support.sites import CALENDAR_STEPS

    n = graph.n
    src, dst = [graph.sources(), np.arange(n)], [graph.indices, np.full(n, n)]
    d = np.arange(days)
    for k in CALENDAR_STEPS:
        ok = d + k < days
        src.append(n + d[ok])
        dst.append(n + d[ok] + k)
    full = from_edges(np.concatenate(src), np.concatenate(dst), n + days)
    pr = pagerank(full, 0.85)
    return float((np.argsort(-pr, kind="stable")[:first] >= n).mean())


def trap_experiment(work: Path, n: int) -> dict:
    graph = site_graph(n, seed=3)
    out = {"omniscient (PageRank, calendar cut at 3,000 days)": trap_pagerank_share(graph)}
    log(f"  trap, omniscient: {out['omniscient (PageRank, calendar cut at 3,000 days)']:.1%}")
    with Site(graph, trap=True) as site:
        for order in ORDERS:
            rows, _ = crawl(site.url(0), order, work / f"trap-{order}", CLOSESPIDER_PAGECOUNT=1000)
            first = rows[:1000]
            out[order] = sum("/cal/" in r["url"] for r in first) / max(1, len(first))
            log(f"  trap, {order}: {out[order]:.1%} of the first {len(first)} fetches")
    return out


def continuous_experiment(work: Path, n: int) -> float:
    from scipy.stats import kendalltau

    from scrapy_opic.export import open_state

    graph = site_graph(n, seed=4)
    with Site(graph) as site:
        crawl(
            site.url(0),
            "opic",
            work / "continuous",
            OPIC_CONTINUOUS=True,
            CLOSESPIDER_PAGECOUNT=5 * n,
        )
        urls = [site.url(i) for i in range(n)]
    state = open_state(work / "continuous" / ".scrapy" / "opic" / "evidence.sqlite")
    with state:
        imp = {p.url: p.importance for p in state.pages()}
    x = np.array([imp.get(u, 0.0) for u in urls])
    pr = pagerank(graph, 0.85)
    linked = graph.in_degree > 0
    return float(kendalltau(x[linked], pr[linked]).statistic)


def scheduler_overhead(n: int, work: Path) -> dict:
    """Requests per second through enqueue + pop, ours against Scrapy's, same run."""
    from scrapy import Request, Spider
    from scrapy.utils.httpobj import urlparse_cached
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    def run(path: str, jobdir: str | None) -> float:
        # Nothing completes here, so every slot must be able to hold all its requests: the
        # politeness check still runs on every pop, it just never says no.
        settings = {"SCHEDULER": path, "LOG_ENABLED": False, "CONCURRENT_REQUESTS_PER_DOMAIN": n}
        if jobdir:
            settings["JOBDIR"] = jobdir
        crawler = get_crawler(Spider, settings)
        crawler.engine = SimpleNamespace(  # what the schedulers read of the engine
            downloader=SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
        )
        spider = Spider.from_crawler(crawler, name="overhead")
        crawler.spider = spider
        scheduler = load_object(path).from_crawler(crawler)
        scheduler.open(spider)
        requests = [Request(f"http://host{i % 50}.example/page/{i}") for i in range(n)]
        t0 = time.perf_counter()
        for r in requests:
            scheduler.enqueue_request(r)
        popped = 0
        while scheduler.next_request() is not None:
            popped += 1
        dt = time.perf_counter() - t0
        scheduler.close("finished")
        assert popped == n, (path, popped)
        return n / dt

    def timed(path: str, jobdir: str | None) -> float:
        # Each run in a directory of its own: a JOBDIR remembers what it has seen.
        import os

        cwd = os.getcwd()
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            os.chdir(tmp)
            try:
                return run(path, jobdir)
            finally:
                os.chdir(cwd)

    out = {}
    for label, jobdir in (("in memory", None), ("JOBDIR", "job")):
        rates = {}
        for name, path in (
            ("scrapy", "scrapy.core.scheduler.Scheduler"),
            ("opic", "scrapy_opic.OpicScheduler"),
        ):
            rates[name] = max(timed(path, jobdir) for _ in range(2))
        out[label] = rates
        log(
            f"  scheduler overhead, {label}: scrapy {rates['scrapy']:,.0f}/s, "
            f"opic {rates['opic']:,.0f}/s ({rates['opic'] / rates['scrapy']:.2f}x)"
        )
    return out


def table(result: dict) -> str:
    fractions = result.get("fractions", FRACTIONS)
    head = "| order | " + " | ".join(f"{int(f * 100)}%" for f in fractions) + " |\n"
    head += "|---|" + "---|" * len(fractions) + "\n"
    return head + "".join(
        f"| {order} | " + " | ".join(f"{x:.3f}" for x in s) + " |\n"
        for order, s in result["shares"].items()
    )


def ratios(result: dict) -> str:
    s = result["shares"]
    at = 1  # index of 10%
    return (
        f"At 10%: OPIC / omniscient = {s['opic'][at] / s['omniscient'][at]:.2f}, "
        f"OPIC / breadth-first = {s['opic'][at] / s['bfs'][at]:.2f}, "
        f"OPIC / Scrapy default = {s['opic'][at] / s['default'][at]:.2f}. The ceilings (no "
        f"order beats omniscient): omniscient / breadth-first = "
        f"{s['omniscient'][at] / s['bfs'][at]:.2f}, omniscient / Scrapy default = "
        f"{s['omniscient'][at] / s['default'][at]:.2f}.\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--pages", type=int, default=2000, help="pages of the generated site")
    ap.add_argument("--skip-docs", action="store_true")
    ap.add_argument("--overhead-requests", type=int, default=20_000)
    ap.add_argument("--real-graph", type=Path, help="also crawl this edge list (cnr-2000)")
    ap.add_argument("--real-fraction", type=float, default=0.25)
    ap.add_argument("--only-real", action="store_true", help="run only the real-graph crawls")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data: dict = {}
    report = [
        "# Crawl-ordering evidence\n",
        "Generated by `python -m benchmarks.crawl_evidence`. Shares of the site's total "
        "PageRank (damping 0.85) held by the first 1%, 10%, 25% and 50% of the pages each "
        "order fetched; omniscient = pages by decreasing true PageRank. Default Scrapy "
        "settings otherwise (16 concurrent requests, 8 per host).\n",
    ]
    t_start = time.perf_counter()
    if args.only_real:
        with tempfile.TemporaryDirectory() as tmp:
            result = real_graph_experiment(args.real_graph, Path(tmp), args.real_fraction)
        write_results("crawl_evidence_cnr2000", result, None, args.out)
        (args.out / "crawl_evidence_cnr2000.md").write_text(
            "# cnr-2000 served as pages\n\nGenerated by `python -m benchmarks.crawl_evidence "
            f"--only-real --real-graph {args.real_graph.name} --real-fraction "
            f"{args.real_fraction}`. {result['pages']:,} pages, {result['links']:,} links "
            "(self-links dropped), one page per node on 127.0.0.1, every order starting from "
            f"page id {result['seed']} (the most important page that reaches 90% of the graph) "
            f"and stopped after {result['crawled']:,} pages. Shares of the whole graph's "
            "PageRank held by the first 1%, 10%, 25% of its pages:\n\n"
            + table(result)
            + "\n"
            + ratios(result)
            + f"\n_Total time: {time.perf_counter() - t_start:.0f} s._\n"
        )
        log("wrote cnr-2000 results")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sites = []
        graph = site_graph(args.pages, seed=1)
        with Site(graph) as site:
            log(f"generated site: {graph.n} pages")
            sites.append(
                (
                    f"Generated power-law site ({graph.n} pages)",
                    ordering_experiment("generated", site.url(0), work / "gen"),
                )
            )
        if not args.skip_docs:
            for name, (package, subdir) in DOCS.items():
                html = ensure_docs(package, subdir)
                with StaticSite(html) as site:
                    log(f"{name}: {html}")
                    sites.append(
                        (name, ordering_experiment(name, site.url("index.html"), work / package))
                    )
        for name, result in sites:
            data[name] = result
            report.append(
                f"## {name}\n\n{result['pages']:,} pages fetched, {result['links']:,} "
                f"distinct in-site links.\n\n" + table(result) + "\n" + ratios(result)
            )
        log("spider trap")
        trap = trap_experiment(work, min(args.pages, 1000))
        data["trap"] = trap
        report.append(
            "## Spider trap\n\nThe generated site (1,000 pages) with an endless calendar "
            "(every day links to the next days and months) linked from every page. Share of the "
            "first 1,000 fetches spent inside the calendar. The calendar links only to itself "
            "(a PageRank sink): the omniscient row is the share of calendar pages among the "
            "first 1,000 pages by true PageRank of the site plus the calendar cut at 3,000 "
            "days.\n\n| order | share in the trap |\n"
            "|---|---|\n" + "".join(f"| {k} | {v:.1%} |\n" for k, v in trap.items())
        )
        log("continuous crawl")
        tau = continuous_experiment(work, 300)
        data["continuous_tau"] = tau
        report.append(
            "## Continuous crawl\n\nA 300-page generated site crawled for 5N fetches with "
            "`OPIC_CONTINUOUS=True` and default settings (window interpolation:30): Kendall "
            f"tau of the exported importance against PageRank, pages with in-links: "
            f"**{tau:.3f}**.\n"
        )
        log("scheduler overhead")
        overhead = scheduler_overhead(args.overhead_requests, work)
        data["scheduler_overhead"] = overhead
        report.append(
            f"## Scheduler overhead\n\nEnqueue then pop {args.overhead_requests:,} distinct "
            "requests over 50 hosts (best of 2), same run:\n\n| mode | Scrapy Scheduler | "
            "OpicScheduler | ratio |\n|---|---|---|---|\n"
            + "".join(
                f"| {mode} | {r['scrapy']:,.0f}/s | {r['opic']:,.0f}/s | "
                f"{r['opic'] / r['scrapy']:.2f}x |\n"
                for mode, r in overhead.items()
            )
        )
    report.append(f"\n_Total time: {time.perf_counter() - t_start:.0f} s._\n")
    write_results("crawl_evidence", data, "\n".join(report), args.out)
    log(f"wrote {args.out / 'crawl_evidence.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
