"""The Redis store: crawl throughput of 1, 2, 4 and 8 Scrapy processes sharing one frontier,
Redis round trips per fetched page, Redis time per page, and Redis memory per URL.

    python benchmarks/redis_perf.py [--pages 2000] [--delay 0.1] [--concurrency 8] [--hosts 8]
        [--processes 1,2,4,8] [--memory-pages 50000[,1000000...]] [--memory-only]
        [--redis URL] [--out DIR]

Without ``--redis`` a redis-server (Debian's package) is started on a free loopback port.

**Scaling.** A generated site of ``--pages`` pages is served by ``--hosts`` loopback hosts
(127.0.0.1, 127.0.0.2, ...: one download slot each, pages spread over them) with a fixed delay
per page, so that the downloader, not the CPU, bounds a process (as in a real crawl). The fleet
keeps each host's ``CONCURRENT_REQUESTS_PER_DOMAIN`` (``--concurrency``) for all its processes
(fleet politeness, the default): hosts x concurrency is the most the site takes at once. N processes
run the same spider with ``OPIC_STORE = "redis"`` and one crawl key, started together. Pages/s
is counted at the server, from its first hit to its last (process start-up excluded). The
baseline, measured in the same run: one process with the embedded store. Round trips are each
process's own count (``opic/round_trips``: every command or pipeline it sent), summed. Redis
time per page is the server's own ``INFO commandstats`` time of the script calls (the work
every process shares: what bounds the number of processes).

**Memory.** ``--memory-pages`` pages are scheduled with a typical request (a ``scrapy.Request``
with a callback, encoded as the scheduler has the frontier store it), then crawled greedily on a
power-law graph through the frontier API; ``INFO memory`` ``used_memory`` is read before, when
all are pending, and when all are visited (the request is deleted at the visit). Several sizes
(``--memory-pages 50000,1000000``) run one after the other, each on a new crawl key of the same
server; the figures per page depend on the size, since Redis turns a sorted set or a hash from
its compact encoding into a hashtable past 128 entries. ``--memory-only`` runs only this part:
the report keeps the scaling section of the last full run in ``--out`` as it was, and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test sites (tests/sites.py)

from tests.sites import RedisServer

ROOT = Path(__file__).resolve().parent
RUNNER = ROOT.parent / "tests" / "crawl_runner.py"


def script_usec(client) -> tuple[int, float]:
    """Calls and microseconds the server spent in script calls so far."""
    stats = client.info("commandstats")
    calls = usec = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        if name in stats:
            calls += int(stats[name]["calls"])
            usec += float(stats[name]["usec"])
    return calls, usec


def redis_cpu(client) -> float:
    """CPU seconds the Redis server has used (user and system, all its threads)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def crawl(
    site_url: str, n_procs: int, settings: dict, workdir: Path, allowed: list[str]
) -> list[dict]:
    procs = []
    for k in range(n_procs):
        d = workdir / f"p{k}"
        d.mkdir(parents=True)
        config = {
            "allowed": allowed,
            "start_url": site_url,
            "settings": settings,
            "items": str(d / "items.jsonl"),
            "stats": str(d / "stats.json"),
        }
        (d / "config.json").write_text(json.dumps(config))
        log = open(d / "crawl.log", "w")  # noqa: SIM115 (closed below)
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, str(RUNNER), str(d / "config.json")],
                    cwd=d,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                ),
                log,
                d,
            )
        )
    out = []
    for proc, log, d in procs:
        code = proc.wait(timeout=1800)
        log.close()
        if code != 0:
            raise RuntimeError(f"crawl process failed: {(d / 'crawl.log').read_text()[-2000:]}")
        out.append(json.loads((d / "stats.json").read_text()))
    return out


