"""The cost of OPIC in a real crawl: pages per second against Scrapy's own scheduler.

    python -m benchmarks.crawl_cost [--pages 2001] [--hosts 3] [--concurrency 16]
        [--repeats 3] [--profile DIR] [--out benchmarks/results/crawl_cost.md]

A generated site of ``--pages`` pages (``tests.support.sites.site_graph``: power-law
in-degrees, a home
page, every page linking home) served on ``--hosts`` loopback addresses (127.0.0.1,
127.0.0.2...: page ``i`` on host ``i % hosts``) with no server delay, crawled by real Scrapy
crawls in a fresh process each (``tests/support/crawl_runner.py``, its ``site`` spider: an item and
every link of each page), ``CONCURRENT_REQUESTS = --concurrency``, four kinds of run:

* ``scrapy``: Scrapy's own scheduler (memory queues);
* ``opic``: the OPIC scheduler (the README's four settings lines; its state in
  ``.scrapy/opic/`` of the run's directory, as without JOBDIR);
* ``scrapy+jobdir`` and ``opic+jobdir``: the same with a ``JOBDIR`` each (Scrapy's disk queues;
  OPIC's resumable state).

The runs alternate as a user would run them, one after the other (scrapy, opic, opic+jobdir,
scrapy+jobdir, then the reverse), so that the machine's load weighs on each kind alike. A run's
speed is read from the server's access log: pages served divided by the time from the first
request's start to the last one's end (the process's start-up and shutdown are left out). Each
ratio is OPIC's rate over Scrapy's rate of the same round; the table gives every pair and their
median, and beside it the ratio of CPU time per page of the crawl process (from the first
response to the close: ``tests.support.crawl_runner.CpuMeter``), which other work on a
shared machine
disturbs less.

``--profile DIR`` runs each OPIC crawl under cProfile (``DIR/<kind>-<k>.prof``) and prints its top
entries by own time; profiled figures are not speeds, so the results file is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import RUNNER
from tests.support.sites import Site, site_graph

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent

KINDS = ("scrapy", "opic", "scrapy+jobdir", "opic+jobdir")
ORDER = ("scrapy", "opic", "opic+jobdir", "scrapy+jobdir")  # the runs of a round, in order


def run_crawl(
    kind: str, site: Site, hosts: int, concurrency: int, work: Path, profile: Path | None
):
    """One crawl of ``site`` in a fresh process; its rate from the server's access log."""
    work.mkdir(parents=True)
    # (OPIC's state goes where a crawl without JOBDIR keeps it: .scrapy/opic/ in the run's
    # directory.)
    settings = {
        "CONCURRENT_REQUESTS": concurrency,
        "LOG_LEVEL": "WARNING",
        # (Measures, in both kinds alike: the process's CPU time over the crawl.)
        "EXTENSIONS": {"tests.support.crawl_runner.CpuMeter": 0},
    }
    if kind.startswith("opic"):  # (the OPIC order's own EXTENSIONS, with the meter)
        settings["EXTENSIONS"]["scrapy_opic.OpicLogStats"] = 500
    if kind.endswith("+jobdir"):
        settings["JOBDIR"] = str(work / "job")
    config = {
        "start_url": site.url(0),
        "items": str(work / "items.jsonl"),
        "stats": str(work / "stats.json"),
        "order": "opic" if kind.startswith("opic") else "default",
        "allowed": [f"127.0.0.{h + 1}" for h in range(hosts)],
        "settings": settings,
    }
    (work / "config.json").write_text(json.dumps(config))
    cmd = [sys.executable, str(RUNNER), str(work / "config.json")]
    if profile is not None and kind.startswith("opic"):
        cmd[1:1] = ["-m", "cProfile", "-o", str(profile)]
    first = len(site.access_log)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} crawl failed: {proc.stderr[-3000:]}")
    log = site.access_log[first:]
    pages = sum(1 for _h, path, _s, _e in log if path.startswith("/p/"))
    start = min(s for _h, _p, s, _e in log)
    end = max(e for _h, _p, _s, e in log)
    busy = sum(e - s for _h, _p, s, e in log) / (end - start)  # requests being served, on average
    stats = json.loads((work / "stats.json").read_text())
    return {
        "kind": kind,
        "pages": pages,
        "seconds": end - start,
        "rate": pages / (end - start),
        "cpu": cpu,
        "crawl_cpu_per_page": stats["cpu/crawl_seconds"] / pages,
        "served": busy,
    }


