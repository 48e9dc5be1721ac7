"""The Redis store: a fleet of Scrapy processes against the same processes sharing nothing, and
what the crawl costs Redis (CPU and round trips per page, bytes per page).

    python benchmarks/redis_perf.py [--pages 4000] [--hosts 8] [--processes 4] [--delay 0.05]
        [--concurrency 4] [--memory-pages 1000000] [--cluster] [--skip-memory] [--out DIR]

**Fleet.** A generated site of ``--pages`` pages served by ``--hosts`` loopback hosts (127.0.0.1
to 127.0.0.N, one download slot each) with ``--delay`` seconds per page. ``--processes``
Scrapy processes crawl it as one Redis crawl, with ``--concurrency`` requests per host at once
for the whole fleet (a list: one run each). Two controls, as many processes crawling it each on
its own with the embedded store (sharing nothing: what this machine allows that many
processes): *control* with the fleet's per-host limit each (so N times the fleet's requests on
each host), *control-polite* with 1/N of it each (the fleet's politeness). Pages/s is counted
at the server, over the middle 80% of the fetches, with the machine's busy cores. Round trips
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test sites (tests/sites.py)

from tests.sites import RedisCluster, RedisServer, Site, site_graph  # noqa: E402

ROOT = Path(__file__).resolve().parent
RUNNER = ROOT.parent / "tests" / "crawl_runner.py"


def redis_cpu(client) -> float:
    """CPU seconds the server (every primary of a cluster) has used."""
    info = client.info("cpu")
    if "used_cpu_user" not in info:  # a cluster client: one entry per node
        return sum(float(n["used_cpu_user"]) + float(n["used_cpu_sys"]) for n in info.values())
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


class CoreMeter:
    """The machine's busy cores (``/proc/stat``), sampled every 0.2 s on the monotonic clock
    (the site's access log's) while in the ``with`` block."""

    def __enter__(self) -> CoreMeter:
        import threading

        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            with open("/proc/stat") as fh:
                ticks = [int(x) for x in fh.readline().split()[1:]]
            self.samples.append((time.monotonic(), sum(ticks), ticks[3] + ticks[4]))
            self._stop.wait(0.2)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def busy(self, start: float, end: float) -> float:
        import os

        inside = [x for x in self.samples if start <= x[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (_, total0, idle0), (_, total1, idle1) = inside[0], inside[-1]
        return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(1, total1 - total0))


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
    }
    client = None
    if kind == "redis":
        from scrapy_opic._backends.redis import open_client

        key = f"opic:bench:{uuid.uuid4().hex[:8]}"
        base.update(OPIC_STORE="redis", OPIC_REDIS_URL=url, OPIC_REDIS_KEY=key)
        client = open_client(url)
        cpu0 = redis_cpu(client)
    cores = CoreMeter()
    with Site(g, delay=args.delay, host_of=lambda i: hosts[i % len(hosts)], addresses=hosts) as s:
        with cores:
            stats = crawl(s.url(0), n, base, workdir / f"{kind}-{n}-{fleet_limit}", list(hosts))
        times = sorted(start for _h, _p, start, _e in s.access_log)
    lo, hi = int(0.1 * len(times)), int(0.9 * len(times))
    row = {
        "kind": kind,
        "processes": n,
        "per_host": fleet_limit,
        "fetches": len(times),
        "pages_per_s": (hi - lo) / (times[hi] - times[lo]),
        "cores_busy": cores.busy(times[lo], times[hi]),
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


def report(args, rows: list[dict], mems: list[dict]) -> str:
    lines = [
        "# Redis store: fleet, cost and memory",
        "",
        f"`{' '.join(['python benchmarks/redis_perf.py', *sys.argv[1:]])}`",
        "",
        f"{args.pages} pages on {args.hosts} hosts, {args.delay} s per page at the server, "
        f"{args.concurrency} requests per host at once for the fleet (column 'per host'); Redis: "
        f"{'a cluster of 3 masters' if args.cluster else 'one server'}; {os.cpu_count()} cores "
        "for everything (site, Redis, crawlers).",
        "",
        "*redis*: the processes share one crawl. *control*: as many processes sharing nothing,"
        " each crawling the whole site with the fleet's per-host limit (so the site takes N "
        "times the fleet's requests per host). *control-polite*: the same with 1/N of it each "
        "(the fleet's politeness). Pages/s over the middle 80% of the fetches, at the server; "
        "cores busy: the machine's, over the same span.",
        "",
        "| run | processes | per host | pages/s | vs control | vs control-polite "
        "| round trips/page | Redis CPU us/page | cores busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
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
            f"| {vs(r, 'control-polite')} | {trips} | {cpu} | {r['cores_busy']:.2f} |"
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
    p.add_argument("--skip-memory", action="store_true")
    p.add_argument("--out", default=str(ROOT / "results"))
    args = p.parse_args(argv)
    procs = [int(x) for x in args.processes.split(",")]
    hosts = [f"127.0.0.{k}" for k in range(1, args.hosts + 1)]
    g = site_graph(args.pages, seed=7)
    workdir = Path(tempfile.mkdtemp(prefix="opic-redis-bench-"))
    server = None
    if args.redis is None:
        server = RedisCluster(str(workdir / "c"), 3) if args.cluster else RedisServer(workdir)
    url = args.redis or server.__enter__()
    try:
        rows = []
        for per_host in (int(x) for x in str(args.concurrency).split(",")):
            for n in procs:
                for kind in ("redis", "control", "control-polite"):
                    rows.append(run(args, g, hosts, url, kind, n, per_host, workdir))
                    print(json.dumps(rows[-1]), flush=True)
        mems = []
        if not args.skip_memory and not args.cluster:
            for n in (int(x) for x in args.memory_pages.split(",")):
                mems.append(memory(n, url))
                print(json.dumps(mems[-1]), flush=True)
    finally:
        if server is not None:
            server.__exit__()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "redis_perf_cluster" if args.cluster else "redis_perf"
    (out / f"{stem}.json").write_text(json.dumps({"fleet": rows, "memory": mems}, indent=1))
    text = report(args, rows, mems)
    (out / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
