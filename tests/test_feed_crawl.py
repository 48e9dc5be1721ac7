"""Crawls fed while they run, judged by the sites' access logs: a JOBDIR crawl takes URLs
pushed with ``scrapy opic-feed`` while it runs and while none runs; a fleet of processes on
Redis, idle after its first site, crawls the sites pushed with ``redis-cli`` and the command,
through a kill -9 and a Redis restart, each page once and cash 1, then closes after its idle
time; an idle fleet polls Redis without a busy loop."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.support import RUNNER
from tests.support.sites import RedisServer, Site, reachable, site_graph
from tests.test_redis_crawl import settings_for, start_worker, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def sites(*seeds: int) -> list[Site]:
    """A site of 20-40 pages per seed, each on a host of its own."""
    return [
        Site(site_graph(20 + 10 * k, seed=s), host_of=lambda i, h=h: h, addresses=(h,))
        for k, (s, h) in enumerate(zip(seeds, HOSTS))
    ]


def feed(*args: str, cwd: Path) -> str:
    """``scrapy opic-feed ARGS`` as a user runs it; its output."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, "-m", "scrapy", "opic-feed", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


def fetched_once(site: Site) -> bool:
    """Every page of ``site`` reachable from its page 0 fetched, none twice (its access log)."""
    hits = Counter(site.hits)
    return set(hits) == {f"/p/{i}.html" for i in reachable(site.graph)} and max(hits.values()) == 1