def scaling(args, redis_url: str, workdir: Path) -> list[dict]:
    import redis

    from tests.sites import Site, site_graph

    client = redis.Redis.from_url(redis_url)
    g = site_graph(args.pages, seed=7)
    hosts = tuple(f"127.0.0.{k + 1}" for k in range(args.hosts))
    base = {
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "LOG_LEVEL": "WARNING",
        "LOGSTATS_INTERVAL": 0,
    }
    rows = []
    # The control: as many independent processes as the largest shared run, each crawling
    # the whole site with its own embedded store. It shares nothing, so its throughput is what
    # this machine (cores, site server) allows that many processes.
    runs = [("embedded", 1)] + [("redis", n) for n in args.processes]
    runs.append(("independent", max(args.processes)))
    for kind, n_procs in runs:
        with Site(
            g, delay=args.delay, host_of=lambda i: hosts[i % len(hosts)], addresses=hosts
        ) as site:
            times: list[float] = []
            respond = site.respond

            def timed(path: str, respond=respond, times=times):
                times.append(time.monotonic())
                return respond(path)

            site.respond = timed
            settings = dict(base)
            key = f"opic:bench:{uuid.uuid4().hex}"
            if kind == "redis":
                settings.update(
                    {"OPIC_STORE": "redis", "OPIC_REDIS_URL": redis_url, "OPIC_REDIS_KEY": key}
                )
            calls0, usec0 = script_usec(client)
            cpu0 = redis_cpu(client)
            stats = crawl(
                site.url(0), n_procs, settings, workdir / f"{kind}-{n_procs}", list(hosts)
            )
            calls1, usec1 = script_usec(client)
            cpu1 = redis_cpu(client)
            hits = len(site.hits)
            distinct = len(set(site.hits))
        times.sort()
        span = times[-1] - times[0]
        # Steady state: the middle 80% of the fetches. The first and last fetches are bounded by
        # the site (one seed page to start from, the last pages found late), not by the crawl.
        lo, hi = int(0.1 * len(times)), int(0.9 * len(times))
        row = {
            "store": kind,
            "processes": n_procs,
            "pages": distinct,
            "fetches": hits,
            "seconds": span,
            "pages_per_s": hits / span,
            "steady_pages_per_s": (hi - lo) / (times[hi] - times[lo]),
            "visits": sum(s.get("opic/visits", 0) for s in stats),
        }
        if kind == "independent":
            row["pages"] = hits // n_procs
        if kind == "redis":
            trips = sum(s.get("opic/round_trips", 0) for s in stats)
            row.update(
                {
                    "round_trips": trips,
                    "round_trips_per_page": trips / max(1, hits),
                    "script_calls": calls1 - calls0,
                    "redis_usec_per_page": (usec1 - usec0) / max(1, hits),
                    # (All of the server's CPU: scripts, other commands, the network.)
                    "redis_cpu_usec_per_page": (cpu1 - cpu0) * 1e6 / max(1, hits),
                    "per_process_pages": [s.get("opic/visits", 0) for s in stats],
                }
            )
            from scrapy_opic.backends.redis import RedisFrontier

            frontier = RedisFrontier(client, key)
            row["total_cash"] = frontier.total_cash()
            row["problems"] = frontier.check()
            frontier.clear()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def memory(n: int, redis_url: str) -> dict:
    import redis
    from scrapy import Request, Spider

    from scrapy_opic.backends.redis import RedisFrontier
    from scrapy_opic.opic.frontier import Entry, Link
    from scrapy_opic.scheduler import encode_request
    from scrapy_opic.simulator.graph import power_law_graph

    class Bench(Spider):
        name = "bench"

        def parse(self, response):
            pass

    spider = Bench()
    client = redis.Redis.from_url(redis_url)
    # (The frontier encodes each request as the scheduler has it do: encode_request.)
    frontier = RedisFrontier(
        client,
        f"opic:mem{uuid.uuid4().hex[:4]}",  # a realistic key length
        encode=lambda request, url: encode_request(request, spider, url),
    )
    frontier.open(window="unbounded")
    url = "https://www.example-site-{0}.org/section/{1}/page-{2}.html"
    urls = [url.format(k % 1000, k % 37, k) for k in range(n)]
    fps = [hashlib.sha1(u.encode()).digest() for u in urls]
    # The typical request: its dict pickled, as Scrapy's disk queues store it, and as stored.
    sample = pickle.dumps(Request(urls[0], callback=spider.parse).to_dict(spider=spider), 4)
    stored = encode_request(Request(urls[0], callback=spider.parse), spider, urls[0])
    client.memory_purge() if hasattr(client, "memory_purge") else None
    before = client.info("memory")["used_memory"]
    t0 = time.perf_counter()
    for lo in range(0, n, 1000):
        batch = []
        for k in range(lo, min(n, lo + 1000)):
            request = Request(urls[k], callback=spider.parse)
            batch.append(Entry(fps[k], urls[k], 0, f"www.example-site-{k % 1000}.org", request))
        frontier.schedule(batch)
    schedule_s = time.perf_counter() - t0
    pending = client.info("memory")["used_memory"]
    g = power_law_graph(n, seed=3)
    node = {fp: k for k, fp in enumerate(fps)}
    t0 = time.perf_counter()
    calls0, usec0 = script_usec(client)
    visits = 0
    while True:
        lease = frontier.pop()
        if lease is None:
            break
        k = node[lease.key]
        links = [Link(fps[j], urls[j]) for j in g.children(k)]  # known pages: no request bytes
        frontier.visit(lease, links)
        visits += 1
    crawl_s = time.perf_counter() - t0
    calls1, usec1 = script_usec(client)
    visited = client.info("memory")["used_memory"]
    status = frontier.status()
    total = frontier.total_cash()
    frontier.clear()
    return {
        "pages": n,
        "request_bytes": len(sample),
        "stored_request_bytes": len(stored),
        "bytes_per_pending_page": (pending - before) / n,
        "bytes_per_visited_page": (visited - before) / n,
        "schedule_pages_per_s": n / schedule_s,
        "visits": visits,
        "links_per_visit": g.indices.size / n,
        "pop_visit_pages_per_s": visits / crawl_s,
        "redis_usec_per_pop_and_visit": (usec1 - usec0) / max(1, visits),
        "server_ceiling_pages_per_s": 1e6 / max(1e-9, (usec1 - usec0) / max(1, visits)),
        "visited": status["visited"],
        "total_cash": total,
    }


