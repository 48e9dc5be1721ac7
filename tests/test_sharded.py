"""One crawl over several Redis partitions (:class:`ShardedRedisFrontier`): cash moves between
partitions through their outboxes and is never created or lost (a process that dies between a
visit and its transfers included: its entries are replayed, once); the crawl over three
partitions converges to the same importance as over one, and to PageRank; bad combinations are
one line. On a plain server (three partitions side by side) and on a real Redis Cluster (three
masters: the partitions spread over its shards). The frontier and scheduler contract suites run
on it as the ``redis-sharded`` backend; a crawl of Scrapy processes, some killed with SIGKILL,
is in test_redis_crawl.py."""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from scrapy_opic.backends.redis import RedisFrontier
from scrapy_opic.backends.sharded import ShardedRedisFrontier, partition_of
from scrapy_opic.opic.constants import DUPLICATE, SCHEDULED
from scrapy_opic.opic.frontier import Entry, Link
from scrapy_opic.opic.pagerank import pagerank
from tests.sites import reachable, site_graph

redis = pytest.importorskip("redis")

TOL = 1e-9
HOSTS = 6


def url(i: int) -> str:
    return f"http://h{i % HOSTS}.example/p/{i}"


def key(i: int) -> bytes:
    return hashlib.sha1(url(i).encode()).digest()


def link(i: int) -> Link:
    return Link(key(i), url(i), slot=f"h{i % HOSTS}.example", payload=b"req%d" % i)


def entry(i: int) -> Entry:
    return Entry(key(i), url(i), 0, f"h{i % HOSTS}.example", b"req%d" % i)


@pytest.fixture(params=["redis", "redis-cluster"])
def server(request):
    return request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")


@pytest.fixture
def crawls(server):
    """Opens crawls under fresh keys (``crawls(shards)``, 1: unsharded); deletes them after."""
    made = []

    def make(shards: int = 3, **kw):
        k = f"opic:shards:{uuid.uuid4().hex}"
        if shards == 1:
            f = RedisFrontier.connect(server, k, **kw)
        else:
            f = ShardedRedisFrontier.connect(server, k, shards, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.clear()
        f.client.close()


def crawl(f, g, steps: int) -> None:
    """``steps`` greedy visits of a continuous crawl of graph ``g`` from page 0."""
    ids = {key(i): i for i in range(g.n)}
    if f.figures()["pages"] == 0:
        f.schedule([entry(0)])
    for _ in range(steps):
        lease = f.pop()
        assert lease is not None
        assert f.visit(lease, [link(int(j)) for j in g.children(ids[lease.key])]) is not None


def importance(f, n: int) -> np.ndarray:
    snap = f.snapshot()
    imp = np.zeros(n)
    ids = {key(i): i for i in range(n)}
    for at, value in zip(snap.keys, snap.engine().importance()):
        imp[ids[at]] = value
    return imp


def test_the_hosts_spread_over_the_partitions():
    assert sorted({partition_of(url(i), 3) for i in range(HOSTS)}) == [0, 1, 2]
    # By host: every page of a host in one partition, whatever its path, port or scheme.
    assert len({partition_of(u, 3) for u in ("http://a.b/x", "https://a.b:8443/y?z", "a.b")}) <= 2
    assert partition_of("http://a.b/x", 3) == partition_of("https://A.b:8443/y?z", 3)


def test_a_crawl_over_three_partitions_keeps_cash_and_finds_the_same_importance(crawls):
    """Links across hosts cross partitions (every page links home, in partition 0's host, and
    the power-law links go anywhere): cash stays 1 at every check, and after the same number of
    visits the importance on three partitions is as close to PageRank as on one, and the two
    agree closely."""
    g = site_graph(200, seed=3)
    pr = pagerank(g, alpha=0.85)
    one, three = crawls(1), crawls(3)
    for f in (one, three):
        f.open(epsilon=0.15, refresh=1.0, continuous=True)
        for _ in range(3):
            crawl(f, g, 1500)
            assert f.total_cash() == pytest.approx(1.0, abs=TOL)
        f.maintain([])
        assert f.check() == []
    a, b = importance(one, g.n), importance(three, g.n)
    err_one, err_three = np.abs(a - pr).sum(), np.abs(b - pr).sum()
    assert err_three < 0.03 and err_one < 0.03
    assert np.abs(a - b).sum() < 0.01
    f = three.figures()
    assert f["shards"] == 3 and f["transit"] == 0
    # Every partition took part, and the round trips stayed at most 3 per page.
    visits = [p.globals()["visits"] for p in three.parts]
    assert min(visits) > 0 and sum(visits) == 4500
    assert three.round_trips / 4500 <= 3.0


def test_the_endowment_reaches_the_seeds_of_every_partition(crawls):
    f = crawls(3)
    f.open()
    seeds = [entry(i) for i in range(HOSTS)]
    assert f.schedule(seeds) == [SCHEDULED] * HOSTS
    lease = f.pop()
    # The virtual page's 1 was sent to every partition in proportion to its pages, and paid:
    # each seed holds 1/6, wherever it lives.
    for i in range(HOSTS):
        assert f.cash_of(key(i)) == pytest.approx(1.0 / HOSTS, abs=TOL)
    assert lease is not None
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)


