"""The Redis backend on a real Redis Cluster (three masters on 127.0.0.1, started for the session
by :class:`tests.support.sites.RedisCluster`): the client finds out at connect that it talks to a
cluster, every key of one member of a crawl is in one hash slot, the members spread over the
nodes, and a crawl reads back whole. (The contract suites run on the cluster as the
``redis-cluster`` backend of test_frontier.py and test_scheduler.py; Scrapy processes crawling
through a cluster, in test_redis_crawl.py; a cluster that is down, in test_bad_input.py.)"""

from __future__ import annotations

import uuid

import pytest

from scrapy_opic.opic.contract import Entry
from tests.support.frontiers import redis_crawl
from tests.test_redis import check, key, run, url

pytestmark = pytest.mark.slow  # (starts a Redis Cluster)

redis = pytest.importorskip("redis")
from redis.crc import key_slot  # noqa: E402


@pytest.fixture
def cluster(redis_cluster_url):
    client = redis.RedisCluster.from_url(redis_cluster_url)
    yield client
    client.close()


@pytest.fixture
def crawled(redis_cluster_url):
    """A crawl of 240 pages on six hosts made by one process through the cluster."""
    name = f"opic:cluster:{uuid.uuid4().hex}"
    f = redis_crawl(redis_cluster_url, name)
    f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    run([f])
    f.commit()
    yield f, name
    f.store.clear()
    f.store.client.close()


def test_any_node_of_a_cluster_gets_a_cluster_client_and_a_server_a_plain_one(cluster, redis_url):
    from scrapy_opic._backends.redis import open_client

    for node in cluster.get_primaries():
        client = open_client(f"redis://{node.host}:{node.port}/0")
        assert isinstance(client, redis.RedisCluster)
        client.close()
    plain = open_client(redis_url)
    assert type(plain) is redis.Redis
    plain.close()


def test_each_member_is_in_one_slot_and_the_members_spread_over_the_nodes(cluster, crawled):
    f, name = crawled
    keys = [k.decode() for node in cluster.get_primaries() for k in cluster.keys(target_nodes=node)]
    mine = [k for k in keys if k.startswith("{" + name)]
    tags = {k[: k.index("}") + 1] for k in mine}
    assert len(tags) > 3  # the crawl's own keys, the pool and the partitions in use
    for tag in tags:
        slots = {key_slot(k.encode()) for k in mine if k.startswith(tag)}
        assert len(slots) == 1, tag
    nodes = {cluster.get_node_from_key(tag).name for tag in tags}
    assert len(nodes) >= 2


def test_a_crawl_through_a_cluster_reads_back_whole(crawled, redis_cluster_url):
    from scrapy_opic.export import open_state

    f, name = crawled
    assert check(f.store.client, name) == []
    with open_state(f"{redis_cluster_url}#{name}") as state:
        assert state.n == f.figures()["pages"] and state.pending == 0
        assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
