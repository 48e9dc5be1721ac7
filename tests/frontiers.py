"""Building frontiers of every backend for the contract tests (one factory, so that one test
body runs over the in-memory, the sqlite and the Redis frontier)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from scrapy_opic.backends.sqlite import SqliteFrontier
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.opic.frontier import MemoryFrontier

BACKENDS = ("memory", "sqlite", "redis")


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
            import redis

            from scrapy_opic.backends.redis import RedisFrontier

            client = redis.Redis.from_url(self.redis_url)
            frontier = RedisFrontier(client, f"opic:test:{uuid.uuid4().hex}", lease=lease)
            frontier.open(epsilon=epsilon, refresh=refresh, continuous=continuous, window=window)
        self.made.append(frontier)
        return frontier

    def cleanup(self) -> None:
        for frontier in self.made:
            if self.kind == "redis":
                frontier.clear()
                frontier.client.close()
            elif self.kind == "sqlite":
                frontier.store.close()