def test_a_process_that_dies_between_a_visit_and_its_transfers_loses_nothing(crawls, server):
    """The visit wrote its links' shares to its partition's outbox; the process dies before
    applying them. The cash is in transit, the crawl not over; another process's upkeep
    replays the entries once, and applying them again creates nothing."""
    f = crawls(3, lease=30.0)
    f.open(refresh=1.0)
    f.schedule([entry(0)])
    lease = f.pop()
    kids = [1, 2, 3, 4, 5, 7]  # the other hosts
    assert {partition_of(url(i), 3) for i in kids} - {partition_of(url(0), 3)}

    def die(*a, **kw):
        raise SystemExit("killed")

    f._apply = die
    with pytest.raises(SystemExit):
        f.visit(lease, [link(i) for i in kids])
    assert f.figures()["transit"] > 0 and f.has_pending()
    assert f.in_transit() > 0
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)  # in transit, not lost

    other = ShardedRedisFrontier.connect(server, f.key, 3)
    try:
        other.open(refresh=1.0)
        assert other.replay() == 0  # younger than a lease: its process may still apply them
        n = other.replay(older_than_ms=0)
        assert n > 0
        assert other.total_cash() == pytest.approx(1.0, abs=TOL)
        for i in kids:
            assert other.status_of(key(i)) == "pending"
        assert other.replay(older_than_ms=0) == n  # not acknowledged yet: replayed again...
        assert other.total_cash() == pytest.approx(1.0, abs=TOL)  # ...and applied once
        other.maintain([])  # acknowledges
        assert other.replay(older_than_ms=0) == 0
        assert other.figures()["transit"] == 0 and other.check() == []
        # Forgotten once acknowledged (ids older than two leases: none yet here).
        assert other.forget_applied() == 0
        seen = []
        while (got := other.pop()) is not None:
            seen.append(got.key)
            other.visit(got, [])
        assert sorted(seen) == sorted(key(i) for i in kids)
        assert other.total_cash() == pytest.approx(1.0, abs=TOL)
    finally:
        other.client.close()


def test_a_redirect_to_another_host_moves_the_cash_to_its_partition(crawls):
    f = crawls(3)
    f.open(continuous=True)
    f.schedule([entry(0)])
    lease = f.pop()
    target = 1 if partition_of(url(1), 3) != partition_of(url(0), 3) else 2
    assert f.redirect(lease, entry(target), permanent=True) == SCHEDULED
    assert f.cash_of(key(0)) == 0.0 and f.cash_of(key(target)) == pytest.approx(1.0, abs=TOL)
    assert f.status_of(key(0)) == "visited"
    # A permanent redirect across partitions closes the page (no alias across partitions).
    assert f.schedule([entry(0)]) == [DUPLICATE]
    assert f.pop().key == key(target)
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)


