"""The cost of OPIC in a real crawl: pages per second against Scrapy's own scheduler.

    python -m benchmarks.crawl_cost [--pages 2001] [--hosts 3] [--concurrency 16] [--repeats 3]
        [--out benchmarks/results/crawl_cost.md]

A generated site (``tests.support.sites.site_graph``) on ``--hosts`` loopback addresses, no
server delay, crawled by the crawl runner's ``site`` spider in a fresh process each with
``CONCURRENT_REQUESTS = --concurrency``: Scrapy's own scheduler and the OPIC scheduler, each
without and with a ``JOBDIR``. A round runs the four one after the other, every other round in
reverse, so that a drift of the machine's load weighs on each kind alike. A run's pages/s is
read from the server's access log (first request's start to the last one's end: start-up and
shutdown left out); beside OPIC's pages/s over Scrapy's, Scrapy's CPU time per page over OPIC's
(the crawl process from its first response to its close, ``crawl_runner.CpuMeter``), which
other work on a shared machine disturbs less.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks._harness import RESULTS, page, table
from benchmarks.crawl_evidence import crawl
from tests.support.sites import Site, site_graph

ORDER = ("scrapy", "opic", "opic+jobdir", "scrapy+jobdir")  # the runs of a round, in order


def run_crawl(kind: str, site: Site, hosts: list[str], args, work: Path) -> tuple[float, float]:
    """One crawl of ``site``: its pages/s and its crawl CPU seconds per page."""
    meter = {"tests.support.crawl_runner.CpuMeter": 0}
    if kind.startswith("opic"):  # (the OPIC order's own EXTENSIONS, with the meter)
        meter["scrapy_opic.OpicLogStats"] = 500
    settings = {"CONCURRENT_REQUESTS": args.concurrency, "EXTENSIONS": meter}
    if kind.endswith("+jobdir"):
        settings["JOBDIR"] = str(work / "job")
    order, first = "opic" if kind.startswith("opic") else "default", len(site.access_log)
    _, stats = crawl(site.url(0), order, work, spider="site", allowed=hosts, **settings)
    log = site.access_log[first:]
    pages = sum(path.startswith("/p/") for _host, path, _start, _end in log)
    seconds = max(end for *_, end in log) - min(start for _h, _p, start, _e in log)
    return pages / seconds, stats["cpu/crawl_seconds"] / pages


def measure(args: argparse.Namespace) -> list[list]:
    """A row per round: Scrapy's and OPIC's pages/s and their ratios, without then with JOBDIR."""
    hosts = [f"127.0.0.{h + 1}" for h in range(args.hosts)]
    graph, rounds = site_graph(args.pages, seed=0), []
    site = Site(graph, host_of=lambda i: hosts[i % len(hosts)], addresses=tuple(hosts))
    with tempfile.TemporaryDirectory() as tmp, site:
        for k in range(args.repeats):
            runs = {}
            for kind in ORDER if k % 2 == 0 else ORDER[::-1]:
                runs[kind] = run_crawl(kind, site, hosts, args, Path(tmp) / f"{kind}-{k}")
            print(f"round {k + 1}: {runs}", file=sys.stderr, flush=True)
            rounds.append([k + 1])
            for jobdir in ("", "+jobdir"):
                (scrapy, cpu), (opic, opic_cpu) = runs[f"scrapy{jobdir}"], runs[f"opic{jobdir}"]
                rounds[-1] += [scrapy, opic, opic / scrapy, cpu / opic_cpu]
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2001)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "crawl_cost.md")
    args = parser.parse_args(argv)
    rounds = measure(args)
    medians = ["median", *(statistics.median(r[i] for r in rounds) for i in range(1, 9))]
    head = ["round", "scrapy", "opic", "pages/s ratio", "CPU ratio"]
    head += ["scrapy + JOBDIR", "opic + JOBDIR", "pages/s ratio", "CPU ratio"]
    text = page(
        "Crawl cost: OPIC against Scrapy's own scheduler",
        "Pages/s of each kind, OPIC's over Scrapy's (pages/s ratio) and Scrapy's crawl CPU per "
        "page over OPIC's (CPU ratio), round by round; the medians are the figures to read. The "
        "method is in the module's docstring.",
        table(head, [*rounds, medians]),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
