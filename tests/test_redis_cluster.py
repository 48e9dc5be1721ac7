"""The Redis frontier on a real Redis Cluster (three masters on 127.0.0.1, started for the session
by :class:`tests.sites.RedisCluster`): the client finds out at connect that it talks to a
cluster, every key of a crawl is in the one hash slot of its namespace, the script runs on the
node of that slot (one that never saw the script too), a scan reads that node only, and the
export API reads a crawl back. (The frontier and scheduler contract suites run on the cluster as
the ``redis-cluster`` backend of test_frontier.py and test_scheduler.py; a crawl of Scrapy
processes through the cluster is in test_redis_crawl.py; a cluster that is down, in
test_bad_input.py.)"""

from __future__ import annotations

import uuid

import pytest

from scrapy_opic.backends import StoreError
from scrapy_opic.backends.redis import RedisFrontier, _glob
from scrapy_opic.opic.constants import SCHEDULED
from scrapy_opic.opic.frontier import Entry, Link
from tests.frontiers import key

redis = pytest.importorskip("redis")
from redis.crc import key_slot  # noqa: E402


@pytest.fixture
def cluster(redis_cluster_url):
    """A cluster client of the session's cluster (to look at its nodes)."""
    client = redis.RedisCluster.from_url(redis_cluster_url)
    yield client
    client.close()


@pytest.fixture
def crawls(redis_cluster_url):
    """Opens crawls on the cluster under fresh keys (``crawls(prefix)``); deletes them after."""
    made: list[RedisFrontier] = []

    def make(prefix: str = "opic:cluster") -> RedisFrontier:
        frontier = RedisFrontier.connect(redis_cluster_url, f"{prefix}:{uuid.uuid4().hex}")
        made.append(frontier)
        return frontier

    yield make
    for frontier in made:
        frontier.clear()
        frontier.client.close()


def node_urls(cluster) -> list[str]:
    return [f"redis://{node.host}:{node.port}/0" for node in cluster.get_primaries()]


def key_on(cluster, node, prefix: str) -> str:
    """A crawl key whose namespace ``{key}`` hashes to a slot that ``node`` serves."""
    for i in range(100_000):
        name = f"{prefix}:{uuid.uuid4().hex[:8]}{i}"
        if cluster.get_node_from_key("{" + name + "}").name == node.name:
            return name
    raise AssertionError(f"no key found for {node.name}")


def small_crawl(frontier: RedisFrontier) -> None:
    """Some of every operation, so that the crawl makes every kind of key it has: queues of two
    priorities and two slots, heads, tiers, leases, requests, outcomes, series, meta, workers."""
    frontier.open(meta={"spider": "site"})
    frontier.schedule([Entry(key(0), "http://a/0", 0, "a", b"r0")])
    frontier.schedule([Entry(key(1), "http://b/1", 1, "b", b"r1")])
    for step in range(6):
        lease = frontier.pop()
        i = int(lease.payload.removeprefix(b"r"))
        if step == 3:
            frontier.fail(lease)
            continue
        kids = (3 * i + 2, 3 * i + 3, 3 * i + 4)
        links = [
            Link(key(j), f"http://{'ab'[j % 2]}/{j}", slot="ab"[j % 2], payload=b"r%d" % j)
            for j in kids
        ]
        assert frontier.visit(lease, links) is not None
    assert frontier.pop() is not None  # one page stays leased
    frontier.add_point({"pages": 1.0, "elapsed": 0.0})
    assert frontier.status()["pending"] > 0


def test_any_node_of_a_cluster_gets_a_cluster_client_and_a_server_a_plain_one(
    cluster, crawls, redis_url
):
    plain = RedisFrontier.connect(redis_url, f"opic:plain:{uuid.uuid4().hex}")
    assert type(plain.client) is redis.Redis and not plain.cluster
    plain.client.close()
    first = crawls()
    first.open()
    first.schedule([Entry(key(1), "http://x/1", 0, "s", b"r1")])
    assert isinstance(first.client, redis.RedisCluster) and first.cluster
    # Each node is a seed: a process pointed at any of them joins the same crawl.
    for url in node_urls(cluster):
        other = RedisFrontier.connect(url, first.key)
        try:
            assert other.cluster and other.open() is False
            assert other.status()["pending"] == 1
        finally:
            other.client.close()


