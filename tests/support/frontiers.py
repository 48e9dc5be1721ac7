"""Building frontiers of every backend for the contract tests (one factory, so that one test
body runs over the in-memory, the sqlite and the Redis frontier, the latter on a plain server
and on a Redis Cluster)."""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.sqlite import SqliteStore
from scrapy_opic._backends.store import MemoryStore
from scrapy_opic._state import check_resume
from scrapy_opic.opic.config import CrawlConfig
from scrapy_opic.opic.constants import NEEDS_PAYLOAD
from scrapy_opic.opic.contract import Entry, Link, Visit

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
    """``make(**params)`` builds a fresh crawl of one store; ``cleanup()`` closes them."""

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
        **config,
    ) -> Crawl:
        config = CrawlConfig(
            epsilon=epsilon, refresh=refresh, continuous=continuous, window=window, **config
        )
        if self.kind == "memory":
            store = MemoryStore()
        elif self.kind == "sqlite":
            store = SqliteStore(
                self.tmp_path / f"state-{len(self.made)}.sqlite",
                resume=False,
                persist_requests=True,
                memory_requests=3,  # most payloads live on disk only
                encode=lambda payload: payload,
            )
        else:
            from scrapy_opic._backends.redis import RedisStore

            store = RedisStore.connect(self.redis_url, f"opic:test:{uuid.uuid4().hex}", lease=lease)
            config = config.replace(partitions=256)
        kw = {} if time_fn is None else {"time_fn": time_fn}
        crawl = Crawl(store, config, lease=lease, **kw)
        crawl.open({})
        self.made.append(crawl)
        return crawl

    def cleanup(self) -> None:
        for crawl in self.made:
            if self.kind.startswith("redis"):
                crawl.store.clear()
                crawl.store.client.close()
            else:
                crawl.store.close()


class L(NamedTuple):
    """A link as a test follows it: the :class:`Link` a visit pays, and the request (``payload``,
    with its ``priority`` and ``slot``) that the scheduler then files for it."""

    key: Any
    url: str
    weight: float = 1.0
    again: bool = False
    priority: int = 0
    slot: Any = ""
    payload: Any = None


def visit(frontier, lease, links, *args, **kw) -> Visit | None:
    """``frontier.visit`` over ``links``, then each link the visit says needs its request filed
    with its payload, as the scheduler files a callback's requests: the codes are those of the
    filing for those links (SCHEDULED, FORWARDED...)."""
    got = frontier.visit(lease, [Link(x.key, x.url, x.weight, x.again) for x in links], *args, **kw)
    if got is None:
        return None
    codes = list(got.codes)
    for n, (x, code) in enumerate(zip(links, got.codes)):
        payload = getattr(x, "payload", None)
        if code == NEEDS_PAYLOAD and payload is not None:
            entry = Entry(x.key, x.url, x.priority, x.slot, payload)
            codes[n] = frontier.schedule([entry], again=x.again)[0]
    return Visit(codes, got.importance)


def sqlite_crawl(
    path,
    resume: bool = False,
    *,
    persist_requests: bool = False,
    memory_requests: int = 1000,
    encode=lambda payload: payload,
    commit_visits: int = 500,
    commit_seconds: float = 10.0,
    meta: dict | None = None,
    time_fn=None,
    planner=None,
    **config,
) -> Crawl:
    """A crawl in the embedded store at ``path``, opened as the scheduler opens it (resumed if
    ``resume`` and there is a state), with the parameters ``config`` (on the wall clock
    ``time_fn``, with the refetch planner ``planner``, if given)."""
    store = SqliteStore(
        path,
        resume=resume,
        persist_requests=persist_requests,
        memory_requests=memory_requests,
        encode=encode,
    )
    kw = {} if time_fn is None else {"time_fn": time_fn}
    crawl = Crawl(
        store,
        CrawlConfig(**config),
        commit_visits=commit_visits,
        commit_seconds=commit_seconds,
        **kw,
    )
    if planner is not None:
        crawl.fleet.planner = planner
    try:
        saved = store.saved()
        if saved is not None:
            check_resume(crawl.config, None, saved, str(path))
        crawl.open({**(meta or {}), "crawl": dataclasses.asdict(crawl.config)})
    except BaseException:
        store.close(discard=True)
        raise
    return crawl


def one(crawl: Crawl):
    """The frontier of a crawl's one partition (an embedded or in-memory crawl)."""
    return crawl.fleet.parts[0].frontier


def take(crawl: Crawl, i: int):
    """A lease on pending page ``i`` of a crawl's one partition, as a pop would hand it out."""
    lease = crawl.fleet.parts[0].take(i)
    return lease._replace(token=(0, crawl.fleet.epochs[0], lease.token))


def redis_crawl(
    url: str,
    key: str,
    *,
    lease: float = 30.0,
    atomic: bool | None = None,
    meta: dict | None = None,
    commit_seconds: float = 10.0,
    **config,
) -> Crawl:
    """A process of the Redis crawl ``key`` at ``url``, opened as the scheduler opens it
    (created, or joined after the resume check), with the parameters ``config``;
    ``atomic=False``: a flush member by member, as on a Redis Cluster."""
    from scrapy_opic._backends.redis import RedisStore

    config.setdefault("partitions", 16)
    store = RedisStore.connect(url, key, lease=lease)
    if atomic is not None:
        store.atomic = atomic
    try:
        crawl = Crawl(store, CrawlConfig(**config), lease=lease, commit_seconds=commit_seconds)
        saved = store.saved()
        if saved is not None:
            check_resume(crawl.config, None, saved, key)
        crawl.open({**(meta or {}), "crawl": dataclasses.asdict(crawl.config)})
    except BaseException:
        store.client.close()
        raise
    return crawl
