"""What only the Redis frontier does, against a real redis-server on 127.0.0.1: processes that
share it never share a page nor lose cash, leases expire and are renewed, crawls are namespaced
in one hash slot, the export API reads a crawl, and its errors are one clear line. (The
Frontier contract itself runs over every backend in test_frontier.py; the Redis engine's numbers
are compared with the embedded one's in test_differential.py.)"""

from __future__ import annotations

import struct
import threading
import time
import uuid

import numpy as np
import pytest

from scrapy_opic.backends import StoreError
from scrapy_opic.backends.redis import (
    BUCKET_LOAD,
    LAYOUTS,
    SCALARS,
    PageLayout,
    RedisFrontier,
    lua_constants,
    pack_url,
    unpack_url,
)
from scrapy_opic.opic.constants import DEAD, FETCHED, SCHEDULED
from scrapy_opic.opic.frontier import Entry, Link
from scrapy_opic.simulator.graph import power_law_graph
from tests.frontiers import key

redis = pytest.importorskip("redis")


@pytest.fixture
def frontier(redis_url):
    """A fresh crawl under a key of its own; deleted afterwards."""
    f = RedisFrontier(redis.Redis.from_url(redis_url), f"opic:test:{uuid.uuid4().hex}", lease=30)
    yield f
    f.clear()
    f.client.close()


def entry(i: int) -> Entry:
    return Entry(key(i), f"http://x/{i}", 0, "s", b"req%d" % i)


def test_concurrent_processes_never_share_a_page_nor_lose_cash(frontier, redis_url):
    frontier.open(window="unbounded")
    g = power_law_graph(400, seed=6)
    node = {key(i): i for i in range(400)}
    frontier.schedule([entry(0)])
    lock = threading.Lock()
    in_flight: set[bytes] = set()
    visits: list[bytes] = []
    errors: list[str] = []

    def worker() -> None:
        mine = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=30)
        idle = 0
        while idle < 50:
            lease = mine.pop()
            if lease is None:
                idle += 1
                time.sleep(0.002)
                continue
            idle = 0
            with lock:
                if lease.key in in_flight:
                    errors.append("leased twice at once")
                in_flight.add(lease.key)
            i = node[lease.key]
            links = [Link(key(j), f"u{j}", payload=b"r") for j in g.children(i)]
            with lock:
                in_flight.discard(lease.key)
                visits.append(lease.key)
            ok = mine.fail(lease) if i % 7 == 0 else mine.visit(lease, links) is not None
            if not ok:
                errors.append("stale")
        mine.client.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    status = frontier.status()
    assert status["pending"] == status["leases"] == status["in_flight"] == 0
    assert len(visits) == len(set(visits)) == status["visited"]  # one-pass: each page once
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-12)
    assert frontier.check() == []


def test_a_dead_processs_lease_expires_and_the_page_keeps_its_cash(frontier):
    frontier.open(window="unbounded")
    frontier.schedule([entry(0)])
    first = frontier.pop()
    assert frontier.visit(first, [Link(key(1), "u1", payload=b"r1")]) is not None
    short = RedisFrontier(frontier.client, frontier.key, lease=0.2)
    dead = short.pop()  # leased for 0.2 s, never renewed: its process died
    assert dead.key == key(1)
    before = frontier.cash_of(key(1))
    other = RedisFrontier(frontier.client, frontier.key, lease=30)
    assert other.pop() is None  # leased: nobody else gets it meanwhile
    time.sleep(0.3)
    again = other.pop()  # reclaims the lease and pops the page in one call
    assert again.key == key(1) and again.payload == b"r1"
    assert frontier.check() == []
    status = frontier.status()
    assert status["reclaimed"] == 1 and status["leases"] == 1
    assert frontier.cash_of(key(1)) >= before > 0
    # The dead process's late answer changes nothing; the new holder's visit counts.
    assert short.visit(dead, [Link(key(2), "u2", payload=b"r2")]) is None
    assert frontier.status()["stale"] == 1 and frontier.status()["pages"] == 2
    assert other.visit(again, []) is not None
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-12)
    assert frontier.check() == []


def test_renewed_leases_do_not_expire(frontier):
    frontier.open()
    short = RedisFrontier(frontier.client, frontier.key, lease=0.3)
    short.schedule([entry(0)])
    lease = short.pop()
    for _ in range(4):
        time.sleep(0.15)
        assert short.renew([lease]) == 1
    assert short.pop() is None
    assert short.status()["reclaimed"] == 0
    assert short.renew([lease._replace(token="not-mine")]) == 0


def test_lease_tokens_carry_a_64_bit_process_tag(frontier):
    frontier.open()
    tags = {RedisFrontier(frontier.client, frontier.key)._tag for _ in range(100)}
    assert len(tags) == 100 and all(len(t) == 16 for t in tags)