def test_a_crawl_keeps_its_partition_count(crawls, server):
    f = crawls(3)
    f.open()
    with pytest.raises(ValueError, match=r"runs on 3 partitions, not 2 \(OPIC_REDIS_SHARDS"):
        ShardedRedisFrontier.connect(server, f.key, 2).open()
    with pytest.raises(ValueError, match=r"runs on 3 partitions, not 1 \(OPIC_REDIS_SHARDS=3"):
        RedisFrontier.connect(server, f.key).open()
    plain = crawls(1)
    plain.open()
    with pytest.raises(ValueError, match=r"runs on one partition, not 3 \(OPIC_REDIS_SHARDS=1"):
        ShardedRedisFrontier.connect(server, plain.key, 3).open()
    with pytest.raises(ValueError, match="2 or more"):
        ShardedRedisFrontier.connect(server, "opic:x", 1)


def test_the_partitions_spread_over_the_cluster(redis_cluster_url):
    """On a Redis Cluster each partition is one hash tag: the three land on the masters that
    serve their slots (for most keys, on more than one master)."""
    cluster = redis.RedisCluster.from_url(redis_cluster_url)
    try:
        spread = []
        for n in range(20):
            tags = [f"{{opic:spread{n}:{k}}}" for k in range(3)]
            nodes = {cluster.get_node_from_key(tag).name for tag in tags}
            spread.append(len(nodes))
        assert max(spread) == 3 and sum(s > 1 for s in spread) >= 10
    finally:
        cluster.close()


WORKER = Path(__file__).with_name("shard_worker.py")


@pytest.mark.slow
def test_cash_sums_to_one_across_partitions_after_random_kills(tmp_path, server):
    """Three crawl processes on three partitions, killed with SIGKILL at random moments (often
    between a visit and its transfers) and replaced; once, all of them at once. With no process
    running the cash in the partitions and their outboxes is 1; the replacements replay what the
    dead left in the outboxes, and the crawl ends with every page visited, nothing in transit,
    and cash 1."""
    g = site_graph(600, seed=5)
    k = f"opic:kills:{uuid.uuid4().hex}"
    rng = random.Random(7)
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, str(WORKER), server, k, "3", str(g.n), "5"],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"w{len(procs)}.log", "w"),  # noqa: SIM115
        )
        procs.append(p)
        return p

    f = ShardedRedisFrontier.connect(server, k, 3)
    try:
        alive = [start() for _ in range(3)]
        kills = 0
        visits = lambda: f.figures()["visits"]  # noqa: E731
        deadline = time.monotonic() + 120
        while visits() < 20:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for round_ in range(6):
            time.sleep(rng.uniform(0.1, 0.4))
            victims = list(alive) if round_ == 3 else [rng.choice(alive)]
            for v in victims:
                v.send_signal(signal.SIGKILL)
                v.wait()
                alive.remove(v)
                kills += 1
            if not alive:
                # Nobody runs: what the dead left is in the books, in transit or in leases.
                figures = f.figures()
                assert f.total_cash() == pytest.approx(1.0, abs=TOL)
                stranded = figures["transit"] + figures["leases"]
            alive += [start() for _ in victims]
            assert f.figures()["visited"] < len(reachable(g))  # (the kills came midway)
        for p in alive:
            assert p.wait(timeout=180) == 0, (tmp_path / "w0.log").read_text()[-2000:]
        figures = f.figures()
        snap = f.snapshot()
        engine = snap.engine()
        assert figures["visits"] < g.n * 1.5  # (a pass, and the pages of reclaimed leases)
        assert figures["visited"] == figures["pages"] == len(reachable(g))
        assert figures["pending"] == figures["leases"] == figures["transit"] == 0
        assert (engine.visits[: engine.n] >= 1).all()
        assert engine.total_cash() == pytest.approx(1.0, abs=TOL)
        assert f.check() == []
        assert kills == 8 and stranded > 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        f.clear()
        f.client.close()
