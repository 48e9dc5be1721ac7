"""The Redis store: a fleet of Scrapy processes against the same processes sharing nothing, and
what the crawl costs Redis (CPU and round trips per page, bytes per page).

    python -m benchmarks.redis_perf [--pages 4000] [--hosts 8] [--processes 4] [--delay 0.05]
        [--concurrency 4] [--repeat 3] [--memory-pages 1000000] [--cluster] [--skip-memory]
        [--out DIR]

**Fleet.** A generated site of ``--pages`` pages served by ``--hosts`` loopback hosts (127.0.0.1
to 127.0.0.N, one download slot each) with ``--delay`` seconds per page. ``--processes``
Scrapy processes crawl a site of that many times ``--pages`` pages (each fetches as many pages
as a control process) as one Redis crawl, with ``--concurrency`` requests per host at once
for the whole fleet (a list: one run each). Two controls, as many processes crawling it each on
its own with the embedded store (sharing nothing: what this machine allows that many
processes): *control* with the fleet's per-host limit each (so N times the fleet's requests on
each host), *control-polite* with 1/N of it each (the fleet's politeness). Pages/s is counted
at the server, over the middle 80% of the fetches, with the machine's busy cores and the
crawl processes' CPU per page; each kind runs ``--repeat`` times, alternated, and the table
shows medians. Round trips
are the processes' own counts (``opic/round_trips``), Redis CPU the server's own (``INFO cpu``,
every node of a cluster), per page fetched. The projection: Redis cores for 10,000 pages/s.

**Memory.** ``--memory-pages`` pages on 1,000 hosts, each scheduled with a typical request
(a ``scrapy.Request`` with a callback, encoded as the scheduler has it encoded), then fetched
through the frontier API on a power-law graph; ``used_memory`` of the server before, when all
are pending and when all are visited, each after the process closed (its state a checkpoint).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks._harness import RESULTS, CoreMeter, children_cpu, command, write_results
from tests.support import RUNNER
from tests.support.sites import RedisCluster, RedisServer, Site, site_graph


def redis_cpu(client) -> float:
    """CPU seconds the server (every primary of a cluster) has used."""
    info = client.info("cpu")
    if "used_cpu_user" not in info:  # a cluster client: one entry per node
        return sum(float(n["used_cpu_user"]) + float(n["used_cpu_sys"]) for n in info.values())
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def crawl(site_url: str, n: int, settings: dict, workdir: Path, hosts: list[str]) -> list[dict]:
    """``n`` crawl processes with ``settings``, started together; their final stats."""
    procs = []
    for k in range(n):
        d = workdir / f"p{k}"
        d.mkdir(parents=True)
        config = {
            "allowed": hosts,
            "start_url": site_url,
            "settings": settings,
            "items": str(d / "items.jsonl"),
            "stats": str(d / "stats.json"),
        }
        (d / "config.json").write_text(json.dumps(config))
        log = open(d / "crawl.log", "w")  # noqa: SIM115 (closed below)
        cmd = [sys.executable, str(RUNNER), str(d / "config.json")]
        procs.append((subprocess.Popen(cmd, cwd=d, stdout=subprocess.DEVNULL, stderr=log), log))
    for proc, log in procs:
        proc.wait()
        log.close()
    return [json.loads((workdir / f"p{k}" / "stats.json").read_text()) for k in range(n)]


def run(args, g, hosts, url: str | None, kind: str, n: int, per_host: int, workdir: Path) -> dict:
    """One crawl of the site: ``kind`` "redis" (one crawl, ``n`` processes), "control" (``n``
    processes sharing nothing, each with the fleet's per-host limit: ``n`` times the requests
    per host of the fleet) or "control-polite" (the same, each with ``1/n`` of it: the fleet's
    politeness). ``per_host``: the fleet's requests per host at once."""
    fleet_limit = per_host
    if kind == "control-polite":
        per_host = max(1, per_host // n)
    base = {
        "CONCURRENT_REQUESTS": per_host * args.hosts,
        "CONCURRENT_REQUESTS_PER_DOMAIN": per_host,
        "LOG_LEVEL": "WARNING",
        "LOGSTATS_INTERVAL": 0,
        "EXTENSIONS": {"tests.support.crawl_runner.CpuMeter": 0},
    }
    client = None
    if kind == "redis":
        from scrapy_opic._backends.redis import open_client

        key = f"opic:bench:{uuid.uuid4().hex[:8]}"
        base.update(OPIC_STORE="redis", OPIC_REDIS_URL=url, OPIC_REDIS_KEY=key)
        client = open_client(url)
        cpu0 = redis_cpu(client)
    cores = CoreMeter()
    cpu_before = children_cpu()
    with Site(g, delay=args.delay, host_of=lambda i: hosts[i % len(hosts)], addresses=hosts) as s:
        with cores:
            stats = crawl(s.url(0), n, base, workdir / f"{kind}-{n}-{fleet_limit}", list(hosts))
        times = sorted(start for _h, _p, start, _e in s.access_log)
    crawl_cpu = children_cpu() - cpu_before
    lo, hi = int(0.1 * len(times)), int(0.9 * len(times))
    row = {
        "kind": kind,
        "processes": n,
        "per_host": fleet_limit,
        "fetches": len(times),
        "pages_per_s": (hi - lo) / (times[hi] - times[lo]),
        "cores_busy": cores.busy(times[lo], times[hi]),
        "crawler_cpu_ms_per_page": crawl_cpu * 1e3 / len(times),
        "crawl_cpu_ms_per_page": sum(st.get("cpu/crawl_seconds", 0) for st in stats)
        * 1e3
        / len(times),
    }
    if client is not None:
        from scrapy_opic._backends.redis import RedisFrontier, RedisSnapshot

        cpu = redis_cpu(client) - cpu0
        trips = sum(st.get("opic/round_trips", 0) for st in stats)
        row.update(
            round_trips_per_page=trips / len(times),
            redis_cpu_usec_per_page=cpu * 1e6 / len(times),
            per_process=[st.get("opic/visits", 0) for st in stats],
            total_cash=RedisSnapshot(client, key).total_cash(),
        )
        RedisFrontier(client, key).clear()
        client.close()
    return row


def memory(n: int, url: str) -> dict:
    """Bytes of Redis per pending and per visited page of an ``n``-page crawl."""
    import redis
    from scrapy import Request, Spider

    from scrapy_opic._backends.redis import RedisFrontier
    from scrapy_opic._scheduler import encode_request
    from scrapy_opic.opic.frontier import Entry, Link
    from scrapy_opic.opic.graph import power_law_graph

    class Bench(Spider):
        name = "bench"

        def parse(self, response):
            pass

    spider = Bench()
    key = f"opic:mem{uuid.uuid4().hex[:4]}"  # (a realistic key length)

    def process() -> RedisFrontier:
        f = RedisFrontier.connect(url, key, encode=lambda r, u: encode_request(r, spider, u))
        f.open(window="unbounded")
        return f

    client = redis.Redis.from_url(url)
    pattern = "https://www.example-site-{0}.org/section/{1}/page-{2}.html"
    urls = [pattern.format(k % 1000, k % 37, k) for k in range(n)]
    fps = [hashlib.sha1(u.encode()).digest() for u in urls]
    before = client.info("memory")["used_memory"]
    f = process()
    t0 = time.perf_counter()
    for lo in range(0, n, 1000):
        batch = [
            Entry(fps[k], urls[k], 0, urls[k].split("/")[2], Request(urls[k], spider.parse))
            for k in range(lo, min(n, lo + 1000))
        ]
        f.schedule(batch)
        f.maintain([])
    schedule_s = time.perf_counter() - t0
    f.close([])
    pending = client.info("memory")["used_memory"]
    f = process()
    g = power_law_graph(n, seed=3)
    node = {fp: k for k, fp in enumerate(fps)}
    t0 = time.perf_counter()
    visits = 0
    while (lease := f.pop()) is not None:
        links = [Link(fps[j], urls[j]) for j in g.children(node[lease.key])]
        f.visit(lease, links)
        visits += 1
        if visits % 1000 == 0:
            f.maintain([])
    crawl_s = time.perf_counter() - t0
    f.close([])
    visited = client.info("memory")["used_memory"]
    sample = encode_request(Request(urls[0], callback=spider.parse), spider, urls[0])
    out = {
        "pages": n,
        "stored_request_bytes": len(sample),
        "bytes_per_pending_page": (pending - before) / n,
        "bytes_per_visited_page": (visited - before) / n,
        "schedule_pages_per_s": n / schedule_s,
        "pop_visit_pages_per_s": visits / crawl_s,
        "visits": visits,
    }
    RedisFrontier(client, key).clear()
    client.close()
    return out


def median_rows(rows: list[dict]) -> list[dict]:
    """One row per (kind, processes, per host): the median of each figure over its runs."""
    import statistics

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"], r["processes"], r["per_host"]), []).append(r)
    out = []
    for runs in groups.values():
        row = dict(runs[0], runs=len(runs))
        for name, value in runs[0].items():
            if isinstance(value, float):
                row[name] = statistics.median(r[name] for r in runs)
        out.append(row)
    return out


def report(args, rows: list[dict], mems: list[dict]) -> str:
    lines = [
        "# Redis store: fleet, cost and memory",
        "",
        f"`{command()}`",
        "",
        f"{args.pages} pages (the fleet: as many per process) on {args.hosts} hosts, "
        f"{args.delay} s per page at the server, "
        f"{args.concurrency} requests per host at once for the fleet (column 'per host'); Redis: "
        f"{'a cluster of 3 masters' if args.cluster else 'one server'}; {os.cpu_count()} cores "
        "for everything (site, Redis, crawlers).",
        "",
        "*redis*: the processes share one crawl. *control*: as many processes sharing nothing,"
        " each crawling the whole site with the fleet's per-host limit (so the site takes N "
        "times the fleet's requests per host). *control-polite*: the same with 1/N of it each "
        "(the fleet's politeness). Pages/s over the middle 80% of the fetches, at the server; "
        "cores busy: the machine's, over the same span; crawl CPU: the crawl processes' own from "
        "their first response to their close, process CPU: the same with start-up and exit, "
        "per page fetched. Each figure: the median of "
        f"{args.repeat} alternated runs.",
        "",
        "| run | processes | per host | pages/s | vs control | vs control-polite "
        "| round trips/page | Redis CPU us/page | crawl CPU ms/page | process CPU ms/page "
        "| cores busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = median_rows(rows)
    controls = {
        (r["kind"], r["processes"], r["per_host"]): r
        for r in rows
        if r["kind"].startswith("control")
    }

    def vs(r: dict, kind: str) -> str:
        ref = controls.get((kind, r["processes"], r["per_host"]))
        return f"{r['pages_per_s'] / ref['pages_per_s']:.2f}x" if ref and r is not ref else ""

    for r in rows:
        trips = f"{r['round_trips_per_page']:.3f}" if "round_trips_per_page" in r else ""
        cpu = f"{r['redis_cpu_usec_per_page']:.1f}" if "redis_cpu_usec_per_page" in r else ""
        lines.append(
            f"| {r['kind']} | {r['processes']} | {r['per_host']} | {r['pages_per_s']:.1f} "
            f"| {vs(r, 'control')} "
            f"| {vs(r, 'control-polite')} | {trips} | {cpu} "
            f"| {r['crawl_cpu_ms_per_page']:.2f} | {r['crawler_cpu_ms_per_page']:.2f} "
            f"| {r['cores_busy']:.2f} |"
        )
    fleet = [r for r in rows if r["kind"] == "redis"]
    if fleet:
        worst = max(r["redis_cpu_usec_per_page"] for r in fleet)
        lines += [
            "",
            f"10,000 pages/s would take about {worst * 1e4 / 1e6:.2f} Redis cores (the highest "
            "Redis CPU per page above).",
        ]
    if mems:
        lines += [
            "",
            "| pages | bytes per pending page | bytes per visited page | stored request bytes |",
            "|---|---|---|---|",
        ]
        for m in mems:
            lines.append(
                f"| {m['pages']:,} | {m['bytes_per_pending_page']:.0f} | "
                f"{m['bytes_per_visited_page']:.0f} | {m['stored_request_bytes']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pages", type=int, default=4000)
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--processes", default="4")
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--concurrency", default="4", help="the fleet's requests per host, e.g. 4,16")
    p.add_argument("--memory-pages", default="1000000")
    p.add_argument("--cluster", action="store_true", help="a Redis Cluster of 3 masters")
    p.add_argument("--redis", default=None, help="a running server (default: start one)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each kind (the median is shown)")
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    procs = [int(x) for x in args.processes.split(",")]
    hosts = [f"127.0.0.{k}" for k in range(1, args.hosts + 1)]
    g = site_graph(args.pages, seed=7)

    def fleet_graph(n: int):
        # (As many pages per process as a control process fetches: the processes' start-up
        # and final commit weigh on the middle 80% of a short crawl as they would not on a
        # real one.)
        return site_graph(args.pages * n, seed=7)

    workdir = Path(tempfile.mkdtemp(prefix="opic-redis-bench-"))
    server = None
    if args.redis is None:
        server = RedisCluster(str(workdir / "c"), 3) if args.cluster else RedisServer(workdir)
    url = args.redis or server.__enter__()
    try:
        rows = []
        for per_host in (int(x) for x in str(args.concurrency).split(",")):
            for n in procs:
                for rep in range(args.repeat):  # (alternated: the machine's drift hits all kinds)
                    for kind in ("redis", "control", "control-polite"):
                        wd = workdir / f"r{rep}"
                        site = fleet_graph(n) if kind == "redis" else g
                        rows.append(run(args, site, hosts, url, kind, n, per_host, wd))
                        print(json.dumps(rows[-1]), flush=True)
        mems = []
        if not args.skip_memory and not args.cluster:
            for n in (int(x) for x in args.memory_pages.split(",")):
                mems.append(memory(n, url))
                print(json.dumps(mems[-1]), flush=True)
    finally:
        if server is not None:
            server.__exit__()
    stem = "redis_perf_cluster" if args.cluster else "redis_perf"
    text = report(args, rows, mems)
    write_results(stem, {"fleet": rows, "memory": mems}, text, Path(args.out))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
