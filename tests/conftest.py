"""Test configuration: Hypothesis explores new examples on every local run; under CI (CI=true) it
replays a fixed set, so that a landing never depends on the luck of the draw."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import settings

from tests.support.frontiers import BACKENDS

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# -- a real Redis server for the Redis store's tests ----------------------------------------------


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    """The URL of a real redis-server on 127.0.0.1: ``OPIC_TEST_REDIS_URL`` if set (``.ci/run``
    starts one), else one started here from Debian's ``redis-server`` for the session. Without
    either the Redis tests are skipped, except under CI, where they fail."""
    url = os.environ.get("OPIC_TEST_REDIS_URL")
    if url:
        yield url
        return
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (.ci/run installs Debian's redis-server)")
        pytest.skip("redis-server is not installed")
    from tests.support.sites import RedisServer

    with RedisServer(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_binaries():
    """Skips the test when redis-server or redis-cli (Debian's redis-tools) is missing, except
    under CI, where it fails: what a test that starts its own Redis Cluster needs."""
    missing = [name for name in ("redis-server", "redis-cli") if shutil.which(name) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{' and '.join(missing)} not installed (.ci/run installs redis-server)")
        pytest.skip(f"{' and '.join(missing)} not installed")


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster_binaries, tmp_path_factory):
    """The URL of one node (a seed) of a real Redis Cluster of three masters on 127.0.0.1,
    started here for the session (:class:`tests.support.sites.RedisCluster`)."""
    from tests.support.sites import RedisCluster

    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as url:
        yield url


# -- a frontier of every backend, for the contract tests ------------------------------------------


@pytest.fixture(params=BACKENDS)
def frontiers(request, tmp_path):
    """A factory of fresh frontiers of one backend (the test runs once per backend)."""
    from tests.support.frontiers import Factory, redis_url_of

    factory = Factory(request.param, tmp_path, redis_url_of(request, request.param))
    yield factory
    factory.cleanup()
