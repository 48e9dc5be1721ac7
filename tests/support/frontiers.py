"""Building frontiers of every backend for the contract tests (one factory, so that one test
body runs over the in-memory, the sqlite and the Redis frontier, the latter on a plain server
and on a Redis Cluster)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from scrapy_opic._backends.sqlite import SqliteFrontier
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.opic.frontier import MemoryFrontier

#: Backends of the contract suites; the Redis Cluster (three servers to start) only in the
#: whole suite, not in ``-m "not slow"``.
CLUSTER = pytest.param("redis-cluster", marks=pytest.mark.slow)
BACKENDS = ("memory", "sqlite", "redis", CLUSTER)


def redis_url_of(request, backend: str) -> str | None:
    """The server of a backend, from the session's fixtures (``request`` is a test's): a plain
    redis-server for ``redis``, a node of a Redis Cluster for ``redis-cluster`` (the same
    frontier code, which finds out it is a cluster when it connects), else none."""
    if backend == "redis":
        return request.getfixturevalue("redis_url")
    if backend == "redis-cluster":
        return request.getfixturevalue("redis_cluster_url")
    return None


def key(i: int) -> bytes:
    """A 20-byte key, like a request fingerprint."""
    return hashlib.sha1(str(i).encode()).digest()


class Factory:
    """``make(**params)`` builds a fresh frontier of one backend; ``cleanup()`` closes them."""

    def __init__(self, kind: str, tmp_path: Path, redis_url: str | None = None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.redis_url = redis_url
        self.made: list = []

    def make(
        self,
        epsilon: float = 0.15,
        refresh: float = 0.0,
        continuous: bool = False,
        window: str = "unbounded",
        lease: float = 30.0,
        time_fn=None,
    ):
        if self.kind == "memory":
            kw = {} if time_fn is None else {"time_fn": time_fn}
            engine = OpicEngine(epsilon=epsilon, refresh=refresh, window=window, **kw)
            frontier = MemoryFrontier(engine, "greedy", continuous)
        elif self.kind == "sqlite":
            frontier = SqliteFrontier.open(
                self.tmp_path / f"state-{len(self.made)}.sqlite",
                resume=False,
                epsilon=epsilon,
                refresh=refresh,
                window=window,
                continuous=continuous,
                persist_requests=True,
                memory_requests=3,  # most payloads live on disk only
                encode=lambda payload: payload,
            )
        else:
            from scrapy_opic._backends.redis import RedisFrontier

            key = f"opic:test:{uuid.uuid4().hex}"
            frontier = RedisFrontier.connect(self.redis_url, key, lease=lease)
            frontier.open(epsilon=epsilon, refresh=refresh, continuous=continuous, window=window)
        self.made.append(frontier)
        return frontier

    def cleanup(self) -> None:
        for frontier in self.made:
            if self.kind.startswith("redis"):
                frontier.clear()
                frontier.client.close()
            elif self.kind == "sqlite":
                frontier.store.close()
