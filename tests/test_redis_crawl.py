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

from tests.sites import Site, site_graph

pytestmark = pytest.mark.slow

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


def leases_of(redis_url: str, key: str, pid: int) -> int:
    """Pages leased right now by the crawl process ``pid`` (its workers entry names its lease
    tag: ``host:pid:tag``; its lease tokens are ``tag.seq``)."""
    client = redis.Redis.from_url(redis_url)
    try:
        ns = "{" + key + "}"
        tags = [
            w.decode().rsplit(":", 2)[2]
            for w in client.hkeys(ns + ":workers")
            if w.decode().rsplit(":", 2)[1] == str(pid)
        ]
        if not tags:
            return 0
        leased = client.zrange(ns + ":leases", 0, -1)
        tokens = [client.hget(ns + ":w", fp) or b"" for fp in leased]
        return sum(1 for t in tokens if t.decode().startswith(tags[0] + "."))
    finally:
        client.close()


def wait_for(predicate, what: str, timeout: float = 180.0) -> None:
    """Wait for the event a step needs (a generous bound: the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
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
    procs: list[subprocess.Popen] = []
    try:
        with Site(g, delay=0.05) as site:
            url = site.url(0)
            # The victim starts the crawl: it is busy from the first page on, so that it holds
            # leases when it is killed (a process that joins may wait a whole engine heartbeat,
            # 5 s, between two asks when the frontier looked empty).
            victim = start_worker(tmp_path, "victim", url, settings)
            procs.append(victim)
            wait_for(lambda: len(site.hits) >= 60, "the victim's first 60 fetches")
            first = start_worker(tmp_path, "first", url, settings)  # join a running crawl
            late = start_worker(tmp_path, "late", url, settings)
            procs += [first, late]
            wait_for(lambda: len(site.hits) >= 250, "250 fetches")
            wait_for(lambda: leases_of(redis_url, key, victim.pid) > 0, "a lease of the victim")
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=30) == -signal.SIGKILL
            killed_at = len(site.hits)
            for name, proc in (("first", first), ("late", late)):
                log = tmp_path / name / "crawl.log"
                assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
            hits = Counter(site.hits)
    finally:
        for proc in procs:  # never leave a crawl running after a failure
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert killed_at < len(pages)  # the kill came midway
    fetched = {int(p.removeprefix("/p/").removesuffix(".html")) for p in hits}
    assert fetched == pages  # every page, including those the victim held when it died

    client = redis.Redis.from_url(redis_url)
    from scrapy_opic.backends.redis import RedisFrontier

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
            assert 0 < stats["opic/visits"] < len(pages)
            assert stats["opic/crawl/visits"] == len(pages)
            assert stats["finish_reason"] == "finished"
        assert np.isclose(engine.importance().sum(), 1.0)
    finally:
        frontier.clear()
        client.close()


# -- one process at a time: the Redis scheduler's cash paths and its leaving the crawl --------


@pytest.fixture
def redis_crawl(redis_url):
    """Settings for a crawl under a fresh key, and the frontier to inspect it afterwards."""
    from scrapy_opic.backends.redis import RedisFrontier

    key = f"opic:crawl:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(redis_url)
    frontier = RedisFrontier(client, key)
    settings = {"OPIC_STORE": "redis", "OPIC_REDIS_URL": redis_url, "OPIC_REDIS_KEY": key}
    yield settings, frontier
    frontier.clear()
    client.close()


def test_redirects_errors_offsite_and_callback_errors_keep_cash_at_one(tmp_path, redis_crawl):
    from tests.test_crawl import crawl, node

    settings, frontier = redis_crawl
    g = site_graph(200, seed=3)
    with Site(g, redirects={5: 6, 7: 8}, errors={9, 10}, offsite={0, 1, 2}, loops={3, 4}) as site:
        items, stats = crawl(
            tmp_path,
            site.url(0),
            raise_on=[site.url(11)],
            CONCURRENT_REQUESTS=4,
            OPIC_REFUSED_LINKS="virtual",
            REDIRECT_MAX_TIMES=3,
            OPIC_EXPORT=str(tmp_path / "importance.csv"),
            **settings,
        )
    assert stats["opic/redirected"] >= 2
    assert stats["opic/failed"] >= 2  # the two 500s
    assert stats["opic/ignored"] >= 1  # an endless redirect chain, given up
    assert stats["offsite/filtered"] >= 1
    fetched = {node(r["url"]) for r in items if "/p/" in r["url"]}
    assert {9, 10}.isdisjoint(fetched) and 11 in fetched
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-9)
    assert frontier.check() == []
    status = frontier.status()
    assert status["pending"] == status["leases"] == 0
    # OPIC_EXPORT read the crawl back from Redis when the process closed.
    rows = (tmp_path / "importance.csv").read_text().splitlines()
    assert rows[0].startswith("url,importance") and len(rows) == status["pages"] + 1


def test_a_process_that_leaves_hands_its_pages_back(tmp_path, redis_crawl):
    from tests.test_crawl import crawl, node

    settings, frontier = redis_crawl
    g = site_graph(300, seed=4)
    with Site(g, delay=0.02) as site:
        first, stats1 = crawl(
            tmp_path / "a",
            site.url(0),
            CLOSESPIDER_PAGECOUNT=40,
            CONCURRENT_REQUESTS=8,
            OPIC_REDIS_LEASE=600,  # a page not handed back would block the crawl for 10 min
            **settings,
        )
        left = frontier.status()
        second, stats2 = crawl(tmp_path / "b", site.url(0), CONCURRENT_REQUESTS=8, **settings)
    assert stats1["finish_reason"] == "closespider_pagecount"
    assert left["leases"] == left["in_flight"] == 0 and left["pending"] > 0
    assert stats2["finish_reason"] == "finished"
    fetched = {node(r["url"]) for r in first + second}
    assert fetched == reachable(g)
    engine = frontier.snapshot().engine()
    assert (engine.visits[: engine.n] == 1).all()
    assert engine.total_cash() == pytest.approx(1.0, abs=1e-9)
    assert frontier.check() == []


def test_a_continuous_crawl_on_redis_revisits_pages_and_keeps_cash(tmp_path, redis_crawl):
    from tests.test_crawl import crawl

    settings, frontier = redis_crawl
    g = site_graph(60, seed=5)
    with Site(g) as site:
        _items, stats = crawl(
            tmp_path,
            site.url(0),
            OPIC_CONTINUOUS=True,
            CLOSESPIDER_PAGECOUNT=300,
            CONCURRENT_REQUESTS=4,
            **settings,
        )
    assert stats["finish_reason"] == "closespider_pagecount"
    status = frontier.status()
    # (Refresh crawls discover slowly: a page or two may still be unknown after 5N fetches.)
    assert status["visits"] >= 290 and status["pages"] >= 0.9 * len(reachable(g))
    assert status["visits"] > 3 * status["pages"]  # pages were fetched again and again
    assert status["leases"] == 0 and status["pending"] == status["pages"]  # all wait again
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-9)
    assert frontier.check() == []


def test_the_commands_read_a_redis_crawl(tmp_path, redis_crawl):
    from tests.test_crawl import crawl

    settings, frontier = redis_crawl
    g = site_graph(80, seed=6)
    with Site(g) as site:
        crawl(tmp_path, site.url(0), **settings)
    flags = [a for k, v in settings.items() for a in ("-s", f"{k}={v}")]
    top = subprocess.run(
        ["scrapy", "opic-top", "site", "-n", "3", *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert top.returncode == 0, top.stderr
    assert "pages known" in top.stdout.splitlines()[0]
    assert len(top.stdout.splitlines()) == 2 + 3
    out = tmp_path / "sites.jsonl"
    export = subprocess.run(
        ["scrapy", "opic-export", "site", "--by-site", "-o", str(out), *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert export.returncode == 0, export.stderr
    assert json.loads(out.read_text().splitlines()[0])["site"] == "127.0.0.1"
    report = subprocess.run(
        [
            "scrapy",
            "opic-report",
            "--state",
            f"{settings['OPIC_REDIS_URL']}#{frontier.key}",
            "-o",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert report.returncode == 0, report.stderr
    assert "<img" in (tmp_path / "r.html").read_text()