def test_every_key_of_a_crawl_is_in_the_one_slot_of_its_namespace(cluster, crawls):
    """Redis 7 refuses, in cluster mode, a script that touches a key outside the slots of its
    KEYS; the script declares only the namespace and builds the others inside its hash tag.
    Here every key the crawl made, looked for on every node, hashes to that one slot, by the
    server's CLUSTER KEYSLOT and by the client's CRC16, and lives on the node serving it."""
    frontier = crawls()
    small_crawl(frontier)
    slot = key_slot(frontier.ns.encode())
    owner = cluster.get_node_from_key(frontier.ns)
    found: dict[str, list[bytes]] = {}
    for node in cluster.get_primaries():
        # (Any key that names the crawl, wherever the namespace is in its name.)
        found[node.name] = list(
            node.redis_connection.scan_iter(match="*" + _glob(frontier.ns) + "*", count=1000)
        )
    mine = found.pop(owner.name)
    assert all(not keys for keys in found.values()), found
    # Many kinds of keys, whatever the script's layout of the day (pages, queues, leases...),
    # and those the Python side writes itself.
    kinds = {k.decode("latin-1")[len(frontier.ns) + 1 :].split(":")[0] for k in mine}
    assert len(kinds) >= 8 and {"s", "meta", "workers", "series"} <= kinds, kinds
    assert {key_slot(k) for k in mine} == {slot}
    assert {owner.redis_connection.cluster("keyslot", k) for k in mine} == {slot}
    assert frontier.check() == []
    assert frontier.clear() == len(mine)
    assert not list(owner.redis_connection.scan_iter(match=_glob(frontier.ns) + ":*"))


def test_the_script_runs_on_a_node_that_never_saw_it(cluster, crawls):
    """redis-py sends EVALSHA to the node of KEYS[1]; a node without the script answers
    NOSCRIPT and the client loads it and calls again. One crawl per node, after every node
    forgot every script."""
    cluster.script_flush()
    sha = None
    for node in cluster.get_primaries():
        frontier = crawls(key_on(cluster, node, "opic:noscript"))
        sha = frontier._script.sha
        assert node.redis_connection.script_exists(sha) == [False]
        assert frontier.open() is True
        assert frontier.schedule([Entry(key(1), "http://x/1", 0, "s", b"r1")]) == [SCHEDULED]
        lease = frontier.pop()
        assert frontier.visit(lease, [Link(key(2), "http://x/2", payload=b"r2")]) is not None
        assert node.redis_connection.script_exists(sha) == [True]
        assert frontier.total_cash() == pytest.approx(1.0, abs=1e-12)
        cluster.script_flush()


def test_a_scan_reads_only_the_node_of_the_crawl(cluster, crawls):
    frontier = crawls()
    small_crawl(frontier)
    owner = cluster.get_node_from_key(frontier.ns)

    def scans() -> dict[str, int]:
        return {
            node.name: node.redis_connection.info("commandstats")
            .get("cmdstat_scan", {})
            .get("calls", 0)
            for node in cluster.get_primaries()
        }

    before = scans()
    assert frontier.check() == []
    assert frontier.clear() > 0
    after = scans()
    assert after[owner.name] > before[owner.name]
    assert {n: c for n, c in after.items() if n != owner.name} == {
        n: c for n, c in before.items() if n != owner.name
    }


def test_the_export_api_reads_a_crawl_on_a_cluster(crawls, redis_cluster_url):
    from scrapy_opic.export import open_state

    frontier = crawls()
    small_crawl(frontier)
    status = frontier.status()
    with open_state(f"{redis_cluster_url}#{frontier.key}") as state:
        assert state.n == status["pages"]
        assert sum(p.importance for p in state.pages()) == pytest.approx(1.0)
        assert state.meta["spider"] == "site"
    with pytest.raises(StoreError, match="no OPIC crawl"):
        open_state(f"{redis_cluster_url}#opic:nothing-here:{uuid.uuid4().hex}")
    with pytest.raises(StoreError, match="cannot read"):
        open_state(redis_cluster_url.replace("/0", "/1") + f"#{frontier.key}")