def scaling_report(args, rows: list[dict]) -> str:
    base = next(r for r in rows if r["store"] == "embedded")
    one = next((r for r in rows if r["store"] == "redis" and r["processes"] == 1), None)
    lines = [
        "# Redis store: scaling, round trips, memory",
        "",
        f"`python benchmarks/redis_perf.py --pages {args.pages} --delay {args.delay} "
        f"--concurrency {args.concurrency} --hosts {args.hosts} --processes "
        f"{','.join(map(str, args.processes))} --memory-pages "
        f"{','.join(map(str, args.memory_pages))}`",
        "",
        f"Site: {args.pages} generated pages on {args.hosts} loopback hosts, "
        f"{args.delay * 1000:.0f} ms per page at the server; each process: CONCURRENT_REQUESTS "
        f"= {args.concurrency}, and the fleet keeps CONCURRENT_REQUESTS_PER_DOMAIN = "
        f"{args.concurrency} per host for all its processes. Machine: "
        f"{os.cpu_count()} cores (the site, Redis and every Scrapy process share them).",
        "",
        "Pages/s over the whole crawl (first to last fetch) and in the steady state (the "
        "middle 80% of the fetches: the first are bounded by the site, one seed page to start "
        "from, the last by pages found late, whatever the number of processes).",
        "",
        "| store | processes | pages | fetches | seconds | pages/s | steady pages/s "
        "| steady vs embedded | steady vs 1 process | round trips/page | Redis script µs/page "
        "| Redis CPU µs/page | total cash |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        steady = r["steady_pages_per_s"]
        vs_one = (
            f"{steady / one['steady_pages_per_s']:.2f}×" if one and r["store"] != "embedded" else ""
        )
        lines.append(
            f"| {r['store']} | {r['processes']} | {r['pages']} | {r['fetches']} | "
            f"{r['seconds']:.1f} | {r['pages_per_s']:.1f} | {steady:.1f} | "
            f"{steady / base['steady_pages_per_s']:.2f}× | {vs_one} | "
            + (
                f"{r['round_trips_per_page']:.2f} | {r['redis_usec_per_page']:.0f} | "
                f"{r.get('redis_cpu_usec_per_page', float('nan')):.0f} | "
                f"{r['total_cash']:.12f} |"
                if r["store"] == "redis"
                else "| | | |"
            )
        )
    control = next((r for r in rows if r["store"] == "independent"), None)
    shared = next(
        (
            r
            for r in rows
            if r["store"] == "redis" and control and r["processes"] == control["processes"]
        ),
        None,
    )
    if control and shared:
        lines += [
            "",
            f"**{shared['processes']} processes sharing one Redis frontier: "
            f"{shared['steady_pages_per_s']:.1f} pages/s, "
            f"{shared['steady_pages_per_s'] / control['steady_pages_per_s']:.0%} of what "
            f"{control['processes']} independent processes fetch on this machine "
            f"({control['steady_pages_per_s']:.1f} pages/s; each crawls the whole site with "
            "its own embedded store, sharing nothing but the machine: its cores, the site "
            "server and Redis).**",
        ]
    redis_rows = [r for r in rows if r["store"] == "redis" and "redis_cpu_usec_per_page" in r]
    if redis_rows:
        # The fleet for 10,000 pages/s: processes at the rate one process reached here, and
        # Redis cores (one per shard) at the CPU a page cost the server in the largest run.
        big = max(redis_rows, key=lambda r: r["processes"])
        per_proc = one["steady_pages_per_s"] if one else big["steady_pages_per_s"]
        cpu = big["redis_cpu_usec_per_page"]
        lines += [
            "",
            f"**Projection to 10,000 pages/s:** {10_000 / per_proc:.0f} processes at the "
            f"{per_proc:.1f} pages/s one process reached here (its downloader bound: "
            f"{args.concurrency} requests of {args.delay * 1000:.0f} ms), and "
            f"{10_000 * cpu / 1e6:.1f} Redis cores at the {cpu:.0f} µs of server CPU a page "
            f"cost with {big['processes']} processes (one core per crawl today: one shard "
            f"serves about {1e6 / cpu:,.0f} pages/s).",
        ]
    lines += [
        "",
        "Fetches above pages would be pages fetched twice (none expected: no process dies "
        "here). Per process pages (visits): "
        + "; ".join(
            f"{r['processes']} processes: {r['per_process_pages']}"
            for r in rows
            if r["store"] == "redis"
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


MEMORY_HEADING = "## Memory and server time per URL"


def memory_report(args, mems: list[dict]) -> str:
    lines = [MEMORY_HEADING, ""]
    if args.memory_only:
        lines += [
            "`python benchmarks/redis_perf.py --memory-only --memory-pages "
            f"{','.join(map(str, args.memory_pages))}` (this part only: the scaling above is "
            "from the last full run)",
            "",
        ]
    for mem in mems:
        lines += [
            f"{mem['pages']:,} pages:",
            "",
            f"* pending page (with its request: {mem['request_bytes']} bytes as a pickled "
            f"dict, {mem.get('stored_request_bytes', mem['request_bytes'])} as stored): "
            f"**{mem['bytes_per_pending_page']:.0f} bytes** of Redis memory",
            f"* visited page (request deleted): **{mem['bytes_per_visited_page']:.0f} bytes**",
            f"* scheduling: {mem['schedule_pages_per_s']:,.0f} pages/s in batches of 1,000",
            f"* greedy pop + visit ({mem['links_per_visit']:.1f} links per page) from one "
            f"client: {mem['pop_visit_pages_per_s']:,.0f} pages/s; Redis time "
            f"{mem['redis_usec_per_pop_and_visit']:.0f} µs per page, so one Redis server "
            f"serves at most ~{mem['server_ceiling_pages_per_s']:,.0f} pages/s in all, "
            "whatever the number of processes",
            f"* {mem['visited']:,} pages visited, total cash {mem['total_cash']:.12f}",
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pages", type=int, default=2000)
    p.add_argument("--delay", type=float, default=0.1)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--processes", default="1,2,4,8")
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--memory-pages", default="50000", help="one size, or several: 50000,1000000")
    p.add_argument(
        "--memory-only", action="store_true", help="skip the crawls (keep their last results)"
    )
    p.add_argument("--redis", default=None, help="a running server (default: start one)")
    p.add_argument("--out", default=str(ROOT / "results"))
    args = p.parse_args(argv)
    args.processes = [int(x) for x in args.processes.split(",")]
    args.memory_pages = [int(x) for x in args.memory_pages.split(",")]
    out = Path(args.out)
    md, js = out / "redis_perf.md", out / "redis_perf.json"
    if args.memory_only:
        if not (md.exists() and js.exists()):
            p.error(f"--memory-only keeps the scaling results of a full run: none in {out}")
        scaling_md = md.read_text().split(MEMORY_HEADING)[0]
        rows = json.loads(js.read_text())["scaling"]
    workdir = Path(tempfile.mkdtemp(prefix="opic-redis-bench-"))
    server = None
    try:
        url = args.redis
        if url is None:
            server = RedisServer(str(workdir))
            url = server.__enter__()
        if not args.memory_only:
            rows = scaling(args, url, workdir)
            scaling_md = scaling_report(args, rows)
        mems = []
        for n in args.memory_pages:
            mems.append(memory(n, url))
            print(json.dumps(mems[-1]), flush=True)
        out.mkdir(parents=True, exist_ok=True)
        md.write_text(scaling_md.rstrip("\n") + "\n\n" + memory_report(args, mems))
        js.write_text(json.dumps({"scaling": rows, "memory": mems}, indent=1))
        print(md.read_text())
    finally:
        if server is not None:
            server.__exit__()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