def _pairs(runs: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """The (Scrapy, OPIC) pairs of runs, without and with JOBDIR, round by round."""
    out: dict[str, list[tuple[dict, dict]]] = {"": [], "+jobdir": []}
    for k in range(0, len(runs), len(KINDS)):
        group = {r["kind"]: r for r in runs[k : k + len(KINDS)]}
        for suffix in out:
            out[suffix].append((group[f"scrapy{suffix}"], group[f"opic{suffix}"]))
    return out


def report(options: dict, runs: list[dict]) -> str:
    pairs = _pairs(runs)
    rows = []
    for k, ((a, b), (c, d)) in enumerate(zip(pairs[""], pairs["+jobdir"]), 1):
        cells = []
        for base, opic in ((a, b), (c, d)):
            cells += [
                f"{base['rate']:,.0f}",
                f"{opic['rate']:,.0f}",
                f"{opic['rate'] / base['rate']:.3f}x",
                f"{base['crawl_cpu_per_page'] / opic['crawl_cpu_per_page']:.3f}x",
            ]
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    rate = {s: [o["rate"] / b["rate"] for b, o in p] for s, p in pairs.items()}
    cpu = {
        s: [b["crawl_cpu_per_page"] / o["crawl_cpu_per_page"] for b, o in p]
        for s, p in pairs.items()
    }
    med = statistics.median
    lines = [
        "# Crawl cost: OPIC against Scrapy's own scheduler",
        "",
        f"`python -m benchmarks.crawl_cost --pages {options['pages']} --hosts {options['hosts']} "
        f"--concurrency {options['concurrency']} --repeats {options['repeats']}`",
        "",
        f"{options['pages']:,} pages on {options['hosts']} loopback hosts, no server delay, "
        f"CONCURRENT_REQUESTS = {options['concurrency']}; each run a fresh process, the four "
        "kinds alternating (in the order scrapy, opic, opic + JOBDIR, scrapy + JOBDIR, then the "
        "reverse, so that a drift of the machine's load weighs on both alike). Pages/s from the "
        "server's access log (first request's start to the last one's end); a ratio is OPIC's "
        "over Scrapy's of the same round. *CPU* is Scrapy's CPU time per page over OPIC's (the "
        "crawl process, all its threads, from the first response to the close): the same "
        "cost, less sensitive than wall time to other work on the machine.",
        "",
        "| round | scrapy | opic | pages/s ratio | CPU | scrapy + JOBDIR | opic + JOBDIR "
        "| pages/s ratio | CPU |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Median pages/s ratio: **{med(rate['']):.3f}x** without JOBDIR, "
        f"**{med(rate['+jobdir']):.3f}x** with it (range {min(rate['']):.3f}-{max(rate['']):.3f} "
        f"and {min(rate['+jobdir']):.3f}-{max(rate['+jobdir']):.3f}); median CPU ratio "
        f"**{med(cpu['']):.3f}x** and **{med(cpu['+jobdir']):.3f}x**.",
        "",
        f"Machine: {os.cpu_count()} cores, shared with other work; {time.strftime('%Y-%m-%d')}.",
        "",
    ]
    return "\n".join(lines)


def print_profile(path: Path, top: int = 35) -> None:
    import pstats

    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2001)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default=",".join(KINDS), help="(with --profile: which)")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "crawl_cost.md")
    args = parser.parse_args(argv)
    kinds = args.kinds.split(",")
    graph = site_graph(args.pages, seed=0)
    hosts = args.hosts
    addresses = tuple(f"127.0.0.{h + 1}" for h in range(hosts))
    runs = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        Site(graph, host_of=lambda i: addresses[i % hosts], addresses=addresses) as site,
    ):
        for k in range(args.repeats):
            # (ABBA: every other round in reverse, so that a trend in the machine's load does
            # not always fall on the same kind.)
            for kind in ORDER if k % 2 == 0 else ORDER[::-1]:
                if kind not in kinds:
                    continue
                prof = None
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    prof = args.profile / f"{kind}-{k}.prof"
                run = run_crawl(
                    kind, site, hosts, args.concurrency, Path(tmp) / f"{kind}-{k}", prof
                )
                runs.append(run)
                print(
                    f"round {k + 1} {kind:>14}: {run['pages']} pages in {run['seconds']:.2f} s, "
                    f"{run['rate']:,.0f} pages/s; crawl CPU "
                    f"{run['crawl_cpu_per_page'] * 1e3:.2f} ms/page (process {run['cpu']:.2f} "
                    f"s), {run['served']:.2f} requests being served on average",
                    flush=True,
                )
                if prof is not None and prof.exists():
                    print_profile(prof)
    if args.profile is not None or kinds != list(KINDS):
        return 0
    options = {
        "pages": args.pages,
        "hosts": hosts,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
    }
    text = report(options, runs)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
