"""The Redis store (core/redisstore.py + opic.lua) against a real redis-server on 127.0.0.1:
the same numbers as the embedded engine, cash conservation under concurrent processes, the
global greedy pop, leases, and reading a Redis crawl with the export API."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid

import numpy as np
import pytest

from scrapy_opic.backends.redis import (
    DUPLICATE,
    NEEDS_REQUEST,
    SCHEDULED,
    Link,
    RedisFrontier,
)
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.simulator.graph import power_law_graph

redis = pytest.importorskip("redis")

N = 200


def fp(i: int) -> bytes:
    return hashlib.sha1(str(i).encode()).digest()


FPS = [fp(i) for i in range(N)]
NODE = {x: i for i, x in enumerate(FPS)}


@pytest.fixture
def frontier(redis_url):
    """A fresh crawl under a key of its own; deleted afterwards."""
    f = RedisFrontier(redis.Redis.from_url(redis_url), f"opic:test:{uuid.uuid4().hex}", lease=30)
    yield f
    f.clear()
    f.client.close()


def links_of(g, i: int, slot: str = "s") -> list[Link]:
    return [Link(FPS[j], f"http://x/{j}", data=b"req%d" % j, slot=slot) for j in g.children(i)]


def replay(frontier: RedisFrontier, window: str, continuous: bool, steps: int, **visit_kw):
    """Crawl a graph greedily on Redis and apply each visit to an embedded engine too."""
    refresh = 1.0 if continuous else 0.0
    frontier.open(epsilon=0.15, refresh=refresh, continuous=continuous, window=window)
    engine = OpicEngine(epsilon=0.15, refresh=refresh, window=window)
    g = power_law_graph(N, seed=3)
    assert frontier.schedule([(FPS[0], "http://x/0", 0, "s", b"req0")]) == [SCHEDULED]
    engine.page(FPS[0])
    done = 0
    while done < steps:
        got = frontier.pop("t")
        if got is None:
            break
        i = NODE[got.fp]
        kids = [int(j) for j in g.children(i)]
        links = links_of(g, i)
        weights = boosts = None
        if visit_kw:  # unequal weights and a boost on every third link
            weights = [1.0 + (j % 3) for j in kids]
            boosts = [2.0 if j % 3 == 0 else 0.0 for j in kids]
            links = [link._replace(weight=w, boost=b) for link, w, b in zip(links, weights, boosts)]
        visited = frontier.visit(
            got.fp,
            "t",
            links,
            plain=not visit_kw,
            boosts=bool(visit_kw),
            virtual_weight=visit_kw.get("virtual_weight", 0.0),
        )
        assert visited.ok
        engine.payout()  # the pop paid the virtual page out first
        children = [engine.page(FPS[j]) for j in kids]
        engine.visit(
            engine.id_of(FPS[i]),
            children,
            weights=weights,
            boosts=boosts,
            virtual_weight=visit_kw.get("virtual_weight", 0.0),
        )
        done += 1
    return engine, done


@pytest.mark.parametrize(
    "window,continuous,visit_kw",
    [
        ("unbounded", False, {}),
        ("unbounded:lemma", False, {"virtual_weight": 1.5}),
        ("interpolation:30", True, {}),
        ("interpolation:30", True, {"virtual_weight": 0.5}),
    ],
)
def test_a_crawl_on_redis_gives_the_embedded_engines_numbers(
    frontier, window, continuous, visit_kw
):
    engine, done = replay(frontier, window, continuous, 3 * N, **visit_kw)
    assert done > 100
    snap = frontier.snapshot()
    red = snap.engine()
    ids = [engine.id_of(k) for k in snap.keys]
    # The pop that found nothing left paid the virtual page out once more: so does the engine.
    if not continuous and done < 3 * N:
        engine.payout()
    assert red.n == engine.n
    np.testing.assert_allclose(red.cash(), engine.cash(ids), rtol=0, atol=1e-12)
    np.testing.assert_allclose(red.hist[: red.n], engine.hist[ids], rtol=0, atol=1e-12)
    np.testing.assert_allclose(red.importance(), engine.importance(ids), rtol=0, atol=1e-12)
    assert red.G == pytest.approx(engine.G, abs=1e-12)
    assert red.total_cash() == pytest.approx(1.0, abs=1e-12)
    assert red.visit_count == engine.visit_count == done
    assert frontier.check() == []


def test_the_greedy_pop_takes_the_richest_pending_page_of_the_crawl(frontier):
    frontier.open(window="unbounded")
    g = power_law_graph(N, seed=4)
    frontier.schedule([(FPS[0], "http://x/0", 0, "s", b"r")])
    for _ in range(60):
        snap = frontier.snapshot()
        engine = snap.engine()
        engine.payout()  # what the pop does first
        pending = [i for i, st in enumerate(snap.status) if st == 1]
        if not pending:
            break
        cash = engine.cash(pending)
        got = frontier.pop("t")
        popped = snap.keys.index(got.fp)
        assert engine.cash_of(popped) == pytest.approx(cash.max(), abs=1e-15)
        assert frontier.visit(got.fp, "t", links_of(g, NODE[got.fp])).ok
    assert frontier.check() == []


def test_priority_comes_before_cash_and_full_slots_are_skipped(frontier):
    frontier.open()
    frontier.schedule(
        [(FPS[1], "u1", 0, "a", b"r1"), (FPS[2], "u2", 5, "b", b"r2"), (FPS[3], "u3", 0, "c", b"r")]
    )
    got = frontier.pop("t1", full_slots=["b"])  # priority 5 waits: its slot is full
    assert got.fp in (FPS[1], FPS[3]) and got.slot in ("a", "c")
    assert frontier.pop("t2").fp == FPS[2]
    assert frontier.pop("t3", full_slots=["a", "c"]) is None
    assert frontier.check() == []


def test_concurrent_processes_never_share_a_page_nor_lose_cash(frontier, redis_url):
    frontier.open(window="unbounded")
    g = power_law_graph(400, seed=6)
    fps = [fp(i) for i in range(400)]
    node = {x: i for i, x in enumerate(fps)}
    frontier.schedule([(fps[0], "u0", 0, "s", b"r")])
    lock = threading.Lock()
    in_flight: set[bytes] = set()
    visits: list[bytes] = []
    errors: list[str] = []

    def worker(w: int) -> None:
        mine = RedisFrontier(redis.Redis.from_url(redis_url), frontier.key, lease=30)
        idle = 0
        while idle < 50:
            got = mine.pop(f"w{w}")
            if got is None:
                idle += 1
                time.sleep(0.002)
                continue
            idle = 0
            with lock:
                if got.fp in in_flight:
                    errors.append("leased twice at once")
                in_flight.add(got.fp)
            i = node[got.fp]
            links = [Link(fps[j], f"u{j}", data=b"r") for j in g.children(i)]
            with lock:
                in_flight.discard(got.fp)
                visits.append(got.fp)
            if i % 7 == 0:
                ok = mine.fail(got.fp, f"w{w}")
            else:
                ok = mine.visit(got.fp, f"w{w}", links).ok
            if not ok:
                errors.append("stale")
        mine.client.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
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


def test_every_outcome_keeps_total_cash_at_one(frontier):
    frontier.open(window="unbounded")
    g = power_law_graph(N, seed=2)
    frontier.schedule([(FPS[i], f"u{i}", 0, "s", b"r") for i in range(30)])
    got = frontier.pop("a")
    assert frontier.visit(got.fp, "a", links_of(g, 0)).ok
    total = frontier.total_cash
    outcomes = []
    for k in range(12):
        got = frontier.pop(f"t{k}")
        if got is None:
            break
        kind = k % 6
        if kind == 0:
            ok = frontier.fail(got.fp, f"t{k}")
        elif kind == 1:
            ok = frontier.forfeit(got.fp, f"t{k}")
        elif kind == 2:  # redirect to a page nobody knows yet
            ok, code = frontier.redirect(got.fp, f"t{k}", fp(10_000 + k), "new", 0, "s", b"r")
            assert code == SCHEDULED
        elif kind == 3:
            ok = frontier.retry(got.fp, f"t{k}", -1, "s", b"r")
        elif kind == 4:
            ok = frontier.release([(got.fp, f"t{k}")]) == 1
        else:
            ok = frontier.visit(got.fp, f"t{k}", links_of(g, NODE.get(got.fp, 0))).ok
        assert ok
        outcomes.append(kind)
        assert total() == pytest.approx(1.0, abs=1e-12), kind
        assert frontier.check() == [], kind
    assert len(outcomes) == 12
    # A page refused by a project's dupefilter before it was scheduled is forfeited.
    assert frontier.schedule([(fp(20_000), "x", 0, "s", b"")]) == [NEEDS_REQUEST]
    assert frontier.forfeit(fp(20_000))
    assert total() == pytest.approx(1.0, abs=1e-12)


def test_a_dead_processs_lease_expires_and_the_page_keeps_its_cash(frontier, redis_url):
    frontier.open(window="unbounded")
    frontier.schedule([(FPS[0], "u0", 0, "s", b"r0")])
    first = frontier.pop("dead")
    assert frontier.visit(first.fp, "dead", [Link(FPS[1], "u1", data=b"r1")]).ok
    short = RedisFrontier(frontier.client, frontier.key, lease=0.2)
    got = short.pop("dead")  # leased for 0.2 s, never renewed: its process died
    assert got.fp == FPS[1]
    before = frontier.snapshot().engine().cash_of(1)
    assert frontier.pop("other") is None  # leased: nobody else gets it meanwhile
    time.sleep(0.3)
    again = frontier.pop("other")  # reclaims the lease and pops the page in one call
    assert again.fp == FPS[1] and again.data == b"r1"
    assert frontier.check() == []
    status = frontier.status()
    assert status["reclaimed"] == 1 and status["leases"] == 1
    assert frontier.snapshot().engine().cash_of(1) >= before > 0
    # The dead process's late answer changes nothing; the new holder's visit counts.
    assert not frontier.visit(FPS[1], "dead", [Link(FPS[2], "u2", data=b"r2")]).ok
    assert frontier.status()["stale"] == 1 and frontier.status()["pages"] == 2
    assert frontier.visit(FPS[1], "other", []).ok
    assert frontier.total_cash() == pytest.approx(1.0, abs=1e-12)
    assert frontier.check() == []


def test_renewed_leases_do_not_expire(frontier):
    frontier.open()
    short = RedisFrontier(frontier.client, frontier.key, lease=0.3)
    short.schedule([(FPS[0], "u0", 0, "s", b"r0")])
    got = short.pop("alive")
    for _ in range(4):
        time.sleep(0.15)
        assert short.renew([(got.fp, "alive")]) == 1
    assert short.pop("other") is None
    assert short.status()["reclaimed"] == 0
    assert short.renew([(got.fp, "not-mine")]) == 0


def test_schedule_codes_and_dont_filter(frontier):
    frontier.open()
    codes = frontier.schedule([(FPS[0], "u0", 0, "s", b"r"), (FPS[0], "u0", 0, "s", b"r")])
    assert codes == [SCHEDULED, DUPLICATE]
    got = frontier.pop("t")
    assert frontier.visit(got.fp, "t", []).ok
    assert frontier.schedule([(FPS[0], "u0", 0, "s", b"r")]) == [DUPLICATE]  # one-pass
    assert frontier.schedule([(FPS[0], "u0", 0, "s", b"r")], again=True) == [SCHEDULED]
    assert frontier.check() == []


def test_a_crawl_with_other_parameters_or_an_unsupported_window_is_refused(frontier):
    assert frontier.open(epsilon=0.15, window="unbounded") is True
    assert frontier.open(epsilon=0.15, window="unbounded") is False  # joining
    with pytest.raises(ValueError, match="eps"):
        frontier.open(epsilon=0.2, window="unbounded")
    with pytest.raises(ValueError, match="embedded-store only"):
        RedisFrontier(frontier.client, "opic:other").open(window="variable:4")


def test_keys_are_namespaced_in_one_hash_slot_and_cleared(frontier, redis_url):
    frontier.open()
    other = RedisFrontier(frontier.client, frontier.key + ":neighbour")
    other.open()
    frontier.schedule([(FPS[0], "u0", 0, "s", b"r")])
    other.schedule([(FPS[0], "u0", 0, "s", b"r")])
    from redis.crc import key_slot

    mine = list(frontier.client.scan_iter(match=frontier.ns + ":*"))
    assert len(mine) >= 5 and all(k.startswith(frontier.ns.encode() + b":") for k in mine)
    # One Redis Cluster hash slot for the whole crawl: every script call is single-slot.
    assert len({key_slot(k) for k in mine}) == 1
    assert frontier.clear() == len(mine)
    assert other.status()["pending"] == 1  # the other crawl is untouched
    other.clear()


def test_the_export_api_reads_a_redis_crawl(frontier, redis_url, tmp_path):
    from scrapy_opic.export import open_state, write_export

    engine, done = replay(frontier, "unbounded", False, 50)
    location = f"{redis_url}#{frontier.key}"
    with open_state(location) as state:
        assert state.n == engine.n
        top = state.top(5)
        assert [p.importance for p in top] == sorted((p.importance for p in top), reverse=True)
        assert sum(p.importance for p in state.pages()) == pytest.approx(1.0)
        assert state.pending == frontier.status()["pending"]
    out = tmp_path / "x.csv"
    with open_state(location) as state:
        assert write_export(state, str(out)) == engine.n
    assert len(out.read_text().splitlines()) == engine.n + 1


def test_reading_a_missing_or_unreachable_crawl_is_one_clear_error(redis_url):
    from scrapy_opic.backends.sqlite import StoreError
    from scrapy_opic.export import open_state

    with pytest.raises(StoreError, match="no OPIC crawl"):
        open_state(f"{redis_url}#opic:nothing-here")
    with pytest.raises(StoreError, match="cannot read"):
        open_state("redis://127.0.0.1:1/0#opic:x")
    with pytest.raises(StoreError, match="after '#'"):
        open_state(redis_url)


def test_a_password_never_reaches_logs_errors_or_stored_settings():
    from scrapy_opic.backends.redis import masked_url
    from scrapy_opic.settings import OpicSettings

    assert masked_url("redis://:s3cret@db:6379/0") == "redis://***@db:6379/0"
    assert masked_url("rediss://user:s3cret@db/1") == "rediss://***@db/1"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    s = OpicSettings.from_settings({"OPIC_REDIS_URL": "redis://:s3cret@db:6379/0"})
    assert "s3cret" not in repr(s.as_dict()) and s.redis_url.endswith("@db:6379/0")


def test_the_pop_skips_full_slots_without_missing_a_richer_page(frontier):
    """With some download slots full, the pop takes the richest page whose slot has room,
    across both queues (pages fetched before and pages never fetched)."""
    import random

    frontier.open(epsilon=0.15, refresh=1.0, continuous=True, window="interpolation:30")
    rnd = random.Random(7)
    slots = ["a", "b", "c", "d"]
    seeds = [(FPS[i], f"u{i}", 0, rnd.choice(slots), b"r") for i in range(40)]
    frontier.schedule(seeds)
    for step in range(80):
        full = rnd.sample(slots, rnd.randint(0, 3))
        snap = frontier.snapshot()
        engine = snap.engine()
        engine.payout()  # what the pop does first
        slot_of = {
            k: frontier.client.hget((frontier.ns + ":p:").encode() + k, "sl").decode()
            for k in snap.keys
        }
        room = [
            i for i, st in enumerate(snap.status) if st == 1 and slot_of[snap.keys[i]] not in full
        ]
        got = frontier.pop(f"t{step}", full_slots=full)
        if not room:
            assert got is None
            continue
        best = max(engine.cash_of(i) for i in room)
        popped = snap.keys.index(got.fp)
        assert got.slot not in full
        assert engine.cash_of(popped) == pytest.approx(best, abs=1e-15), step
        links = [
            Link(FPS[j], f"u{j}", weight=rnd.random(), slot=rnd.choice(slots), data=b"r")
            for j in rnd.sample(range(40), 4)
        ]
        assert frontier.visit(got.fp, f"t{step}", links, plain=False).ok
    assert frontier.check() == []


def test_a_page_with_room_is_found_behind_any_number_of_pages_in_full_slots(frontier):
    frontier.open(refresh=1.0)
    frontier.schedule([(fp(-1), "seed", 0, "s", b"r")])
    assert frontier.pop("t0")
    big = [Link(fp(i), f"big{i}", 2.0, slot="big.example", data=b"r") for i in range(150)]
    small = Link(fp(1000), "small", 1.0, slot="small.example", data=b"r")
    low = Link(fp(1001), "low", 1.0, priority=-1, slot="small.example", data=b"r")
    assert frontier.visit(fp(-1), "t0", [*big, small, low], plain=False).ok
    got = frontier.pop("t1", full_slots=["big.example"])
    assert got.fp == fp(1000)  # the only page of priority 0 whose slot has room
    assert frontier.pop("t2", full_slots=["big.example", "small.example"]) is None
    assert frontier.check() == []
