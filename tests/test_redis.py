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


def test_the_crawl_is_not_over_while_a_visit_still_has_links_to_file(frontier, redis_url):
    """A visit whose link comes back NEEDS_PAYLOAD (the visiting process sent no request for it)
    leaves that link to be filed by its process a moment later. In that gap another process
    asking whether anything is pending must hear yes: else it closes, and the crawl loses it
    (or, if it was the last, the crawl ends with pages about to be filed)."""
    frontier.open(window="unbounded")
    other = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=30)
    other.open(window="unbounded")
    waiting = {"filed": False}
    frontier.ready = lambda: waiting["filed"]  # as the scheduler says: links still unfiled
    frontier.schedule([entry(0)])
    lease = frontier.pop()
    visit = frontier.visit(lease, [Link(key(1), "http://x/1")])  # no request sent along
    assert visit.codes == [2]  # NEEDS_PAYLOAD: this process files it next
    assert other.has_pending()  # the gap: nothing pending, nothing leased, yet not over
    frontier.maintain([])  # the upkeep renews the hold while the link is unfiled
    assert other.has_pending()
    waiting["filed"] = True
    assert frontier.schedule([entry(1)]) == [SCHEDULED]  # filed: the hold ends with it
    assert other.status()["holds"] == 0 and other.has_pending()  # (page 1 is pending)
    lease = other.pop()
    other.visit(lease, [])
    assert not other.has_pending()
    other.client.close()


def test_a_dead_processs_hold_expires(frontier, redis_url):
    """A process killed between its visit and the filing of the visit's links holds the crawl
    open no longer than a lease: the next pop after expiry clears it."""
    short = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=0.2)
    short.open(window="unbounded")
    short.ready = lambda: False
    short.schedule([entry(0)])
    short.visit(short.pop(), [Link(key(1), "http://x/1")])
    assert frontier.has_pending()
    time.sleep(0.3)  # the process "died": no renewal
    assert frontier.pop() is None  # (clears expired holds)
    assert not frontier.has_pending()
    short.client.close()


# -- fleet politeness ---------------------------------------------------------------------------


def rich_and_poor(frontier) -> tuple[list[bytes], list[bytes]]:
    """Pages 1-3 in slot "a" with more cash than pages 4-6 in slot "b" (a seed page in slot
    "s", visited, pays them 3:1)."""
    frontier.schedule([Entry(key(0), "http://s/0", 0, "s", b"r0")])
    lease = frontier.pop()
    rich = [Link(key(i), f"http://a/{i}", 3.0, 0.0, False, 0, "a", b"r%d" % i) for i in (1, 2, 3)]
    poor = [Link(key(i), f"http://b/{i}", 1.0, 0.0, False, 0, "b", b"r%d" % i) for i in (4, 5, 6)]
    frontier.visit(lease, rich + poor)
    return [link.key for link in rich], [link.key for link in poor]


def test_fleet_politeness_caps_a_slots_leases_for_all_processes(frontier, redis_url):
    """Two processes, each with room of its own, together lease at most the slot's concurrency;
    a pop then takes the richest page of a slot that has room (exact among them), and a slot
    opens again as soon as one of its leases ends."""
    frontier.open(window="unbounded")
    other = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=30)
    other.open(window="unbounded")
    frontier.set_politeness(2)
    rich, poor = rich_and_poor(frontier)
    first, second = frontier.pop(), other.pop()
    assert {first.key, second.key} <= set(rich)  # slot "a" is now full for the fleet
    third = frontier.pop()
    assert third.key in poor and third.slot == "b"
    assert frontier.check() == []
    other.visit(second, [])  # a lease of slot "a" ends: it has room again
    fourth = other.pop()
    assert fourth.key in rich
    assert frontier.check() == []
    assert frontier.politeness() == {"concurrency": 2, "delay": 0.0, "jitter": 0.0, "slots": {}}
    other.client.close()


def test_fleet_politeness_spaces_a_slots_leases_by_its_delay(frontier):
    frontier.open(window="unbounded")
    frontier.set_politeness(8, delay=0.3, slots={"b": (1, 0.0, 0.0)})
    rich, poor = rich_and_poor(frontier)
    t0 = time.monotonic()
    assert frontier.pop().key in rich
    assert frontier.pop().key in poor  # "a" waits for its delay; "b" has no delay...
    assert frontier.pop() is None  # ...but a concurrency of its own, 1
    assert frontier.check() == []
    while (lease := frontier.pop()) is None:
        time.sleep(0.01)
    assert lease.key in rich
    assert time.monotonic() - t0 >= 0.29  # (server time and this clock: a ms of rounding)
    frontier.set_politeness(0)  # switched off: every blocked slot is a head again
    assert frontier.check() == []
    assert frontier.pop().key in rich


def test_leases_that_expire_free_their_slot(frontier, redis_url):
    short = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=0.2)
    short.open(window="unbounded")
    short.set_politeness(1)
    rich, _ = rich_and_poor(short)
    assert short.pop().key in rich  # "a" full; its process dies
    time.sleep(0.3)
    assert frontier.pop().key in rich  # reclaimed: "a" freed, then leased again
    assert frontier.status()["reclaimed"] == 1 and frontier.check() == []
    short.client.close()


def test_opic_status_prints_a_fleets_figures_in_one_line(frontier, redis_url, tmp_path):
    """``scrapy opic-status`` reads a running crawl's counters (O(1) of its pages): what an
    operator watches, with --every, while the fleet crawls."""
    from tests.test_export import assert_one_line_error, scrapy_cmd

    frontier.open(window="unbounded")
    frontier.set_politeness(2, delay=1.5)
    rich_and_poor(frontier)
    frontier.pop()
    location = f"{redis_url}#{frontier.key}"
    proc = scrapy_cmd("opic-status", "--state", location, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert "7 pages known, 1 fetched (1 visits), 5 pending, 1 in flight" in line
    assert "fleet politeness 2/slot, 1.5 s: 1 slots busy, 2 without room" in line
    missing = scrapy_cmd("opic-status", "--state", location + "-none", cwd=tmp_path)
    assert_one_line_error(missing)
    assert "no OPIC crawl" in missing.stderr
