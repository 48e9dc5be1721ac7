"""The cost of OPIC in a real crawl, as a user pays it: whole processes against Scrapy's own
scheduler.

    python -m benchmarks.crawl_cost [--graph EDGES | --links K [--size N]] [--seed 247028]
        [--pages 2000] [--hosts 3] [--concurrency 16] [--pairs 4]
        [--out benchmarks/results/crawl_cost.md]

The web graph cnr-2000 (``--graph``) is served on ``--hosts`` loopback addresses, a host a block
of consecutive page ids (a URL-ordered graph keeps a site's pages together), no server delay.
Each crawl is a fresh ``scrapy`` process of the crawl runner's ``site`` spider from page
``--seed``, stopped after ``--pages`` responses (``CLOSESPIDER_PAGECOUNT``), timed from the outside
by ``/usr/bin/time -v``: CPU (user + system) and wall seconds of the whole process (start-up,
imports, shutdown and all), its peak memory. A pair is one crawl of each kind, Scrapy's scheduler
then OPIC's, every other pair in reverse, so that a drift of the machine's load weighs on both
alike; the same without then with a ``JOBDIR``. Figures per pair: OPIC's pages per second of
wall time over Scrapy's, and Scrapy's CPU seconds per page over OPIC's (above 1: OPIC costs
less); the medians are the figures to read. Beside them, the mean out-links of the pages each
crawl fetched (from the graph): the work a page brings (the spider extracts and yields every
link) depends on which pages an order fetches. So ``--links K`` serves a graph made for the
purpose in place of ``--graph``: ``--size`` pages, each with exactly ``K`` links to pages drawn
at random, crawled from page 0. Every order then fetches the same work per page, and the ratios
are the schedulers' own costs.

A whole process's figures move by a tenth from run to run on a shared machine. Beside them,
the scheduler alone, in a process of its own for each run (``--loop-pages``, 0 for none): one
``next_request``, then (OPIC) ``settle_visit`` of the popped request over ``--links`` (or 20) new
requests to random pages of three hosts, then their ``enqueue_request`` one by one, as the
engine and the add-on's spider middleware call them; microseconds of CPU per page (the requests'
construction left out), the best of three runs of each scheduler, alternated. This is the cost
of the scheduler's own path (fingerprints included: Scrapy's dupefilter takes them too), with no
download, parse or reactor.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, bare_scheduler, child_env, page, table
from benchmarks.paper_figures import REAL_GRAPH
from scrapy_opic.opic.graph import Graph, from_edges, load_edge_list
from tests.support import RUNNER
from tests.support.sites import Site

KINDS = ("scrapy", "opic")
#: What ``/usr/bin/time -v`` prints, by the name this benchmark gives it.
TIME_FIELDS = {
    "user": r"User time \(seconds\): ([\d.]+)",
    "sys": r"System time \(seconds\): ([\d.]+)",
    "wall": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)",
    "rss_kb": r"Maximum resident set size \(kbytes\): (\d+)",
}


def seconds(clock: str) -> float:
    """``h:mm:ss`` or ``m:ss.ss`` as seconds."""
    total = 0.0
    for part in clock.split(":"):
        total = 60 * total + float(part)
    return total


def timed_crawl(kind: str, site: Site, args: argparse.Namespace, work: Path) -> dict[str, float]:
    """One crawl in a process of its own, timed by the OS: its pages, CPU and wall seconds, and
    peak memory."""
    work.mkdir(parents=True)
    hosts = sorted({site.host_of(i) for i in range(site.graph.n)})
    settings: dict = {
        "LOG_LEVEL": "WARNING",
        "CONCURRENT_REQUESTS": args.concurrency,
        "CLOSESPIDER_PAGECOUNT": args.pages,
    }
    if args.jobdir:
        settings["JOBDIR"] = str(work / "job")
    config = {
        "spider": "site",
        "start_url": site.url(args.node),
        "allowed": hosts,
        "order": "opic" if kind == "opic" else "default",
        "items": str(work / "items.jsonl"),
        "stats": str(work / "stats.json"),
        "settings": settings,
    }
    (work / "config.json").write_text(json.dumps(config))
    cmd = ["/usr/bin/time", "-v", sys.executable, str(RUNNER), str(work / "config.json")]
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=True)
    got = {}
    for name, pattern in TIME_FIELDS.items():
        m = re.search(pattern, done.stderr)
        if m is None:
            raise RuntimeError(f"/usr/bin/time printed no {name}: {done.stderr[-500:]}")
        got[name] = seconds(m.group(1)) if name == "wall" else float(m.group(1))
    stats = json.loads((work / "stats.json").read_text())
    got["pages"] = float(stats.get("response_received_count", 0))
    got["cpu_per_page"] = (got["user"] + got["sys"]) / max(got["pages"], 1)
    got["pages_per_s"] = got["pages"] / got["wall"]
    # The links the fetched pages hold (the spider extracts and yields every one): the work a
    # page brings depends on the page, and the two orders fetch different pages.
    degree = np.diff(site.graph.indptr)
    ids = [
        int(json.loads(line)["url"].rsplit("/", 1)[1].removesuffix(".html"))
        for line in (work / "items.jsonl").read_text().splitlines()
    ]
    got["links_per_page"] = float(degree[ids].mean()) if ids else 0.0
    return got


def measure(args: argparse.Namespace, site: Site, work: Path) -> list[list]:
    """A row per pair: each kind's pages/s and CPU ms per page, OPIC's pages/s over Scrapy's,
    Scrapy's CPU per page over OPIC's."""
    rows = []
    for k in range(args.pairs):
        runs = {}
        for kind in KINDS if k % 2 == 0 else KINDS[::-1]:
            runs[kind] = timed_crawl(kind, site, args, work / f"{kind}-{k}")
        print(f"pair {k + 1}: {runs}", file=sys.stderr, flush=True)
        s, o = runs["scrapy"], runs["opic"]
        rows.append(
            [
                k + 1,
                s["pages"],
                o["pages"],
                s["pages_per_s"],
                o["pages_per_s"],
                s["links_per_page"],
                o["links_per_page"],
                1000 * s["cpu_per_page"],
                1000 * o["cpu_per_page"],
                s["rss_kb"] / 1024,
                o["rss_kb"] / 1024,
                o["pages_per_s"] / s["pages_per_s"],
                s["cpu_per_page"] / o["cpu_per_page"],
            ]
        )
    rows.append(["median", *(statistics.median(r[i] for r in rows) for i in range(1, 13))])
    return rows


def loop_once(path: str, jobdir: bool, pages: int, links: int) -> float:
    """CPU microseconds per page of the in-process loop of the scheduler at ``path`` (see the
    module docstring)."""
    from scrapy import Request
    from scrapy.core.downloader import Downloader

    with tempfile.TemporaryDirectory() as tmp:
        scheduler = bare_scheduler(path, jobdir, Path(tmp), Downloader)
        rnd = random.Random(1)
        urls = [
            [
                f"http://host{rnd.randrange(3)}.example/p/{rnd.randrange(100_000)}.html"
                for _ in range(links)
            ]
            for _ in range(pages)
        ]
        scheduler.enqueue_request(Request("http://host0.example/p/0.html"))
        visit = getattr(scheduler, "settle_visit", None)
        spent = 0.0
        for n in range(pages):
            t0 = time.process_time()
            request = scheduler.next_request()
            t1 = time.process_time()
            followed = [Request(u) for u in urls[n]]  # (the requests' making: not counted)
            t2 = time.process_time()
            if visit is not None:
                visit(request, followed, None)
            for r in followed:
                scheduler.enqueue_request(r)
            spent += (t1 - t0) + (time.process_time() - t2)
        scheduler.close("finished")
    return 1e6 * spent / pages


def scheduler_loop(path: str, jobdir: bool, pages: int, links: int) -> float:
    """:func:`loop_once` in a process of its own."""
    code = "import sys; from benchmarks.crawl_cost import loop_once; "
    code += "print(loop_once(sys.argv[1], sys.argv[2] == '1', *map(int, sys.argv[3:])))"
    cmd = [sys.executable, "-c", code, path, "1" if jobdir else "0", str(pages), str(links)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=child_env())
    return float(done.stdout.strip().splitlines()[-1])


def loop_rows(args: argparse.Namespace) -> list[list]:
    """A row per mode: each scheduler's best of three in-process loops, and their ratio."""
    paths = {"scrapy": "scrapy.core.scheduler.Scheduler", "opic": "scrapy_opic.OpicScheduler"}
    rows = []
    for title, jobdir in (("in memory", False), ("JOBDIR", True)):
        best = {kind: float("inf") for kind in paths}
        for k in range(3):
            for kind in KINDS if k % 2 == 0 else KINDS[::-1]:
                took = scheduler_loop(paths[kind], jobdir, args.loop_pages, args.links or 20)
                best[kind] = min(best[kind], took)
        rows.append([title, best["scrapy"], best["opic"], best["scrapy"] / best["opic"]])
    return rows