def crawl_once(workdir: Path, settings: dict, start: list[str]) -> tuple[subprocess.Popen, Path]:
    """One crawl (the runner's site spider over :data:`HOSTS`) started in a process."""
    workdir.mkdir(parents=True)
    config = {
        "start_url": start,
        "allowed": list(HOSTS),
        "settings": settings,
        "items": str(workdir / "items.jsonl"),
        "stats": str(workdir / "stats.json"),
    }
    (workdir / "config.json").write_text(json.dumps(config))
    log = open(workdir / "crawl.log", "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen([sys.executable, str(RUNNER), str(workdir / "config.json")], stderr=log)
    return proc, workdir


def test_a_jobdir_crawl_takes_urls_pushed_while_it_runs_and_while_none_runs(tmp_path):
    """Site A pushed before any crawl, B while the crawl (started with no start URL) waits,
    C and a page of A while none runs: each crawled once, at the next start for C; the crawl
    that waited closes after ``OPIC_MAX_IDLE_TIME`` with the reason, cash 1."""
    job = tmp_path / "job"
    a, b, c = sites(1, 2, 3)
    with a, b, c:
        out = feed("site", a.url(0), "-s", f"JOBDIR={job}", cwd=tmp_path)
        assert "1 start URLs added to" in out and (job / "opic.start_urls").exists()
        settings = {"JOBDIR": str(job), "OPIC_MAX_IDLE_TIME": 4}
        proc, d = crawl_once(tmp_path / "first", settings, [])
        try:
            wait_for(lambda: fetched_once(a) or proc.poll() is not None, "site A crawled")
            feed("site", b.url(0), "--callback", "parse", "-s", f"JOBDIR={job}", cwd=tmp_path)
            wait_for(lambda: fetched_once(b) or proc.poll() is not None, "site B crawled")
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
        log = (d / "crawl.log").read_text()
        assert "Closing spider (idle_timeout)" in log, log[-3000:]
        assert "OPIC: closing: nothing to crawl for" in log
        stats = json.loads((d / "stats.json").read_text())
        assert abs(stats["opic/total_cash"] - 1.0) < 1e-9 and stats["opic/seeds_taken"] == 2
        # No crawl runs: C, and A's first page again, wait for the next start.
        feed("site", c.url(0), a.url(0), "-s", f"JOBDIR={job}", cwd=tmp_path)
        proc, d = crawl_once(tmp_path / "second", {"JOBDIR": str(job)}, [])
        assert proc.wait(timeout=120) == 0, (d / "crawl.log").read_text()[-3000:]
        log = (d / "crawl.log").read_text()
        assert "took 2 start URLs" in log and "1 filed, 1 already known" in log, log[-3000:]
        assert all(fetched_once(s) for s in (a, b, c))
        assert not (job / "opic.start_urls.taken").exists()


def test_a_fleet_idles_and_crawls_what_is_pushed_through_a_kill_and_a_redis_restart(
    tmp_path, redis_url
):
    """Three processes on Redis start with site A and idle; site B is pushed with redis-cli
    (or the client, without it) and one process is killed at once (kill -9), site C is pushed
    with the command and Redis restarted (with its append-only file) at once: every page of
    A, B and C fetched, none twice but those a killed process had in flight, cash 1 in the
    stored crawl, and the processes left close after their idle time with the reason. (A
    server of its own, restarted; ``redis_url`` skips the test where none can run.)"""
    import redis

    from tests.test_redis import check

    key = f"opic:feed:{uuid.uuid4().hex[:8]}"
    a, b, c = sites(4, 5, 6)
    server = RedisServer(tmp_path, persist=True)
    procs: dict[str, subprocess.Popen] = {}
    with server as url, a, b, c:
        settings = settings_for(url, key, OPIC_MAX_IDLE_TIME=12, OPIC_REDIS_LEASE=3.0)
        settings["CONCURRENT_REQUESTS"] = 2
        procs = {n: start_worker(tmp_path, n, a.url(0), settings, HOSTS) for n in "xyz"}
        client = redis.Redis.from_url(url)
        try:
            wait_for(lambda: fetched_once(a), "site A crawled")
            time.sleep(1.0)  # (every process idle)
            name = "{" + key + "}:start_urls"
            if shutil.which("redis-cli"):
                subprocess.run(
                    ["redis-cli", "-p", str(server.port), "LPUSH", name, b.url(0)], check=True,
                    capture_output=True,
                )  # fmt: skip
            else:
                client.lpush(name, b.url(0))
            procs["x"].send_signal(signal.SIGKILL)
            assert procs.pop("x").wait(timeout=30) == -signal.SIGKILL
            wait_for(lambda: set(b.hits) >= {f"/p/{i}.html" for i in reachable(b.graph)}, "B")
            redis_flags = ["OPIC_STORE=redis", f"OPIC_REDIS_URL={url}", f"OPIC_REDIS_KEY={key}"]
            out = feed("site", c.url(0), *[x for f in redis_flags for x in ("-s", f)], cwd=tmp_path)
            assert f"1 start URLs pushed into {name}" in out
            server.restart()
            client.close()
            client = redis.Redis.from_url(url)
            wait_for(lambda: set(c.hits) >= {f"/p/{i}.html" for i in reachable(c.graph)}, "C")
            for n, proc in procs.items():
                log = tmp_path / n / "crawl.log"
                assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
                text = log.read_text()
                assert "Closing spider (idle_timeout)" in text, text[-3000:]
            assert check(client, key) == []
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
            client.close()
    hits = [Counter(s.hits) for s in (a, b, c)]
    assert all(fetched_once(s) for s in (a, c))
    twice = sum(n - 1 for n in hits[1].values())
    # (A page of B in flight in the killed process is fetched again: 2 at most, its limit.)
    assert set(hits[1]) == {f"/p/{i}.html" for i in reachable(b.graph)} and twice <= 2


def crawl_commands(redis_url: str, key: str, seconds: float) -> int:
    """The commands Redis served for the crawl ``key`` over the next ``seconds`` (``MONITOR``:
    those whose arguments name one of its keys), whatever other clients of the server do."""
    import threading

    import redis

    watcher = redis.Redis.from_url(redis_url)
    seen: list[float] = []

    def listen() -> None:
        try:
            with watcher.monitor() as feed:
                while True:
                    command = feed.next_command()
                    if command["client_type"] != "lua" and key in command["command"]:
                        seen.append(time.monotonic())
        except (redis.ConnectionError, AttributeError, ValueError):
            pass  # (the connection closed under it: the count is taken)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(0.5)  # (MONITOR on)
    t0 = time.monotonic()
    time.sleep(seconds)
    count = sum(1 for t in list(seen) if t0 <= t < t0 + seconds)
    watcher.close()
    return count


def test_an_idle_fleet_polls_redis_without_a_busy_loop(tmp_path, redis_url):
    """Two processes with nothing to crawl, waiting for pushed URLs: Redis serves them a
    bounded number of commands per process and second (a busy loop would make thousands),
    then they close after their idle time."""
    import redis

    key = f"opic:idle:{uuid.uuid4().hex[:8]}"
    (a,) = sites(7)
    settings = settings_for(redis_url, key, OPIC_MAX_IDLE_TIME=10, LOGSTATS_INTERVAL=0)
    client = redis.Redis.from_url(redis_url)
    procs: dict[str, subprocess.Popen] = {}
    try:
        with a:
            procs = {n: start_worker(tmp_path, n, a.url(0), settings, HOSTS) for n in "xy"}
            wait_for(lambda: fetched_once(a), "site A crawled")
            time.sleep(1.0)
            commands = crawl_commands(redis_url, key, 5.0)
            for n, proc in procs.items():
                assert proc.wait(timeout=120) == 0, (tmp_path / n / "crawl.log").read_text()
        per_process = commands / 5.0 / len(procs)
        print(f"an idle process: {per_process:.1f} Redis commands per second")
        assert per_process < 50
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        from scrapy_opic._backends.redis import RedisStore

        RedisStore(client, key).clear()
        client.delete("{" + key + "}:start_urls", "{" + key + "}:start_urls:taken")
        client.close()


def test_the_feed_command_refuses_what_it_cannot_push_in_one_line(tmp_path):
    from tests.support.project import Project

    project = Project(tmp_path / "proj")
    for args, code, says in (
        (["site"], 2, "no URL to push"),
        ([], 2, "give the spider's name"),
        (["site", "http://a/", "--meta", "[1]"], 2, "--meta must be a JSON object"),
        (["sitee", "http://a/"], 1, "unknown spider 'sitee' (this project's spiders: other, site)"),
        (["site", "-f", "missing.txt"], 1, "cannot read missing.txt: No such file"),
    ):
        run = project.scrapy("opic-feed", *args)
        assert run.returncode == code and f"error: {says}" in run.out, run.out
    ok = project.scrapy("opic-feed", "site", "http://a/1", "-f", "-", stdin="http://a/2\n\n")
    assert ok.returncode == 0 and "2 start URLs added to" in ok.out, ok.out
    feed = project.root / ".scrapy" / "opic" / "site.start_urls"
    assert feed.read_text() == "http://a/1\nhttp://a/2\n"