def test_a_crawl_with_other_parameters_or_an_unsupported_window_is_refused(frontier):
    assert frontier.open(epsilon=0.15, window="unbounded") is True
    assert frontier.open(epsilon=0.15, window="unbounded") is False  # joining
    with pytest.raises(ValueError, match="eps"):
        frontier.open(epsilon=0.2, window="unbounded")
    with pytest.raises(ValueError, match="embedded-store only"):
        RedisFrontier(frontier.client, "opic:other").open(window="variable:4")


def test_keys_are_namespaced_in_one_hash_slot_and_cleared(frontier):
    frontier.open()
    other = RedisFrontier(frontier.client, frontier.key + ":neighbour")
    other.open()
    frontier.schedule([entry(0)])
    other.schedule([entry(0)])
    from redis.crc import key_slot

    mine = list(frontier.client.scan_iter(match=frontier.ns + ":*"))
    assert len(mine) >= 5 and all(k.startswith(frontier.ns.encode() + b":") for k in mine)
    # One Redis Cluster hash slot for the whole crawl: every script call is single-slot.
    assert len({key_slot(k) for k in mine}) == 1
    assert frontier.clear() == len(mine)
    assert other.status()["pending"] == 1  # the other crawl is untouched
    other.clear()


def test_a_crawl_started_by_the_previous_version_is_read_and_joined(frontier):
    """The previous version packed one global fewer (no wall clock of the last window step)."""
    frontier.open()
    frontier.schedule([entry(0)])
    blob = frontier.client.get(frontier.ns + ":s")
    old = blob[: 8 * (len(SCALARS) - 1)]
    frontier.client.set(frontier.ns + ":s", old)
    assert frontier.globals()["clock"] == 0.0
    assert frontier.open() is False
    lease = frontier.pop()
    assert frontier.visit(lease, [Link(key(1), "u1", payload=b"r1")]) is not None
    assert len(frontier.client.get(frontier.ns + ":s")) == 8 * len(SCALARS)
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-12)


def test_the_scripts_constants_are_generated_from_python():
    text = lua_constants()
    assert "local SCALARS = {'eps', 'refresh'," in text
    assert f"'<{'d' * 7}BI1I3'" in text and "local SCHEDULED = 1" in text
    assert f"local BUCKET_LOAD = {BUCKET_LOAD}" in text and 2 * BUCKET_LOAD < 128
    assert struct.calcsize("<" + "d" * len(SCALARS)) == 8 * len(SCALARS)


@pytest.mark.parametrize("mom, wall", [(False, False), (True, False), (False, True)])
def test_a_page_packs_under_redis_listpack_values_and_back(mom, wall):
    """A page of a crawl under 2**24 pages fits Redis's listpack values (64 bytes), however
    often it was visited: its bucket stays compact. Packing and unpacking (one page or many at
    once) give back every number."""
    layout = PageLayout(mom, wall)
    rng = np.random.default_rng(1)
    pages = []
    for v, ident in [(0, 0), (255, 255), (256, 256), (2**32 - 1, 2**24 - 1), (7, 2**32 - 1)]:
        page = {name: float(rng.normal()) for name in layout.doubles}
        page.update(v=v, id=ident, f=FETCHED | DEAD, st=3, ho=1, ha=0)
        pages.append(page)
        x = layout.pack(page)
        if ident < 2**24:
            assert len(x) <= 64
        back = layout.unpack(x)
        assert all(back[k] == page[k] for k in page)
    many = layout.unpack_many([layout.pack(p) for p in pages])
    for row, page in zip(many, pages):
        assert all(row[k] == page[k] for k in page)
    assert len(layout.pack({**pages[0], "id": 5_000_000, "v": 200})) == 8 * len(layout.doubles) + 5
    assert len(LAYOUTS) == 3


def test_a_pop_hands_back_the_url_the_request_was_scheduled_with(frontier):
    """A request may be stored without its URL (the scheduler's encoding leaves it out): the
    lease gives back the URL of the entry or link that brought it, also for a page first known
    under another spelling of its URL (one fingerprint), and a retry keeps it."""
    frontier.open()
    frontier.schedule([Entry(key(0), "https://www.a.org/x", 0, "s", b"r0")])
    lease = frontier.pop()
    assert lease.url == "https://www.a.org/x" and lease.payload == b"r0"
    assert frontier.visit(lease, [Link(key(1), "http://a.org/q?b=1&a=2")]) is not None
    assert frontier.schedule([Entry(key(1), "http://a.org/q?a=2&b=1", 0, "s", b"r1")]) == [1]
    assert frontier.check() == []
    lease = frontier.pop()
    assert lease.url == "http://a.org/q?a=2&b=1" and lease.payload == b"r1"
    assert frontier.retry(lease, Entry(key(1), "ignored", 0, "s", b"r1 again")) == SCHEDULED
    lease = frontier.pop()
    assert lease.url == "http://a.org/q?a=2&b=1" and lease.payload == b"r1 again"
    # A redirect to itself is a retry under the redirect's URL; its page keeps its first URL.
    assert frontier.redirect(lease, Entry(key(1), "http://a.org/q?b=1&a=2", 0, "t", b"r")) == 1
    lease = frontier.pop()
    assert lease.url == "http://a.org/q?b=1&a=2" and lease.slot == "t"
    assert frontier.check() == []
    assert frontier.visit(lease, []) is not None
    assert frontier.snapshot().urls == ["https://www.a.org/x", "http://a.org/q?b=1&a=2"]
    assert frontier.check() == []


