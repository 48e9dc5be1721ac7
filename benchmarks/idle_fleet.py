"""A Redis fleet run as a service: what it costs Redis while it waits for start URLs, how soon
it takes one pushed, and that it closes after its idle time.

    python -m benchmarks.idle_fleet [--processes 4] [--seconds 60] [--idle 90] [--pushes 5]
        [--out DIR]

Redis alone (no client) for ``--seconds``: its own upkeep, the baseline. Then
``--processes`` processes (``OPIC_MAX_IDLE_TIME = --idle``) crawl a 40-page site on one Redis
(a server of its own, no persistence), then have nothing to do. Over ``--seconds`` of that
idleness: Redis's commands per second (``INFO stats``; a script's inner commands count too)
and its CPU (``INFO cpu``, user + system), in all and per process, and the commands that make
them (``INFO commandstats``). Then ``--pushes`` times, a new site's first URL is pushed with
``LPUSH`` into the crawl's ``start_urls`` key: the seconds until the site's server sees that
page requested, and until the site is crawled. Last, the seconds from the last request to
each process's exit, and its close reason (from its log).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks._harness import RESULTS, page, table, write_results
from benchmarks.redis_perf import redis_cpu
from tests.support.sites import RedisServer, Site, reachable, site_graph
from tests.test_redis_crawl import settings_for, start_worker, wait_for

#: The loopback hosts of the sites: the first site's, then one per push, in turn.
HOSTS = tuple(f"127.0.0.{k}" for k in range(1, 9))


def crawled(site: Site) -> bool:
    return {f"/p/{i}.html" for i in reachable(site.graph)} <= set(site.hits)


def run(args: argparse.Namespace, url: str, workdir: Path) -> dict:
    import redis

    key = f"opic:idle:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url)
    settings = settings_for(url, key, OPIC_MAX_IDLE_TIME=args.idle, LOGSTATS_INTERVAL=0)
    first = Site(site_graph(40, seed=1), host_of=lambda i: HOSTS[0], addresses=(HOSTS[0],))
    names = [f"p{k}" for k in range(args.processes)]
    # (Redis alone, no client but this one: its own upkeep, the baseline of the figures.)
    cpu0, t0 = redis_cpu(client), time.monotonic()
    time.sleep(args.seconds)
    alone = (redis_cpu(client) - cpu0) / (time.monotonic() - t0)
    with first:
        procs = {n: start_worker(workdir, n, first.url(0), settings, HOSTS) for n in names}
        wait_for(lambda: crawled(first), "the first site crawled")
        time.sleep(2.0)  # (every process idle)
        client.config_resetstat()
        cmd0, cpu0, t0 = (
            client.info("stats")["total_commands_processed"],
            redis_cpu(client),
            time.monotonic(),
        )
        time.sleep(args.seconds)
        cmd1, cpu1, t1 = (
            client.info("stats")["total_commands_processed"],
            redis_cpu(client),
            time.monotonic(),
        )
        by_command = {
            k.removeprefix("cmdstat_"): v["calls"] / (t1 - t0)
            for k, v in client.info("commandstats").items()
            if not k.startswith("cmdstat_config") and not k.startswith("cmdstat_info")
        }
    pushes = []
    for n in range(args.pushes):
        host = HOSTS[1 + n % (len(HOSTS) - 1)]
        site = Site(site_graph(20, seed=10 + n), host_of=lambda i, h=host: h, addresses=(host,))
        with site:
            pushed = time.monotonic()
            client.lpush("{" + key + "}:start_urls", site.url(0))
            wait_for(lambda s=site: "/p/0.html" in s.hits, "the pushed URL fetched")
            seen = time.monotonic()
            wait_for(lambda s=site: crawled(s), "the pushed site crawled")
            pushes.append({"first_fetch_s": seen - pushed, "site_s": time.monotonic() - pushed})
    last = time.monotonic()
    closes = []
    for n, proc in procs.items():
        proc.wait(timeout=args.idle + 120)
        log = (workdir / n / "crawl.log").read_text()
        reason = re.search(r"Closing spider \((\w+)\)", log)
        closes.append({"exit": proc.returncode, "reason": reason.group(1) if reason else None})
    closed_after = time.monotonic() - last
    from scrapy_opic._backends.redis import RedisStore

    RedisStore(client, key).clear()
    client.close()
    seconds = t1 - t0
    return {
        "processes": args.processes,
        "seconds": seconds,
        "commands_per_s": (cmd1 - cmd0) / seconds,
        "commands_per_s_per_process": (cmd1 - cmd0) / seconds / args.processes,
        "redis_cpu_percent": 100 * (cpu1 - cpu0) / seconds,
        "redis_alone_cpu_percent": 100 * alone,
        "redis_cpu_us_per_s_per_process": 1e6 * ((cpu1 - cpu0) / seconds - alone) / args.processes,
        "by_command": dict(sorted(by_command.items(), key=lambda kv: -kv[1])),
        "pushes": pushes,
        "idle_time": args.idle,
        "closed_after_s": closed_after,
        "closes": closes,
    }


def render(r: dict) -> str:
    idle = table(
        ["processes", "seconds", "Redis commands/s", "per process", "Redis CPU (%)",
         "Redis CPU per process, over Redis alone (us/s)", "Redis alone, CPU (%)"],
        [[r["processes"], r["seconds"], r["commands_per_s"], r["commands_per_s_per_process"],
          r["redis_cpu_percent"], r["redis_cpu_us_per_s_per_process"],
          r["redis_alone_cpu_percent"]]],
    )  # fmt: skip
    commands = table(["command", "calls/s"], list(r["by_command"].items()))
    first = [p["first_fetch_s"] for p in r["pushes"]]
    whole = [p["site_s"] for p in r["pushes"]]
    pushed = table(
        ["pushes", "push to first fetch (s), median", "max", "push to site crawled (s), median"],
        [[len(first), statistics.median(first), max(first), statistics.median(whole)]],
    )
    reasons = sorted({str(c["reason"]) for c in r["closes"]})
    exits = sorted({c["exit"] for c in r["closes"]})
    closed = (
        f"After the last push's site was crawled, every process closed within "
        f"{r['closed_after_s']:.1f} s (OPIC_MAX_IDLE_TIME = {r['idle_time']:g} s; Scrapy's engine "
        f"looks every 5 s whether it is idle): reasons {', '.join(reasons)}, exit codes "
        f"{', '.join(map(str, exits))}."
    )
    return page(
        "An idle fleet on Redis",
        (__doc__ or "").split("\n\n")[2].strip(),
        "## Idle\n\n" + idle,
        "Commands (a script's inner commands counted apart):\n\n" + commands,
        "## Pushed URLs\n\n" + pushed,
        "## Closing\n\n" + closed,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--idle", type=float, default=90.0)
    p.add_argument("--pushes", type=int, default=5)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(tmp) as url:
        result = run(args, url, Path(tmp))
    write_results("idle_fleet", result, render(result), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
