"""Several Scrapy processes crawl one local site through one OPIC frontier in a real Redis server:
one joins late, one is killed with SIGKILL midway, and the crawl still fetches every page, visits
each exactly once and ends with total cash 1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from scrapy_opic.localsite import Site, site_graph

redis = pytest.importorskip("redis")

RUNNER = Path(__file__).with_name("crawl_runner.py")


def reachable(g, start: int = 0) -> set[int]:
    seen, todo = {start}, [start]
    while todo:
        i = todo.pop()
        for j in g.children(i):
            if int(j) not in seen:
                seen.add(int(j))
                todo.append(int(j))
    return seen


def start_worker(tmp_path: Path, name: str, start_url: str, settings: dict) -> subprocess.Popen:
    d = tmp_path / name
    d.mkdir()
    config = {
        "start_url": start_url,
        "settings": settings,
        "items": str(d / "items.jsonl"),
        "stats": str(d / "stats.json"),
    }
    (d / "config.json").write_text(json.dumps(config))
    return subprocess.Popen(
        [sys.executable, str(RUNNER), str(d / "config.json")],
        cwd=d,
        stdout=subprocess.DEVNULL,
        stderr=open(d / "crawl.log", "w"),  # noqa: SIM115 (closed with the process)
    )


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_three_processes_one_killed_still_fetch_every_page_once(tmp_path, redis_url):
    g = site_graph(600, seed=11)
    pages = reachable(g)
    key = f"opic:crawl:{uuid.uuid4().hex}"
    settings = {
        "OPIC_STORE": "redis",
        "OPIC_REDIS_URL": redis_url,
        "OPIC_REDIS_KEY": key,
        "OPIC_REDIS_LEASE": 2.0,
        "CONCURRENT_REQUESTS": 4,
        "LOG_LEVEL": "INFO",
    }
    with Site(g, delay=0.03) as site:
        url = site.url(0)
        first = start_worker(tmp_path, "first", url, settings)
        victim = start_worker(tmp_path, "victim", url, settings)
        wait_for(lambda: len(site.hits) >= 60)
        late = start_worker(tmp_path, "late", url, settings)  # joins a running crawl
        wait_for(lambda: len(site.hits) >= 250)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
        killed_at = len(site.hits)
        for proc in (first, late):
            assert proc.wait(timeout=40) == 0, (tmp_path / "first" / "crawl.log").read_text()[
                -3000:
            ]
        hits = Counter(site.hits)

    assert killed_at < len(pages)  # the kill came midway
    fetched = {int(p.removeprefix("/p/").removesuffix(".html")) for p in hits}
    assert fetched == pages  # every page, including those the victim held when it died

    client = redis.Redis.from_url(redis_url)
    from scrapy_opic.core.redisstore import RedisFrontier

    frontier = RedisFrontier(client, key)
    status = frontier.status()
    snapshot = frontier.snapshot()
    engine = snapshot.engine()
    try:
        assert status["pages"] == len(pages) and status["visited"] == len(pages)
        assert status["pending"] == status["leases"] == status["in_flight"] == 0
        assert (engine.visits[: engine.n] == 1).all()  # one visit per page, nothing lost
        assert engine.total_cash() == pytest.approx(1.0, abs=1e-9)
        assert frontier.check() == []
        # The victim's in-flight pages went back to the frontier when their leases expired:
        # the only pages fetched twice are among them.
        twice = sum(1 for n in hits.values() if n > 1)
        assert status["reclaimed"] >= 1
        assert twice <= status["reclaimed"]
        # Both survivors did part of the work.
        for name in ("first", "late"):
            stats = json.loads((tmp_path / name / "stats.json").read_text())
            assert stats["opic/visits"] > 0
            assert stats["finish_reason"] == "finished"
        assert np.isclose(engine.importance().sum(), 1.0)
    finally:
        frontier.clear()
        client.close()