def test_keys_of_any_length_find_their_pages_across_bucket_splits(frontier):
    """A key that is not a 20-byte fingerprint is placed by its SHA-1, a fingerprint by its own
    bits: the script and the Python side agree on every page's bucket while buckets split."""
    frontier.open()
    keys = [b"k%d" % i for i in range(150)] + [key(i) for i in range(150)]
    for lo in range(0, 300, 25):
        frontier.schedule(
            [Entry(k, f"http://x/{k.hex()}", 0, "s", b"r") for k in keys[lo : lo + 25]]
        )
    for _ in range(40):
        lease = frontier.pop()
        assert frontier.visit(lease, [Link(b"new%d" % len(lease.key), "http://x/n")]) is not None
    assert frontier.status()["pages"] > 4 * BUCKET_LOAD
    assert sum(frontier.status_of(k) == "visited" for k in keys) == 40
    assert all(frontier.status_of(k) in ("pending", "visited") for k in keys)
    assert frontier.check() == []


def test_urls_are_stored_without_their_usual_prefix_and_read_back():
    for url in [
        "https://www.example.org/a",
        "http://www.example.org/",
        "https://example.org/\u00e9",
        "http://x",
        "ftp://x/y",
        "",
        "\x01odd",
        "\x00",
    ]:
        data = pack_url(url)
        assert unpack_url(data) == url
    assert pack_url("https://www.example.org/a") == b"\x01example.org/a"


def test_the_export_api_reads_a_redis_crawl(frontier, redis_url, tmp_path):
    from scrapy_opic.export import open_state, write_export

    frontier.open()
    g = power_law_graph(80, seed=3)
    assert frontier.schedule([entry(0)]) == [SCHEDULED]
    for _ in range(50):
        lease = frontier.pop()
        if lease is None:
            break
        i = int(lease.payload.removeprefix(b"req"))
        frontier.visit(
            lease, [Link(key(j), f"http://x/{j}", payload=b"req%d" % j) for j in g.children(i)]
        )
    n = frontier.status()["pages"]
    location = f"{redis_url}#{frontier.key}"
    with open_state(location) as state:
        assert state.n == n
        top = state.top(5)
        assert [p.importance for p in top] == sorted((p.importance for p in top), reverse=True)
        assert sum(p.importance for p in state.pages()) == pytest.approx(1.0)
        assert state.pending == frontier.status()["pending"]
    out = tmp_path / "x.csv"
    with open_state(location) as state:
        assert write_export(state, str(out)) == n
    assert len(out.read_text().splitlines()) == n + 1


def test_reading_a_missing_or_unreachable_crawl_is_one_clear_error(redis_url):
    from scrapy_opic.export import open_state

    with pytest.raises(StoreError, match="no OPIC crawl"):
        open_state(f"{redis_url}#opic:nothing-here")
    with pytest.raises(StoreError, match="cannot read"):
        open_state("redis://127.0.0.1:1/0#opic:x")
    with pytest.raises(StoreError, match="after '#'"):
        open_state(redis_url)


def test_a_password_never_reaches_logs_errors_or_stored_settings():
    from scrapy_opic.backends import masked_url
    from scrapy_opic.settings import OpicSettings, OpicSettingsError

    assert masked_url("redis://:s3cret@db:6379/0") == "redis://***@db:6379/0"
    assert masked_url("rediss://user:s3cret@db/1") == "rediss://***@db/1"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    s = OpicSettings.from_settings({"OPIC_REDIS_URL": "redis://:s3cret@db:6379/0"})
    assert "s3cret" not in repr(s.as_dict()) and s.redis_url.endswith("@db:6379/0")
    with pytest.raises(OpicSettingsError) as bad:
        OpicSettings.from_settings({"OPIC_REDIS_URL": "http://:s3cret@db:6379/0"})
    assert "s3cret" not in str(bad.value)


@pytest.mark.parametrize("kw", [{"epsilon": 2.0}, {"epsilon": 0.0}, {"refresh": 5.0}])
def test_a_crawl_with_impossible_parameters_is_never_created(frontier, kw):
    """epsilon 2 would create cash at every visit: refused before anything reaches Redis."""
    with pytest.raises(ValueError, match="must be in"):
        frontier.open(**kw)
    assert frontier.globals() is None