def regular_graph(n: int, k: int, seed: int = 0) -> Graph:
    """``n`` pages, each linking to ``k`` other pages drawn at random (distinct, not itself)."""
    rng = np.random.default_rng(seed)
    # (k draws from the n - 1 other pages: draw from 0..n-2 and skip over the page itself.)
    dst = np.stack([rng.choice(n - 1, size=k, replace=False) for _ in range(n)])
    src = np.repeat(np.arange(n), k)
    dst = dst.ravel()
    dst = dst + (dst >= src)
    return from_edges(src, dst, n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", type=Path, default=REAL_GRAPH)
    parser.add_argument("--links", type=int, default=0, help="a graph of K links per page")
    parser.add_argument("--size", type=int, default=100_000, help="its pages")
    parser.add_argument("--seed", type=int, default=247028)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--loop-pages", type=int, default=3000, help="0: no in-process loop")
    parser.add_argument("--out", type=Path, default=RESULTS / "crawl_cost.md")
    args = parser.parse_args(argv)
    if args.links:
        graph, args.node = regular_graph(args.size, args.links), 0
    else:
        graph = load_edge_list(args.graph)
        # (The seed is a node of the file: its page's id is its rank among the file's ids.)
        named = graph.names is not None and str(args.seed) in set(graph.names.tolist())
        args.node = graph.names.tolist().index(str(args.seed)) if named else args.seed
    block = -(-graph.n // args.hosts)  # (pages per host, a block of consecutive ids)
    hosts = tuple(f"127.0.0.{h + 1}" for h in range(args.hosts))
    site = Site(graph, host_of=lambda i: hosts[i // block], addresses=hosts)
    sections = []
    head = ["pair", "pages (scrapy)", "pages (opic)", "scrapy pages/s", "opic pages/s"]
    head += ["scrapy links/page", "opic links/page"]
    head += ["scrapy CPU ms/page", "opic CPU ms/page", "scrapy peak MB", "opic peak MB"]
    head += ["pages/s ratio", "CPU ratio"]
    with tempfile.TemporaryDirectory() as tmp, site:
        for jobdir in (False, True):
            args.jobdir = jobdir
            rows = measure(args, site, Path(tmp) / ("jobdir" if jobdir else "memory"))
            title = "With a JOBDIR" if jobdir else "In memory (no JOBDIR)"
            sections.append(f"## {title}\n\n{table(head, rows)}")
    if args.loop_pages:
        loop_head = ["mode", "Scrapy CPU us/page", "OPIC CPU us/page", "Scrapy / OPIC"]
        sections.append(
            f"## The scheduler alone, in process\n\n{table(loop_head, loop_rows(args))}"
        )
    text = page(
        "Crawl cost: OPIC against Scrapy's own scheduler, whole processes",
        "Each crawl a `scrapy` process timed by `/usr/bin/time -v` (CPU user + system, wall, "
        "peak memory); pages/s ratio: OPIC's over Scrapy's; CPU ratio: Scrapy's CPU per page "
        "over OPIC's (above 1, OPIC costs less). The method is in the module's docstring.",
        *sections,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
