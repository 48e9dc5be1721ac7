"""The Redis store: crawl throughput of 1, 2, 4 and 8 Scrapy processes sharing one frontier,
Redis round trips per fetched page, Redis time per page, and Redis memory per URL.

    python benchmarks/redis_perf.py [--pages 2000] [--delay 0.1] [--concurrency 8] [--hosts 8]
        [--processes 1,2,4,8] [--shards 1[,3]] [--memory-pages 50000[,1000000...]]
        [--memory-only | --scaling-only] [--redis URL] [--out DIR]

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

**Shards.** ``--shards 1,3`` runs every number of processes once per partition count
(``OPIC_REDIS_SHARDS``). When one of them is above 1 (and no ``--redis`` is given), all the
Redis rows run on a Redis Cluster of 3 masters started on loopback (:class:`tests.sites.
RedisCluster`), the 1-shard rows too (an unsharded crawl lives on one node), and Redis CPU
(``INFO cpu``) and script time (``INFO commandstats``) are read on every master node: per page
in total and per node, with the partitions each node holds (``get_node_from_key``). The crawl
key of a sharded run is chosen so that its partitions land on distinct nodes (evenly when there
are more partitions than nodes), as an operator would have them; a crawl is partitioned by URL
host, so the site's loopback hosts are chosen among 127.0.0.1-254 so that each partition gets
its share of the hosts (127.0.0.1-8 would put 6 of 8 hosts in one of 3 partitions). The report
adds a section comparing the partition counts and a projection to 10,000 pages/s (processes
from one process's rate, shards from the busiest node's CPU per page, one core per shard).

**Memory.** ``--memory-pages`` pages are scheduled with a typical request (a ``scrapy.Request``
with a callback, encoded as the scheduler has the frontier store it), then crawled greedily on a
power-law graph through the frontier API; ``INFO memory`` ``used_memory`` is read before, when
all are pending, and when all are visited (the request is deleted at the visit). Several sizes
(``--memory-pages 50000,1000000``) run one after the other, each on a new crawl key of the same
server; the figures per page depend on the size, since Redis turns a sorted set or a hash from
its compact encoding into a hashtable past 128 entries. ``--memory-only`` runs only this part:
the report keeps the scaling section of the last full run in ``--out`` as it was, and says so;
``--scaling-only`` is the converse (the crawls only: the memory section and figures of the last
run are kept as they were).
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
    site_url: str,
    n_procs: int,
    settings: dict,
    workdir: Path,
    allowed: list[str],
    sampler: CpuSampler | None = None,
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
    if sampler is not None:
        sampler.start([proc.pid for proc, _, _ in procs])
    out = []
    for proc, log, d in procs:
        code = proc.wait(timeout=1800)
        log.close()
        if code != 0:
            raise RuntimeError(f"crawl process failed: {(d / 'crawl.log').read_text()[-2000:]}")
        out.append(json.loads((d / "stats.json").read_text()))
    if sampler is not None:
        sampler.stop()
    return out


class CpuSampler:
    """While a crawl runs, every ``interval`` seconds: the CPU seconds (user + system) used so
    far by its Scrapy processes (``/proc/<pid>/stat``), by this process (the site's server
    threads) and by the Redis servers (``INFO cpu``), so that the CPU of the steady state (the
    middle of the fetches) can be told from the processes' start and end."""

    def __init__(self, nodes: Nodes, interval: float = 0.2) -> None:
        self.nodes = nodes
        self.interval = interval
        self.samples: list[tuple[float, float, float, float]] = []
        self.tick = os.sysconf("SC_CLK_TCK")

    def start(self, pids: list[int]) -> None:
        import threading

        self.cpu = dict.fromkeys(pids, 0.0)  # (a process that ended keeps its last reading)
        self.done = threading.Event()
        self.sample()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        self.sample()

    def sample(self) -> None:
        for pid in self.cpu:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.cpu[pid] = (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
        redis_cpu_s = sum(redis_cpu(c) for c in self.nodes.servers)
        now = time.monotonic()
        self.samples.append((now, sum(self.cpu.values()), time.process_time(), redis_cpu_s))

    def between(self, t0: float, t1: float) -> tuple[float, float, float]:
        """CPU seconds of the processes, this process and Redis from ``t0`` to ``t1``
        (interpolated between the samples)."""
        import numpy as np

        ts = np.array([s[0] for s in self.samples])
        return tuple(
            float(np.interp(t1, ts, col) - np.interp(t0, ts, col))
            for col in (np.array([s[k] for s in self.samples]) for k in (1, 2, 3))
        )


class Nodes:
    """The Redis servers a crawl runs on: the one server, or every master of a Redis Cluster,
    each read apart (``INFO cpu`` and ``INFO commandstats`` are per server)."""

    def __init__(self, url: str) -> None:
        import redis

        from scrapy_opic.backends.redis import open_client

        self.url = url
        self.client = open_client(url)
        self.cluster = hasattr(self.client, "get_primaries")
        if self.cluster:
            primaries = sorted(self.client.get_primaries(), key=lambda n: n.port)
            self.names = [f"{n.host}:{n.port}" for n in primaries]
            self.servers = [redis.Redis(host=n.host, port=n.port) for n in primaries]
        else:
            self.names = ["server"]
            self.servers = [self.client]

    def node_of(self, tag: str) -> str:
        """The node that holds the keys of hash tag ``tag`` (``{...}``)."""
        if not self.cluster:
            return "server"
        node = self.client.get_node_from_key(tag)
        return f"{node.host}:{node.port}"

    def placement(self, key: str, shards: int) -> list[str]:
        """The node of each partition of the crawl ``key`` (its one namespace if unsharded)."""
        if shards == 1:
            return [self.node_of("{" + key + "}")]
        return [self.node_of("{" + f"{key}:{k}" + "}") for k in range(shards)]

    def crawl_key(self, shards: int) -> str:
        """A fresh crawl key; a sharded crawl's partitions on distinct nodes (as evenly as the
        nodes allow), as an operator would place them."""
        most = -(-shards // len(self.names))  # partitions per node, evenly spread
        for _ in range(100_000):
            key = f"opic:bench:{uuid.uuid4().hex}"
            nodes = self.placement(key, shards)
            if shards == 1 or max(nodes.count(n) for n in set(nodes)) <= most:
                return key
        raise RuntimeError(f"no crawl key puts {shards} partitions on distinct nodes")

    def read(self) -> list[tuple[int, float, float]]:
        """Per node: script calls, microseconds in scripts, CPU seconds (user + system)."""
        return [(*script_usec(c), redis_cpu(c)) for c in self.servers]

    def close(self) -> None:
        for c in self.servers:
            c.close()
        if self.cluster:
            self.client.close()


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have ended."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench_hosts(n_hosts: int, shards: list[int]) -> tuple[str, ...]:
    """The site's loopback hosts: 127.0.0.1, .2, ... unless a crawl runs on several partitions,
    then the first addresses that give each partition of the largest count its share of hosts
    (a crawl is partitioned by host: with a few hosts, consecutive addresses may put most of the
    site in one partition)."""
    parts = max(shards)
    if parts == 1:
        return tuple(f"127.0.0.{k + 1}" for k in range(n_hosts))
    from scrapy_opic.backends.sharded import partition_of

    quota = [n_hosts // parts + (k < n_hosts % parts) for k in range(parts)]
    hosts = []
    for x in range(1, 255):
        k = partition_of(f"http://127.0.0.{x}/", parts)
        if quota[k]:
            quota[k] -= 1
            hosts.append(f"127.0.0.{x}")
            if len(hosts) == n_hosts:
                return tuple(hosts)
    raise RuntimeError(f"no {n_hosts} loopback hosts spread over {parts} partitions")


def cross_links(g, hosts: tuple[str, ...], parts: int) -> float:
    """The share of the site's links (between distinct pages) that go to another partition."""
    import numpy as np

    from scrapy_opic.backends.sharded import partition_of

    host_part = np.array([partition_of(f"http://{h}/", parts) for h in hosts])
    part = host_part[np.arange(g.n) % len(hosts)]  # page i is on hosts[i % len(hosts)]
    src, dst = g.sources(), g.indices
    keep = src != dst
    return float((part[src[keep]] != part[dst[keep]]).mean())


def scaling(args, redis_url: str, workdir: Path, cluster_url: str | None = None):
    """The crawls: the embedded baseline, N processes on one crawl for each partition count
    (on ``cluster_url`` if given, else on ``redis_url``), the control. Returns the rows and
    what the report says of the servers (``None`` for one plain server and one partition)."""
    from tests.sites import site_graph

    nodes = Nodes(cluster_url or redis_url)
    g = site_graph(args.pages, seed=7)
    hosts = bench_hosts(args.hosts, args.shards)
    base = {
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
        "LOG_LEVEL": "WARNING",
        "LOGSTATS_INTERVAL": 0,
    }
    sharded = max(args.shards) > 1 or nodes.cluster
    info = None
    if sharded:
        from scrapy_opic.backends.sharded import partition_of

        info = {
            "cluster": nodes.cluster,
            "nodes": nodes.names,
            "hosts": list(hosts),
            "host_partitions": {
                str(p): [partition_of(f"http://{h}/", p) for h in hosts] for p in args.shards
            },
            "cross_partition_links": {str(p): cross_links(g, hosts, p) for p in args.shards},
        }
    rows = []
    # The control: as many independent processes as the largest shared run, each crawling
    # the whole site with its own embedded store. It shares nothing, so its throughput is what
    # this machine (cores, site server) allows that many processes.
    runs = [("embedded", 1, 1)]
    runs += [("redis", n, p) for p in args.shards for n in args.processes]
    runs.append(("independent", max(args.processes), 1))
    try:
        for kind, n_procs, shards in runs:
            rows.append(
                one_run(args, g, hosts, base, nodes, workdir, kind, n_procs, shards, sharded)
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        nodes.close()
    if info is not None:
        # What the servers burn when no crawl uses them (their cron, the cluster's gossip), as
        # read during the runs that do not touch Redis.
        idle = [r for r in rows if r["store"] != "redis"]
        seconds = sum(r["wall_seconds"] for r in idle)
        info["idle_cpu_usec_per_s"] = {
            name: sum(r["node_cpu_seconds"][i] for r in idle) * 1e6 / seconds
            for i, name in enumerate(nodes.names)
        }
    return rows, info


def one_run(args, g, hosts, base, nodes, workdir, kind, n_procs, shards, sharded) -> dict:
    from tests.sites import Site

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
        key = nodes.crawl_key(shards) if kind == "redis" else f"opic:bench:{uuid.uuid4().hex}"
        if kind == "redis":
            settings.update(
                {"OPIC_STORE": "redis", "OPIC_REDIS_URL": nodes.url, "OPIC_REDIS_KEY": key}
            )
            if shards > 1:
                settings["OPIC_REDIS_SHARDS"] = shards
        name = f"{kind}-{n_procs}" + (f"-s{shards}" if kind == "redis" and sharded else "")
        before = nodes.read()
        wall0, own0, kids0 = time.monotonic(), time.process_time(), children_cpu()
        sampler = CpuSampler(nodes)
        stats = crawl(site.url(0), n_procs, settings, workdir / name, list(hosts), sampler)
        wall = time.monotonic() - wall0
        own, kids = time.process_time() - own0, children_cpu() - kids0
        after = nodes.read()
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
    # The machine's CPU per page: the Scrapy processes' (user + system, all of them), and this
    # process's (the site's server threads, mostly).
    row["process_cpu_ms_per_page"] = kids * 1e3 / max(1, hits)
    row["site_cpu_ms_per_page"] = own * 1e3 / max(1, hits)
    # The same in the steady state (the middle 80% of the fetches: no start-up, no end), with
    # Redis's, and the share of the machine's cores they kept busy.
    procs_s, own_s, redis_s = sampler.between(times[lo], times[hi])
    fetched = max(1, hi - lo)
    row["steady_cpu_ms_per_page"] = {
        "processes": procs_s * 1e3 / fetched,
        "site": own_s * 1e3 / fetched,
        "redis": redis_s * 1e3 / fetched,
    }
    row["steady_cores_busy"] = (procs_s + own_s + redis_s) / (times[hi] - times[lo])
    calls = [a[0] - b[0] for a, b in zip(after, before)]
    usec = [a[1] - b[1] for a, b in zip(after, before)]
    cpu = [a[2] - b[2] for a, b in zip(after, before)]
    if sharded and kind != "redis":
        row["wall_seconds"] = wall
        row["node_cpu_seconds"] = cpu
    if kind == "redis":
        trips = sum(s.get("opic/round_trips", 0) for s in stats)
        row.update(
            {
                "round_trips": trips,
                "round_trips_per_page": trips / max(1, hits),
                "script_calls": sum(calls),
                "redis_usec_per_page": sum(usec) / max(1, hits),
                # (All of the servers' CPU: scripts, other commands, the network.)
                "redis_cpu_usec_per_page": sum(cpu) * 1e6 / max(1, hits),
                "per_process_pages": [s.get("opic/visits", 0) for s in stats],
            }
        )
        from scrapy_opic.backends.sharded import connect_crawl

        frontier = connect_crawl(nodes.url, key)
        try:
            if sharded:
                placed = nodes.placement(key, shards)
                home = nodes.node_of("{" + key + "}")
                row.update(
                    {
                        "shards": shards,
                        "key": key,
                        "partition_nodes": placed,
                        "records_node": home,
                        "partition_pages": (
                            [int(p.globals()["visits"]) for p in frontier.parts]
                            if shards > 1
                            else [row["visits"]]
                        ),
                        "nodes": [
                            {
                                "node": node,
                                "partitions": [k for k, n in enumerate(placed) if n == node],
                                "records": node == home,
                                "script_calls": calls[i],
                                "script_usec_per_page": usec[i] / max(1, hits),
                                "cpu_usec_per_page": cpu[i] * 1e6 / max(1, hits),
                            }
                            for i, node in enumerate(nodes.names)
                        ],
                    }
                )
                shard_cpu = [n["cpu_usec_per_page"] for n in row["nodes"] if n["partitions"]]
                row["busiest_shard_cpu_usec_per_page"] = max(shard_cpu)
            row["total_cash"] = frontier.total_cash()
            row["problems"] = frontier.check()
            frontier.clear()
        finally:
            frontier.client.close()
    return row


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


def command(args) -> str:
    """The command line of this run, as the report shows it."""
    parts = [
        f"python benchmarks/redis_perf.py --pages {args.pages} --delay {args.delay}",
        f"--concurrency {args.concurrency} --hosts {args.hosts}",
        f"--processes {','.join(map(str, args.processes))}",
    ]
    if args.shards != [1]:
        parts.append(f"--shards {','.join(map(str, args.shards))}")
    if args.scaling_only:
        parts.append("--scaling-only")
    else:
        parts.append(f"--memory-pages {','.join(map(str, args.memory_pages))}")
    return " ".join(parts)


def label(r: dict, info: dict | None) -> str:
    """A row's store, with its partition count when the run compares them."""
    if r["store"] != "redis" or info is None:
        return r["store"]
    where = " (cluster)" if info["cluster"] else ""
    return f"redis{where}, {r['shards']} shard{'s' if r['shards'] > 1 else ''}"


def scaling_report(args, rows: list[dict], info: dict | None = None) -> str:
    base = next(r for r in rows if r["store"] == "embedded")
    redis_rows = [r for r in rows if r["store"] == "redis"]

    def first(r: dict) -> dict | None:
        """The 1-process row of the same partition count as ``r``."""
        return next(
            (o for o in redis_rows if o["processes"] == 1 and o.get("shards") == r.get("shards")),
            None,
        )

    one = next((r for r in redis_rows if r["processes"] == 1 and r.get("shards", 1) == 1), None)
    lines = [
        "# Redis store: scaling, round trips, memory",
        "",
        f"`{command(args)}`",
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
    ]
    if info is not None:
        lines += [
            "The Redis rows ran on "
            + (
                f"a Redis Cluster of {len(info['nodes'])} masters (see "
                "[Shards](#shards-one-crawl-over-several-redis-partitions) below)"
                if info["cluster"]
                else "one redis-server"
            )
            + f", once per partition count (OPIC_REDIS_SHARDS = "
            f"{', '.join(map(str, args.shards))}); 'vs 1 process' is against the 1-process "
            "row of the same partition count, and the Redis figures are summed over all the "
            "nodes.",
            "",
        ]
    lines += [
        "| store | processes | pages | fetches | seconds | pages/s | steady pages/s "
        "| steady vs embedded | steady vs 1 process | round trips/page | Redis script µs/page "
        "| Redis CPU µs/page | total cash |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        steady = r["steady_pages_per_s"]
        ref = first(r) if r["store"] == "redis" else one
        vs_one = (
            f"{steady / ref['steady_pages_per_s']:.2f}×" if ref and r["store"] != "embedded" else ""
        )
        lines.append(
            f"| {label(r, info)} | {r['processes']} | {r['pages']} | {r['fetches']} | "
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
    shared = [r for r in redis_rows if control and r["processes"] == control["processes"]]
    for r in shared:
        what = "one Redis frontier" if info is None else f"one crawl on {label(r, info)}"
        lines += [
            "",
            f"**{r['processes']} processes sharing {what}: "
            f"{r['steady_pages_per_s']:.1f} pages/s, "
            f"{r['steady_pages_per_s'] / control['steady_pages_per_s']:.0%} of what "
            f"{control['processes']} independent processes fetch on this machine "
            f"({control['steady_pages_per_s']:.1f} pages/s; each crawls the whole site with "
            "its own embedded store, sharing nothing but the machine: its cores, the site "
            "server and Redis).**",
        ]
    unsharded = [
        r for r in redis_rows if "redis_cpu_usec_per_page" in r and r.get("shards", 1) == 1
    ]
    if unsharded:
        # The fleet for 10,000 pages/s: processes at the rate one process reached here, and
        # Redis cores at the CPU a page cost the server in the largest run.
        big = max(unsharded, key=lambda r: r["processes"])
        per_proc = (one or big)["steady_pages_per_s"] / (one or big)["processes"]
        cpu = big["redis_cpu_usec_per_page"]
        lines += [
            "",
            f"**Projection to 10,000 pages/s:** {10_000 / per_proc:.0f} processes at the "
            f"{per_proc:.1f} pages/s one process reached here (its downloader bound: "
            f"{args.concurrency} requests of {args.delay * 1000:.0f} ms), and "
            f"{10_000 * cpu / 1e6:.1f} Redis cores at the {cpu:.0f} µs of server CPU a page "
            f"cost with {big['processes']} processes on one partition (an unsharded crawl has "
            f"one core: it serves about {1e6 / cpu:,.0f} pages/s"
            + (
                "; the shards below spread it over several)."
                if info is not None and max(args.shards) > 1
                else "; OPIC_REDIS_SHARDS spreads a crawl over several)."
            ),
        ]
    lines += [
        "",
        "Fetches above pages would be pages fetched twice (none expected: no process dies "
        "here). Per process pages (visits): "
        + "; ".join(
            f"{r['processes']} processes"
            + (f", {r['shards']} shard{'s' if r['shards'] > 1 else ''}" if info else "")
            + f": {r['per_process_pages']}"
            for r in redis_rows
        )
        + ".",
    ]
    if info is not None:
        lines += ["", shards_report(args, rows, info).rstrip("\n")]
    return "\n".join(lines) + "\n"


SHARDS_HEADING = "## Shards: one crawl over several Redis partitions"


def shards_report(args, rows: list[dict], info: dict) -> str:
    """The comparison of partition counts: per node CPU, round trips, the fleet's projection."""
    names = info["nodes"]
    letter = {name: chr(ord("A") + i) for i, name in enumerate(names)}
    redis_rows = [r for r in rows if r["store"] == "redis"]
    counts = sorted({r["shards"] for r in redis_rows})
    lines = [SHARDS_HEADING, ""]
    if info["cluster"]:
        lines += [
            f"A Redis Cluster of {len(names)} masters on loopback (`tests.sites.RedisCluster`: "
            "no replicas, no persistence), nodes "
            + ", ".join(f"{letter[n]} = {n}" for n in names)
            + f", on the same {os.cpu_count()} cores as the site and the Scrapy processes. "
            "Every Redis row ran on it: an unsharded crawl lives on one node (the one of its "
            "hash tag `{key}`), partition k of a sharded crawl under the tag `{key:k}`. The "
            "crawl key of each sharded run was drawn so that its partitions land on distinct "
            "nodes (what an operator wants; a random key may put two partitions on one node, "
            "where they share its core); the crawl's records (`{key}`: metadata, series, "
            "processes) then share a node with one partition. Redis CPU (`INFO cpu`, user + "
            "system) and script time (`INFO commandstats`, evalsha + eval) were read on every "
            "master before and after each run.",
            "",
        ]
    else:
        lines += [
            "All the partitions ran on one redis-server (no cluster): the per node figures are "
            "that server's.",
            "",
        ]
    for p in counts:
        if p == 1:
            continue
        parts = info["host_partitions"][str(p)]
        per = [parts.count(k) for k in range(p)]
        lines += [
            f"Partitions are by URL host. With {p} partitions the site's {len(parts)} hosts "
            f"({', '.join(info['hosts'])}) fall in partitions {parts}: "
            f"{' / '.join(map(str, per))} hosts each (the addresses were chosen among "
            "127.0.0.1-254 for that; 127.0.0.1-8 would give one partition 6 of the 8). The "
            "generated site spreads its pages over the hosts in turn, so its links go to "
            f"other hosts at random: {info['cross_partition_links'][str(p)]:.0%} of its links "
            "cross partitions, each paid through an outbox entry applied on its partition. "
            "That is far more than on the web, where most links stay on their host: this "
            "site is a hard case for sharding.",
            "",
        ]
    lines += [
        "Per node: Redis CPU µs per page of the crawl on each node, with the partitions it "
        "holds (p0, p1...: partitions; `crawl`: an unsharded crawl; `rec`: the sharded crawl's "
        "records). The busiest shard is the node with a partition that spent most; its "
        "ceiling, the fleet's pages/s at which its core would be full.",
        "",
        "| shards | processes | steady pages/s | vs 1 process | vs 1 shard | round trips/page "
        "| script calls/page | Redis script µs/page | Redis CPU µs/page, all nodes "
        "| CPU µs/page per node | busiest shard µs/page | its ceiling pages/s "
        "| pages per partition | total cash |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in redis_rows:
        one = next(
            (o for o in redis_rows if o["shards"] == r["shards"] and o["processes"] == 1), None
        )
        flat = next(
            (o for o in redis_rows if o["shards"] == 1 and o["processes"] == r["processes"]),
            None,
        )
        cells = []
        for n in r["nodes"]:
            held = [f"p{k}" for k in n["partitions"]] if r["shards"] > 1 else []
            if r["shards"] == 1 and n["partitions"]:
                held = ["crawl"]
            if n["records"] and r["shards"] > 1:
                held.append("rec")
            tag = f" [{', '.join(held)}]" if held else ""
            cells.append(f"{letter[n['node']]} {n['cpu_usec_per_page']:.0f}{tag}")
        busiest = r["busiest_shard_cpu_usec_per_page"]
        steady = r["steady_pages_per_s"]
        lines.append(
            f"| {r['shards']} | {r['processes']} | {steady:.1f} | "
            f"{steady / one['steady_pages_per_s']:.2f}× | "
            + (f"{steady / flat['steady_pages_per_s']:.2f}× | " if flat else " | ")
            + f"{r['round_trips_per_page']:.2f} | "
            f"{r['script_calls'] / max(1, r['fetches']):.2f} | "
            f"{r['redis_usec_per_page']:.0f} | {r['redis_cpu_usec_per_page']:.0f} | "
            f"{' · '.join(cells)} | {busiest:.0f} | "
            f"{1e6 / busiest:,.0f} | {r['partition_pages']} | {r['total_cash']:.12f} |"
        )
    idle = info.get("idle_cpu_usec_per_s")
    if idle:
        lines += [
            "",
            "Idle servers: while the baseline and the control ran (no Redis traffic) the nodes "
            "spent "
            + ", ".join(f"{letter[n]} {v:,.0f}" for n, v in idle.items())
            + " µs of CPU per second (their cron"
            + (", the cluster's gossip" if info["cluster"] else "")
            + "); the figures above include that share of each run.",
        ]
    # Round trips: a page costs a pop, a visit, and one pipelined apply when its links reach
    # other partitions.
    lines += [""]
    for p in counts:
        trips = [r["round_trips_per_page"] for r in redis_rows if r["shards"] == p]
        over = [r for r in redis_rows if r["shards"] == p and r["round_trips_per_page"] > 3]
        lines.append(
            f"* Round trips per page, {p} shard{'s' if p > 1 else ''}: "
            f"{min(trips):.2f}-{max(trips):.2f}"
            + (
                " (**above 3** with "
                + ", ".join(
                    f"{r['processes']} process{'es' if r['processes'] > 1 else ''}"
                    f" ({r['round_trips_per_page']:.2f})"
                    for r in over
                )
                + ": measured as is; each process's own count of the commands and pipelines "
                "it sent, its start, upkeep and end included)."
                if over
                else " (at most 3"
                + (
                    ": a pop, a visit, and one pipelined apply when the page's links reach "
                    "other partitions)."
                    if p > 1
                    else ")."
                )
            )
        )
    cores = os.cpu_count() or 1
    timed = [r for r in rows if "steady_cpu_ms_per_page" in r]
    if timed:
        lines += [
            "",
            f"The machine's CPU in the steady state (the middle 80% of the fetches), per page: "
            "the Scrapy processes' (`/proc/<pid>/stat`, user + system), this benchmark's "
            "process (the site's server threads) and Redis's (all nodes), sampled every 0.2 s; "
            f"and how many of the {cores} cores they kept busy (the machine is shared: other "
            "programs' load is not counted, and may have slowed a run).",
            "",
            "| run | processes | steady pages/s | Scrapy processes ms/page | site ms/page "
            "| Redis ms/page | cores busy |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in timed:
            c = r["steady_cpu_ms_per_page"]
            lines.append(
                f"| {label(r, info)} | {r['processes']} | {r['steady_pages_per_s']:.1f} | "
                f"{c['processes']:.2f} | {c['site']:.2f} | {c['redis']:.2f} | "
                f"{r['steady_cores_busy']:.2f} |"
            )
    sharded = [r for r in redis_rows if r["shards"] > 1]
    control = next((r for r in rows if r["store"] == "independent"), None)
    if sharded:
        p = max(r["shards"] for r in sharded)
        rows_p = [r for r in sharded if r["shards"] == p]
        big = max(rows_p, key=lambda r: r["processes"])
        one = next((r for r in rows_p if r["processes"] == 1), big)
        per_proc = one["steady_pages_per_s"] / one["processes"]
        big_per_proc = big["steady_pages_per_s"] / big["processes"]
        total = big["redis_cpu_usec_per_page"]
        span = [r["redis_cpu_usec_per_page"] for r in rows_p]
        busiest = big["busiest_shard_cpu_usec_per_page"]
        held = [n for n in big["nodes"] if n["partitions"]]
        even = total / len(held)  # each node's share if the work were spread evenly
        flat = next(
            (r for r in redis_rows if r["shards"] == 1 and r["processes"] == big["processes"]),
            None,
        )
        need_even = 10_000 * total / 1e6
        need_here = 10_000 * busiest * len(held) / 1e6
        text = (
            "**Projection to 10,000 pages/s.** Processes: "
            f"**{10_000 / per_proc:.0f}**, at the {per_proc:.1f} pages/s one process reached "
            f"on {p} shards (its downloader's bound: {args.concurrency} requests of "
            f"{args.delay * 1000:.0f} ms). Shards, at one core each: with "
            f"{big['processes']} processes on {p} shards a page cost {total:.0f} µs of Redis "
            f"CPU in all ({min(span):.0f}-{max(span):.0f} over "
            f"{', '.join(str(r['processes']) for r in rows_p)} processes"
            + (f"; {flat['redis_cpu_usec_per_page']:.0f} on one shard" if flat else "")
            + f"), {busiest:.0f} µs on the busiest shard ({busiest / even:.2f}× an even "
            f"share); 10,000 pages/s needs {need_even:.1f} cores' worth, so "
            f"**{max(p, int(-(-need_even // 1)))} shards if the partitions share the work "
            f"evenly, {int(-(-need_here // 1))} if they stay as uneven as here** (each core "
            "full: leave headroom; and this site sends most links across partitions, see "
            "above)."
        )
        if flat:
            text += (
                f" One unsharded crawl's core serves about "
                f"{1e6 / flat['redis_cpu_usec_per_page']:,.0f} pages/s."
            )
        if control:
            text += (
                f" On this machine the control bounds what can be shown: {big['processes']} "
                f"processes sharing nothing fetched {control['steady_pages_per_s']:.1f} "
                f"pages/s, {big['processes']} on {p} shards {big['steady_pages_per_s']:.1f} "
                f"({big_per_proc:.1f} each)"
                + (f" and on one shard {flat['steady_pages_per_s']:.1f}" if flat else "")
                + (
                    f", far below the busiest shard's ceiling ({1e6 / busiest:,.0f} pages/s)"
                    if 1e6 / busiest > 2 * big["steady_pages_per_s"]
                    else f", near the busiest shard's ceiling ({1e6 / busiest:,.0f} pages/s)"
                )
            )
            if "steady_cpu_ms_per_page" in big and "steady_cpu_ms_per_page" in control:
                mine, theirs = big["steady_cpu_ms_per_page"], control["steady_cpu_ms_per_page"]
                text += (
                    f"; the {cores} cores were {big['steady_cores_busy']:.2f} busy "
                    f"({control['steady_cores_busy']:.2f} for the control), the Scrapy "
                    f"processes spending {mine['processes']:.1f} ms per page on {p} shards "
                    f"against {theirs['processes']:.1f} in the control"
                )
            text += "."
        lines += ["", text]
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
    p.add_argument(
        "--shards",
        default="1",
        help="partition counts (OPIC_REDIS_SHARDS), e.g. 1,3: above 1, on a Redis Cluster",
    )
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--memory-pages", default="50000", help="one size, or several: 50000,1000000")
    only = p.add_mutually_exclusive_group()
    only.add_argument(
        "--memory-only", action="store_true", help="skip the crawls (keep their last results)"
    )
    only.add_argument(
        "--scaling-only",
        action="store_true",
        help="skip the memory part (keep its last results)",
    )
    p.add_argument(
        "--redis",
        default=None,
        help="a running server or cluster node (default: start one, or a cluster for --shards)",
    )
    p.add_argument("--out", default=str(ROOT / "results"))
    args = p.parse_args(argv)
    args.processes = [int(x) for x in args.processes.split(",")]
    args.shards = [int(x) for x in args.shards.split(",")]
    args.memory_pages = [int(x) for x in args.memory_pages.split(",")]
    if min(args.shards) < 1:
        p.error("--shards: partition counts are 1 or more")
    out = Path(args.out)
    md, js = out / "redis_perf.md", out / "redis_perf.json"
    kept: dict = {}
    if args.memory_only or args.scaling_only:
        if not (md.exists() and js.exists()):
            which = "scaling" if args.memory_only else "memory"
            p.error(f"--{'memory' if args.memory_only else 'scaling'}-only keeps the {which} "
                    f"results of a full run: none in {out}")  # fmt: skip
        kept = json.loads(js.read_text())
    if args.memory_only:
        scaling_md = md.read_text().split(MEMORY_HEADING)[0]
        rows = kept["scaling"]
    if args.scaling_only:
        text = md.read_text()
        memory_md = (
            MEMORY_HEADING + text.split(MEMORY_HEADING, 1)[1] if MEMORY_HEADING in text else ""
        )
        mems = kept.get("memory", [])
    on_cluster = max(args.shards) > 1 and args.redis is None
    workdir = Path(tempfile.mkdtemp(prefix="opic-redis-bench-"))
    server = cluster = None
    try:
        url = args.redis
        if url is None and not (args.scaling_only and on_cluster):
            server = RedisServer(str(workdir))
            url = server.__enter__()
        elif url is not None and not args.scaling_only:
            nodes = Nodes(url)
            nodes.close()
            if nodes.cluster:
                p.error("--redis: the memory part needs a plain server (or --scaling-only)")
        cluster_url = None
        if on_cluster and not args.memory_only:
            from tests.sites import RedisCluster

            cluster = RedisCluster(str(workdir / "cluster"), masters=3)
            cluster_url = cluster.__enter__()
        if not args.memory_only:
            rows, info = scaling(args, url or cluster_url, workdir, cluster_url)
            scaling_md = scaling_report(args, rows, info)
        else:
            info = kept.get("shards")
        if not args.scaling_only:
            mems = []
            for n in args.memory_pages:
                mems.append(memory(n, url))
                print(json.dumps(mems[-1]), flush=True)
            memory_md = memory_report(args, mems)
        out.mkdir(parents=True, exist_ok=True)
        md.write_text(scaling_md.rstrip("\n") + "\n\n" + memory_md)
        results = {"scaling": rows, "memory": mems}
        if info is not None:
            results["shards"] = info
        js.write_text(json.dumps(results, indent=1))
        print(md.read_text())
    finally:
        if cluster is not None:
            cluster.__exit__()
        if server is not None:
            server.__exit__()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
