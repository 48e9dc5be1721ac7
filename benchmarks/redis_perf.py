"""The Redis store: a fleet of Scrapy processes against the same processes sharing nothing, and
what the crawl costs Redis (CPU and round trips per page, bytes per page).

    python -m benchmarks.redis_perf [--pages 4000] [--hosts 8] [--processes 4] [--delay 0.05]
        [--concurrency 4] [--repeat 3] [--memory-pages 1000000] [--redis URL] [--out DIR]

**Fleet.** A generated site on ``--hosts`` loopback hosts, ``--delay`` s per page. *redis*:
``--processes`` processes crawl as one Redis crawl a site of that many times ``--pages`` pages
(each fetches as many as a control process), ``--concurrency`` requests per host at once for
the fleet. *control*: as many processes each crawling a ``--pages`` site alone (embedded
store) with the fleet's per-host limit, so N times the fleet's requests per host;
*control-polite*: with 1/N of it each. Pages/s at the server over the middle 80% of the
fetches, the machine's busy cores over that span, the crawls' CPU (first response to close),
their round trips (``opic/round_trips``) and Redis's CPU (``INFO cpu``) per page fetched.
Medians of ``--repeat`` runs of each kind, alternated so that the machine's drift hits all.

**Memory.** ``--memory-pages`` pages on 1,000 hosts, each scheduled with a typical request
(a ``scrapy.Request`` with a callback, encoded as the scheduler does), then all visited on a
power-law graph: Redis's ``used_memory`` per page when all are pending and when all are
visited, each after its process closed.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

from scrapy import Request, Spider

from benchmarks._harness import RESULTS, CoreMeter, page, table, write_results
from benchmarks.crawl_evidence import crawl
from scrapy_opic._backends.redis import RedisStore, open_client
from scrapy_opic._backends.redis_state import RedisSnapshot
from scrapy_opic._requests import encode_request
from scrapy_opic._state import open_crawl
from scrapy_opic.opic.config import CrawlConfig
from scrapy_opic.opic.contract import Entry, Link
from scrapy_opic.opic.graph import power_law_graph
from tests.support.sites import RedisServer, Site, site_graph

KINDS = ("redis", "control", "control-polite")


def redis_cpu(client) -> float:
    """CPU seconds the server has used."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(args, hosts: list[str], url: str, kind: str, n: int, per_host: int, wd: Path) -> dict:
    """One run of ``kind`` with ``n`` processes; ``per_host``: the fleet's requests per host."""
    limit = max(1, per_host // n) if kind == "control-polite" else per_host
    settings = {"CONCURRENT_REQUESTS": limit * args.hosts, "CONCURRENT_REQUESTS_PER_DOMAIN": limit}
    settings |= {"LOGSTATS_INTERVAL": 0, "EXTENSIONS": {"tests.support.crawl_runner.CpuMeter": 0}}
    if kind == "redis":
        key = f"opic:bench:{uuid.uuid4().hex[:8]}"
        settings |= {"OPIC_STORE": "redis", "OPIC_REDIS_URL": url, "OPIC_REDIS_KEY": key}
        settings["ADDONS"] = {"scrapy_opic.Addon": 0}  # (its download handlers, as users run it)
        client = open_client(url)
        cpu0 = redis_cpu(client)
    graph = site_graph(args.pages * (n if kind == "redis" else 1), seed=7)
    site = Site(graph, delay=args.delay, host_of=lambda i: hosts[i % len(hosts)], addresses=hosts)
    with site, CoreMeter() as cores, ThreadPoolExecutor(n) as pool:
        runs = [wd / f"{kind}-{n}-{per_host}-{k}" for k in range(n)]  # started together
        kw = {"spider": "site", "allowed": hosts, **settings}
        stats = list(pool.map(lambda d: crawl(site.url(0), "opic", d, **kw)[1], runs))
    times = sorted(start for _host, _path, start, _end in site.access_log)
    lo, hi = int(0.1 * len(times)), int(0.9 * len(times))
    row = {"kind": kind, "processes": n, "per_host": per_host, "fetches": len(times)}
    row |= {
        "pages_per_s": (hi - lo) / (times[hi] - times[lo]),
        "cores_busy": cores.busy(times[lo], times[hi]),
        "crawl_cpu_ms_per_page": sum(st["cpu/crawl_seconds"] for st in stats) * 1e3 / len(times),
    }
    if kind == "redis":
        row |= {
            "round_trips_per_page": sum(st.get("opic/round_trips", 0) for st in stats) / len(times),
            "redis_cpu_usec_per_page": (redis_cpu(client) - cpu0) * 1e6 / len(times),
            "total_cash": RedisSnapshot(client, key).total_cash(),
        }
        RedisStore(client, key).clear()
        client.close()
    return row


class Bench(Spider):
    """The spider of the requests stored: a typical request has one of its methods as callback."""

    name = "bench"

    def parse(self, response):
        pass


def memory(n: int, url: str) -> dict:
    """Bytes of Redis per pending and per visited page of an ``n``-page crawl."""
    spider, key = Bench(), f"opic:mem{uuid.uuid4().hex[:4]}"  # (a realistic key length)
    client, g = open_client(url), power_law_graph(n, seed=3)
    url_of = "https://www.example-site-{0}.org/section/{1}/page-{2}.html".format
    urls = [url_of(k % 1000, k % 37, k) for k in range(n)]
    fps = [hashlib.sha1(u.encode()).digest() for u in urls]
    node, visits = {fp: k for k, fp in enumerate(fps)}, 0
    used = [client.info("memory")["used_memory"]]
    for step in ("schedule", "visit"):  # each by a frontier of its own, closed as a process is
        store = RedisStore.connect(url, key)
        encode = lambda r, u: encode_request(r, spider, u)  # noqa: E731
        f = open_crawl(store, CrawlConfig(partitions=256), {}, key, encode=encode)
        if step == "schedule":
            for lo in range(0, n, 1000):
                batch = [(fps[k], urls[k]) for k in range(lo, min(n, lo + 1000))]
                f.schedule(
                    [Entry(fp, u, 0, u.split("/")[2], Request(u, spider.parse)) for fp, u in batch]
                )
                f.maintain([])
        else:
            while (lease := f.pop()) is not None:
                f.visit(lease, [Link(fps[j], urls[j]) for j in g.children(node[lease.key])])
                visits += 1
                if visits % 1000 == 0:
                    f.maintain([])
        f.close([])
        used.append(client.info("memory")["used_memory"])
    RedisStore(client, key).clear()
    client.close()
    pending, visited = ((m - used[0]) / n for m in used[1:])
    out = {"pages": n, "visits": visits}
    return out | {"bytes_per_pending_page": pending, "bytes_per_visited_page": visited}


def render(rows: list[dict], mems: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["processes"], r["per_host"], r["kind"]), []).append(r)
    med = {  # the median of each figure over the runs of a kind
        g: {
            k: statistics.median(r[k] for r in runs) for k, v in runs[0].items() if type(v) is float
        }
        for g, runs in groups.items()
    }
    fleet = []
    for (n, per_host, kind), m in med.items():
        rate = m["pages_per_s"]
        vs = [rate / med[n, per_host, c]["pages_per_s"] if c != kind else None for c in KINDS[1:]]
        costs = [m.get("round_trips_per_page"), m.get("redis_cpu_usec_per_page")]
        fleet.append(
            [kind, n, per_host, rate, *vs, *costs, m["crawl_cpu_ms_per_page"], m["cores_busy"]]
        )
    head = ["run", "processes", "per host", "pages/s", "vs control", "vs control-polite"]
    head += ["round trips/page", "Redis CPU us/page", "crawl CPU ms/page", "cores busy"]
    mem = [[m["pages"], m["bytes_per_pending_page"], m["bytes_per_visited_page"]] for m in mems]
    memory = table(["pages", "bytes per pending page", "bytes per visited page"], mem)
    return page(
        "Redis store: fleet, cost and memory",
        "*redis*: the processes share one crawl; *control*: as many processes sharing nothing, "
        "each with the fleet's per-host limit; *control-polite*: each with 1/N of it. Medians of "
        "the runs, figures per page fetched; the method is in the module's docstring.",
        table(head, fleet),
        *([memory] if mems else []),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pages", type=int, default=4000)
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--processes", default="4", help="a list: one run each")
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--concurrency", default="4", help="the fleet's requests per host, e.g. 4,16")
    p.add_argument("--memory-pages", default="1000000", help="a list, or 0 for none")
    p.add_argument("--redis", default=None, help="a running server (default: start one)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each kind (the median is shown)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    hosts = [f"127.0.0.{k}" for k in range(1, args.hosts + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        server = nullcontext(args.redis) if args.redis else RedisServer(tmp)
        with server as url:
            rows = [
                run(args, hosts, url, kind, n, int(per_host), Path(tmp) / f"r{rep}")
                for per_host in args.concurrency.split(",")
                for n in map(int, args.processes.split(","))
                for rep in range(args.repeat)
                for kind in KINDS
            ]
            mems = [memory(int(n), url) for n in args.memory_pages.split(",") if int(n)]
    write_results("redis_perf", {"fleet": rows, "memory": mems}, render(rows, mems), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
