"""The Redis backend against a real server: processes (here, several Crawl objects in
one Python process) share a crawl's partitions through leases; a write of a process that lost
its partition is refused; a process that dies is taken over and the crawl goes on with total
cash 1; a crawl of another layout, partition count or parameters is refused in one line; an
emptied Redis stops the crawl. (The frontier and scheduler contract suites run on this backend
as the ``redis`` and ``redis-cluster`` backends of test_frontier.py and test_scheduler.py.)"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from scrapy_opic._backends import StoreError
from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.redis_state import RedisSnapshot, fleet_status, member_key, unpack
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.engine import Share
from scrapy_opic.opic.messages import POOL
from scrapy_opic.opic.routing import partition_of
from tests.support.fleet import key, partition_problems, sequence_problems
from tests.support.frontiers import L, redis_crawl, visit

redis = pytest.importorskip("redis")

HOSTS = [f"h{i}.example" for i in range(6)]


def url(i: int) -> str:
    return f"http://{HOSTS[i % len(HOSTS)]}/p{i}"


def links_of(i: int) -> list[int]:
    """Each page links to a few pages of its host and of others (a site of 240 pages)."""
    return sorted({(i * 7 + 1) % 240, (i * 13 + 5) % 240, (i + 6) % 240, (i * 3 + 2) % 240})


@pytest.fixture(params=["atomic", pytest.param("per-member", marks=pytest.mark.slow)])
def crawl(redis_url, request):
    """``crawl(**kw)``: a new process of the crawl under one fresh key (``open()`` done);
    every process is closed and the keys deleted after. Each test runs twice: with the
    atomic flush of a plain Redis, and with a script per member as on a Redis Cluster."""
    name = f"opic:test:{uuid.uuid4().hex}"
    made: list[Crawl] = []

    def make(lease: float = 30.0, **kw) -> Crawl:
        f = redis_crawl(redis_url, name, lease=lease, atomic=request.param == "atomic", **kw)
        made.append(f)
        return f

    make.key = name
    make.url = redis_url
    yield make
    for f in made:
        if f.held:
            for k in list(f.held):  # (closing would write: just let go)
                f.store.client.delete(member_key(name, k, "lease"))
        f.store.clear()
        f.store.client.close()


def step(f: Crawl) -> int | None:
    """Pop and visit one page of ``f``; its number."""
    lease = f.pop()
    if lease is None:
        return None
    i = int(lease.url.rsplit("/p", 1)[1])
    links = [L(key(url(j)), url(j), payload=b"r%d" % j) for j in links_of(i)]
    assert visit(f, lease, links) is not None
    return i


def run(fleet: list[Crawl], until_idle: bool = True, steps: int = 10_000) -> list[int]:
    """Crawl with every process in turn, each flushing (and rebalancing) as its scheduler's
    upkeep would; returns the pages visited, in order."""
    done = []
    idle = 0
    for _ in range(steps):
        busy = False
        for f in fleet:
            for _ in range(3):
                i = step(f)
                if i is not None:
                    done.append(i)
                    busy = True
            f._next_rebalance = 0.0 if not busy else f._next_rebalance
            f.maintain([])
        if until_idle:
            idle = 0 if busy else idle + 1
            if idle >= 3 and not any(f.has_pending() for f in fleet):
                break
    return done


def check(client, name: str) -> list[str]:
    """The invariants of the crawl as stored (the test's oracle): total cash 1, each
    partition's frontier consistent, its pages where their URLs say, no numbered message
    lost or applied twice."""
    snap = RedisSnapshot(client, name)
    out = []
    total = snap.total_cash()
    if abs(total - 1.0) > 1e-9:
        out.append(f"total cash {total!r}")
    for part in snap.parts:
        out += partition_problems(part)
    members = {p.k: p for p in snap.parts}
    members[POOL] = snap.pool
    moving = [m for mem in members.values() for m in mem.box.unconfirmed.values()]
    for k in members:
        for _id, fields in client.xrange(f"{{{name}:{'pool' if k == POOL else k}}}:in"):
            moving += unpack(fields[b"m"])[0]
    return out + sequence_problems(members, moving)


def test_a_crawl_alone_owns_every_partition_it_meets_and_ends_with_cash_one(crawl):
    f = crawl()
    f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    done = run([f])
    assert sorted(set(done)) == sorted(set(done) | {0}) and len(done) == len(set(done))
    assert len(done) == f.figures()["visited"] and f.figures()["pending"] == 0
    f.commit()
    assert check(f.store.client, crawl.key) == []
    owned = set(f.held)
    assert POOL in owned and owned - {POOL} == {partition_of(url(i), key(url(i)), 16) for i in done}


def test_processes_share_the_partitions_and_every_page_is_fetched_once(crawl):
    a = crawl()
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    done = run([a], steps=5, until_idle=False)  # a alone: it owns what it met
    b, c = crawl(), crawl()
    fleet = [a, b, c]
    for _ in range(40):  # they join: a hands partitions over, b and c take them
        for f in fleet:
            f.quiet = 0.0
            f._next_rebalance = 0.0
            f.maintain([])
    owners = [set(f.held) for f in fleet]
    assert all(owners) and not (
        owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2]
    )
    done += run(fleet)
    assert len(done) == len(set(done))  # no page twice
    assert {0} | {j for i in done for j in links_of(i)} <= set(done)  # every page found
    for f in fleet:
        f.commit()
    assert check(a.store.client, crawl.key) == []
    assert (
        sum(1 for f in fleet if any(p.frontier.engine.visit_count for p in f.fleet.parts.values()))
        >= 2
    )


def test_a_process_that_lost_its_partition_cannot_write_it(crawl):
    a = crawl(lease=0.4)
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    k = partition_of(url(0), key(url(0)), 16)
    lease = a.pop()
    time.sleep(0.5)  # a stalls past its lease
    b = crawl()
    assert b._claim(k)  # b takes the partition over, from what a wrote
    assert b.pop().url == url(0)  # and fetches the page again
    assert visit(a, lease, []) is not None  # (a does not know yet)
    a.flush()  # its write is refused: a lets the partition go
    assert k not in a.fleet.parts and k in b.fleet.parts
    b.commit()
    assert check(b.store.client, crawl.key) == []


def test_a_page_sent_before_a_stall_waits_in_doubt_for_the_outcome_its_sender_tells_late(
    crawl,
):
    """A page's request goes out once the record of its lease is durable. Its process stalls
    past its lease before its outcome is written: the partition's next owner holds the page
    in doubt (it never pops it), and when the stalled process runs again, its outcome (a
    visit, with the requests of its links) settles the page there. The page is fetched once,
    its links are all fetched, and cash is 1."""
    a = crawl(lease=0.4)
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    k = partition_of(url(0), key(url(0)), 16)
    lease = a.pop()
    assert a.durable(lease) is None  # (its record is not written yet: not sent)
    a.flush_leases()  # (the write for requests waiting to go out)
    assert a.durable(lease) is True  # (sent now)
    time.sleep(0.5)  # a stalls past its lease
    b = crawl(lease=0.4)
    assert k in b.held or b._claim(k)  # (b may take it as it joins: a is silent)
    assert key(url(0)) in b.fleet.parts[k].doubt
    assert b.pop() is None  # in doubt: not fetched a second time
    links = [L(key(url(j)), url(j), payload=b"r%d" % j) for j in links_of(0)]
    assert visit(a, lease, links) is not None  # (a does not know yet)
    a.flush()  # refused: a lets its partitions go, and tells their owners what it did
    assert k not in a.fleet.parts
    a.flush()
    a.close([])
    b.flush()  # b reads its inbox
    assert not b.fleet.parts[k].doubt and b.fleet.late_outcomes == 1
    b._next_rebalance = 0.0
    done = run([b])
    assert 0 not in done
    assert set(links_of(0)) <= set(done) and len(done) == len(set(done))
    b.commit()
    assert check(b.store.client, crawl.key) == []


def test_a_page_in_doubt_whose_sender_never_tells_is_fetched_again_after_its_time(crawl):
    """A process killed after its request went out never tells the outcome: its page stays in
    doubt (through a checkpoint and a change of owner), then waits again once the partition's
    owner has held it :data:`DOUBT_LEASES` leases."""
    from scrapy_opic._backends.crawl import DOUBT_LEASES

    a = crawl(lease=0.3)
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    k = partition_of(url(0), key(url(0)), 16)
    a.flush()
    assert a.durable(a.pop()) is None
    a.flush()
    a.store.client.close()  # killed
    time.sleep(0.4)
    b = crawl(lease=0.3)
    assert k in b.held or b._claim(k)
    assert b.pop() is None
    b.close([])  # (a checkpoint, the page in flight in it)
    c = crawl(lease=0.3)
    assert k in c.held or c._claim(k)
    assert c.pop() is None
    c._next_rebalance = 0.0
    c.maintain([])
    assert c.pop() is None  # (not yet)
    c.held[k].claimed_at -= DOUBT_LEASES * 0.3
    c._next_rebalance = 0.0
    c.maintain([])
    assert c.fleet.doubts_ended == 1
    again = c.pop()
    assert again is not None and again.url == url(0)
    assert visit(c, again, []) is not None
    c.commit()
    assert check(c.store.client, crawl.key) == []


def test_a_process_that_lost_one_partition_lets_all_go(crawl):
    """On a plain Redis a process applies the messages between its partitions at once and
    writes them all in one step: when that write is refused for one partition (the process
    stalled past its lease), what the others applied from it may be undone by its new owner,
    so the process lets every partition go, to be read back from Redis. (Member by member, a
    message is applied only once durable: the process lets that partition go alone.)"""
    a = crawl()
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    k = partition_of(url(0), key(url(0)), 16)
    lease = a.pop()
    for j in links_of(0):  # (alone, a owns the partitions of the page's links)
        a.fleet.owner_of(partition_of(url(j), key(url(j)), 16))
    assert len(a.fleet.parts) > 1
    a.store.client.delete(
        member_key(crawl.key, k, "lease")
    )  # a's lease of k lapsed while it stalled
    b = crawl()
    assert b._claim(k)
    links = [L(key(url(j)), url(j), payload=b"r") for j in links_of(0)]
    assert visit(a, lease, links) is not None  # (a does not know: its links are paid at once)
    a.flush()
    if a.store.atomic:
        assert not a.held and not a.fleet.parts
    else:
        assert k not in a.held and a.fleet.parts
    a.close([])
    b._next_rebalance = 0.0
    done = run([b])
    assert 0 in done  # fetched again by b
    b.commit()
    assert check(b.store.client, crawl.key) == []


def test_a_process_killed_at_any_moment_is_taken_over_and_the_crawl_finishes(crawl):
    """A process dies with records not written and messages not sent: its partitions are free
    when their leases end, another process loads them (checkpoint, journal) and sends again
    what was not known delivered; every page is fetched, none more than twice, cash 1."""
    a, b = crawl(lease=0.5), crawl(lease=0.5)
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    for f in (a, b):
        f._next_rebalance = 0.0
        f.maintain([])
    fetched = run([a, b], until_idle=False, steps=15)
    for _ in range(5):  # work a does and never writes
        i = step(a)
        if i is not None:
            fetched.append(i)
    victim = set(a.held)
    a.store.client.close()  # killed: no close(), no more writes
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # (b goes on: its upkeep renews its own leases)
        b.maintain([])
        time.sleep(0.05)
    b.quiet = 0.0
    b._next_rebalance = 0.0
    b.maintain([])
    assert victim <= set(b.held)  # b took a's partitions over
    fetched += run([b])
    assert {0} | {j for i in fetched for j in links_of(i)} <= set(fetched)
    assert max(fetched.count(i) for i in set(fetched)) <= 2
    b.commit()
    assert check(b.store.client, crawl.key) == []


def test_an_inbox_entry_goes_only_with_the_write_of_what_applied_it(crawl):
    """A process reads a message from its inbox, applies it, and is killed before writing:
    the entry is still there for the partition's next owner (deleted only in the write that
    records its application)."""
    a, b = crawl(lease=0.3), crawl()
    k0 = partition_of(url(0), key(url(0)), 16)
    j = next(j for j in links_of(0) if partition_of(url(j), key(url(j)), 16) != k0)
    kt = partition_of(url(j), key(url(j)), 16)
    assert b._claim(k0) and a._claim(kt)
    b.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    lease = b.pop()
    assert visit(b, lease, [L(key(url(j)), url(j), payload=b"r")]) is not None
    b.flush()
    b.flush()  # (member by member, the message leaves once its record is written)
    a.flush()
    assert a.held[kt].consumed  # applied, not written
    a.store.client.close()  # killed
    time.sleep(0.4)
    assert b._claim(kt)
    b.commit()
    assert b.status_of(key(url(j))) == "pending"
    assert check(b.store.client, crawl.key) == []


def test_a_write_whose_reply_was_lost_is_not_made_twice(crawl):
    """A flush's reply lost on the way (a connection reset after the server ran it): the next
    flush finds the journal longer than it thought by what it sent, and goes on."""
    f = crawl()
    f.schedule([Entry(key(url(i)), url(i), 0, "", b"r") for i in range(0, 60, 6)])
    f.commit()
    k = next(iter(f.fleet.parts))
    held = f.held[k]
    other = crawl()  # (owns a partition f's links lead to: f's messages go through Redis)
    assert other._claim(partition_of(url(1), key(url(1)), 16))
    f._rebalance()
    for _ in range(3):
        step(f)
    pipeline = f.store.client.pipeline

    def lost_reply(*args, **kw):
        pipe = pipeline(*args, **kw)
        execute = pipe.execute

        def run_then_fail(*a, **k):
            execute(*a, **k)
            raise redis.ConnectionError("reply lost")

        pipe.execute = run_then_fail
        return pipe

    f.store.client.pipeline = lost_reply
    with pytest.raises(redis.ConnectionError):
        f.flush()
    f.store.client.pipeline = pipeline
    step(f)
    f.commit()
    assert k in f.fleet.parts and held.log == f.store.client.llen(member_key(crawl.key, k, "log"))
    other.flush()
    other.commit()
    assert check(f.store.client, crawl.key) == []


def test_a_crawl_of_other_parameters_partitions_or_layout_is_refused(crawl, redis_url):
    a = crawl(epsilon=0.15)
    with pytest.raises(StoreError, match=r"other settings \(OPIC_EPSILON=0.15 there, 0.3 here\)"):
        crawl(epsilon=0.3)
    with pytest.raises(StoreError, match="has 16 partitions by host, not 32 by host"):
        crawl(partitions=32)
    with pytest.raises(StoreError, match="has 16 partitions by host, not 16 by url"):
        crawl(by="url")
    client = redis.Redis.from_url(redis_url)
    old = f"opic:old:{uuid.uuid4().hex}"
    client.hset("{" + old + "}:meta", "layout", "20261124")  # (an earlier layout)
    try:
        with pytest.raises(StoreError, match="made by another version of scrapy-opic"):
            redis_crawl(redis_url, old)
    finally:
        client.delete("{" + old + "}:meta")
        client.close()
    assert a.held  # (the first process is unharmed)


def test_a_crawl_with_impossible_parameters_is_never_created(crawl, redis_url):
    name = f"opic:never:{uuid.uuid4().hex}"
    for kw in ({"epsilon": 2.0}, {"epsilon": 0.0}, {"refresh": 5.0}):
        with pytest.raises(ValueError, match="must be in"):
            redis_crawl(redis_url, name, **kw)
    client = redis.Redis.from_url(redis_url)
    assert not client.exists("{" + name + "}:meta")
    client.close()


@pytest.mark.slow  # (starts a Redis server of its own)
def test_an_emptied_redis_stops_the_crawl(tmp_path):
    """The server lost every key (restarted without persistence): the process stops with one
    line instead of making a new crawl out of what it holds."""
    from tests.support.sites import RedisServer

    with RedisServer(tmp_path) as server_url:
        f = redis_crawl(server_url, "opic:emptied", lease=5.0)
        f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
        f.commit()
        f.store.client.flushdb()
        f._next_rebalance = 0.0
        with pytest.raises(StoreError, match="is gone from Redis"):
            f.maintain([])
        assert f.store.client.dbsize() == 0  # nothing written back
        f.store.client.close()


def keys_of(client, name: str) -> list[bytes]:
    """Every key of the crawl ``name`` (under its tag or a member's)."""
    return sorted({*client.keys("{" + name + "}:*"), *client.keys("{" + name + ":*")})


def empty(client, name: str) -> None:
    """What FLUSHDB does to the crawl ``name`` (without touching the other tests' keys)."""
    if keys := keys_of(client, name):
        client.delete(*keys)


@pytest.mark.parametrize(
    "when", ["first second", "with writes", "renewals only", "making", "a verdict"]
)
def test_an_emptied_redis_is_caught_whenever_it_happens_and_nothing_is_written(
    crawl, when, monkeypatch
):
    """The crawl's keys vanish: right after it opened, mid-crawl with records to write, with
    only leases to renew, or while a partition is being made (between its lease and its
    adoption). The process finds out at its next step with one line that says nothing is
    left, and writes no key into the emptied server (no lease, no partition, no meta, no
    verdict on a host's validators)."""
    import scrapy_opic._backends.redis as redis_store
    from scrapy_opic._backends import CrawlGone

    a = crawl()
    client = a.store.client
    if when != "first second":
        a.schedule([Entry(key(url(i)), url(i), 0, "", b"seed") for i in range(3)])
        run([a], until_idle=False, steps=4)
        a.commit()
    with pytest.raises(CrawlGone, match=r"is gone from Redis .* nothing of it is left"):
        if when == "making":
            made = redis_store.load_member

            def emptied_meanwhile(*args):
                empty(client, crawl.key)
                return made(*args)

            monkeypatch.setattr(redis_store, "load_member", emptied_meanwhile)
            fresh = next(
                u
                for u in (f"http://new{n}.example/p" for n in range(100))
                if partition_of(u, key(u), 16) not in a.fleet.parts
            )
            a.schedule([Entry(key(fresh), fresh, 0, "", b"new")])
        else:
            empty(client, crawl.key)
            if when == "a verdict":  # (on a host's validators, kept for the whole crawl)
                a.store.judge("liar.example", {"false_304": True})
            if when == "renewals only":
                for h in a.held.values():
                    h.renew_at = 0.0
                a.flush()
            elif when == "with writes":
                a.schedule([Entry(key(url(i)), url(i), 0, "", b"more") for i in range(3, 40)])
                a.flush()
            a._next_rebalance = 0.0
            a.maintain([])
    assert keys_of(client, crawl.key) == []


def test_what_is_left_of_an_emptied_crawl_is_called_incomplete_and_never_joined(crawl):
    """Keys of a crawl without its meta (what an emptied server got from a process of an
    earlier version, say): a process refuses to take them for a new crawl, and the status
    and a join say the crawl is incomplete."""
    a = crawl()
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    client = a.store.client
    client.delete("{" + crawl.key + "}:meta")
    with pytest.raises(StoreError, match="is incomplete .* start afresh"):
        crawl()
    client.hset("{" + crawl.key + "}:meta", "endowed", 0)
    with pytest.raises(StoreError, match="is incomplete"):
        fleet_status(client, crawl.key)
    with pytest.raises(StoreError, match="is incomplete"):
        crawl()


def test_a_crawl_of_an_older_version_is_named_and_reset_removes_it(redis_url):
    """A crawl an earlier version made (its meta a string, its keys of another layout): one
    line that names the way forward (no raw WRONGTYPE), and the reset that line names
    deletes every key of it."""
    from scrapy_opic._backends.redis import RedisStore

    client = redis.Redis.from_url(redis_url)
    name = f"opic:older:{uuid.uuid4().hex}"
    client.set("{" + name + "}:meta", '{"layout": 20261124.0}')
    client.set("{" + name + "}:s", b"state")
    client.hset("{" + name + "}:p:0", "x", 1)
    client.rpush("{" + name + ":3}:log", b"x")
    try:
        with pytest.raises(StoreError, match="another version of scrapy-opic: start afresh"):
            redis_crawl(redis_url, name)
        assert RedisStore(client, name).clear() == 4
        assert keys_of(client, name) == []
    finally:
        empty(client, name)
        client.close()


def test_the_status_of_a_fleet_counts_its_processes_and_partitions(crawl):
    a, b = crawl(), crawl()
    a.schedule([Entry(key(url(i)), url(i), 0, "", b"r") for i in range(12)])
    for f in (a, b, a, b):
        f._next_rebalance = 0.0
        f.maintain([])
    a.commit()
    b.commit()
    status = fleet_status(a.store.client, crawl.key)
    assert status["pages"] == 12 and status["pending"] == 12
    assert status["workers"] == 2 and status["partitions"] == len(
        {partition_of(url(i), key(url(i)), 16) for i in range(12)}
    )
    assert sum(status["owners"].values()) == status["partitions"] + 1  # (the pool too)
    from scrapy_opic._commands.status import status_line

    run([a, b], steps=4, until_idle=False)
    a.commit()
    b.commit()
    status = fleet_status(a.store.client, crawl.key)
    assert 0 < status["G_low"] <= status["G"]  # (the slowest partition's clock, the fastest)
    assert "partition clocks within" in status_line(status)


def test_reading_a_missing_or_unreachable_crawl_is_one_clear_error(redis_url):
    from scrapy_opic.export import open_state

    with pytest.raises(StoreError, match="no OPIC crawl"):
        open_state(f"{redis_url}#opic:nothing-here")
    with pytest.raises(StoreError, match="cannot read"):
        open_state("redis://127.0.0.1:1/0#opic:x")
    with pytest.raises(StoreError, match="after '#'"):
        open_state(redis_url)


def test_a_password_never_reaches_logs_errors_or_stored_settings():
    from scrapy_opic._backends import masked_url
    from scrapy_opic._settings import OpicSettings, OpicSettingsError

    assert masked_url("redis://:s3cret@db:6379/0") == "redis://***@db:6379/0"
    assert masked_url("rediss://user:s3cret@db/1") == "rediss://***@db/1"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    s = OpicSettings.from_settings({"OPIC_REDIS_URL": "redis://:s3cret@db:6379/0"})
    assert "s3cret" not in repr(s.as_dict()) and s.redis_url.endswith("@db:6379/0")
    with pytest.raises(OpicSettingsError) as bad:
        OpicSettings.from_settings({"OPIC_REDIS_URL": "http://:s3cret@db:6379/0"})
    assert "s3cret" not in str(bad.value)


def test_the_export_api_reads_a_redis_crawl(crawl, tmp_path):
    from scrapy_opic.export import open_state, write_export

    f = crawl()
    f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    done = run([f])
    f.commit()
    with open_state(f"{crawl.url}#{crawl.key}") as state:
        assert state.n == len(done) and state.pending == 0
        assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
        assert state.importance().sum() == pytest.approx(1.0)
        top = state.top(3)
        assert len(top) == 3 and top[0].importance >= top[1].importance
        n = write_export(state, str(tmp_path / "out.csv"))
    assert n == len(done)


@pytest.mark.slow  # (starts a Redis server of its own)
def test_a_redis_restarted_with_its_keys_is_waited_for_with_one_warning(tmp_path, caplog):
    """Redis restarted with persistence under a running crawl: the process says so once, pops
    nothing meanwhile (what it fetched could be lost with its leases), says when Redis is
    back, and the crawl goes on to its end with cash 1, every page visited once."""
    from tests.support.sites import RedisServer

    server = RedisServer(tmp_path, persist=True)
    with server as server_url:
        f = redis_crawl(server_url, "opic:restarted", lease=30.0)
        try:
            f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
            before = run([f], until_idle=False, steps=4)
            assert before and f.has_pending()
            with caplog.at_level("INFO", logger="scrapy_opic._backends"):
                server.stop()
                for _ in range(3):
                    f._next_rebalance = f._last_flush = 0.0
                    f.maintain([])
                    assert f.pop() is None and f.has_pending()
                    assert f.figures()["pages"] >= len(before)  # (as last read)
                server.start()
                after = run([f])
            said = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert len(said) == 1 and "does not answer" in said[0].getMessage(), said
            assert any("answers again" in r.getMessage() for r in caplog.records)
            assert len(before + after) == len(set(before + after)) == 240
            f.commit()
            assert check(f.store.client, "opic:restarted") == []
        finally:
            f.store.clear()
            f.store.client.close()


@pytest.mark.slow  # (starts a Redis server of its own)
def test_a_redis_that_does_not_come_back_stops_the_crawl_in_one_line(tmp_path):
    from tests.support.sites import RedisServer

    server = RedisServer(tmp_path)
    with server as server_url:
        f = redis_crawl(server_url, "opic:gone", lease=30.0)
        f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
        f.commit()
        server.stop()
        f.patience.seconds = 0.0
        f._next_rebalance = 0.0
        f.maintain([])  # (the first failure: a warning, and the wait begins)
        time.sleep(0.01)
        f._next_rebalance = 0.0
        with pytest.raises(StoreError, match="has not answered for") as error:
            f.maintain([])
        assert "\n" not in str(error.value)
        with pytest.raises(StoreError, match="does not answer"):
            f.close([])


@pytest.mark.slow  # (starts a Redis server of its own)
def test_the_report_of_a_long_crawl_plots_its_series_and_never_shows_the_password(tmp_path):
    """A crawl long enough for many points of its time series (one per tick here) reads back
    through the Python API and the HTML report; a password in the URL appears nowhere."""
    from scrapy_opic._report import build_report
    from scrapy_opic.export import open_state
    from tests.support.sites import RedisServer

    with RedisServer(tmp_path, password="s3cret-pw") as server_url:
        f = redis_crawl(server_url, "opic:long", lease=30.0, commit_seconds=0.0)
        f.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
        done: list[int] = []
        while f.has_pending():
            done += [i for i in (step(f), step(f)) if i is not None]
            f._next_report = f._last_flush = 0.0  # (a report, and a point, at each flush)
            f.maintain([])
        f.close([])
        with open_state(f"{server_url}#opic:long") as state:
            series = state.series
            assert len(series) >= 10
            assert series.column("fetched")[-1] <= len(done) == int(state.fetched_mask().sum())
            page = build_report(state)
        assert "<img" in page and "s3cret-pw" not in page and "***@" in page


def test_a_crawl_joined_with_another_refetch_policy_is_refused_in_one_line(redis_url):
    key = f"opic:refetch:{uuid.uuid4().hex}"
    first = redis_crawl(redis_url, key, continuous=True, refetch="cash")
    try:
        with pytest.raises(StoreError) as got:
            redis_crawl(redis_url, key, continuous=True, refetch="freshness")
        message = str(got.value)
        assert "\n" not in message and "OPIC_REFETCH='cash' there, 'freshness' here" in message
    finally:
        first.store.clear()
        first.store.client.close()


def test_a_member_is_claimed_by_one_process_at_a_time(crawl):
    a, b = crawl(), crawl()
    k = partition_of(url(0), key(url(0)), 16)
    assert a._claim(k) is not None
    assert b.store.claim(k) is None  # (a holds its lease)
    assert k in a.held and k not in b.held


def test_a_lease_is_renewed_well_before_it_lapses(crawl):
    """Every way a lease is renewed (the claim, a write, a renewal alone) makes the next
    renewal due within half the lease: a process that runs never lets its leases lapse."""
    a = crawl(lease=30.0)
    a.schedule([Entry(key(url(n)), url(n), 0, "", b"seed") for n in range(8)])
    half = a.lease_seconds / 2

    def due_soon() -> bool:
        now = time.monotonic()
        return all(0 < h.renew_at - now <= half for h in a.held.values())

    assert a.held and due_soon()  # (claimed)
    a.flush()
    assert due_soon()  # (written)
    for h in a.held.values():
        h.renew_at = 0.0
    a.flush()
    assert due_soon()  # (renewed with nothing to write)


def test_a_lease_that_lapsed_and_went_to_another_process_is_lost_at_the_next_renewal(crawl):
    """A process that stalled past its lease finds out at its next renewal, even with nothing
    to write: the renewal of another process's lease fails, and leaves that lease alone."""
    a = crawl()
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    a.commit()
    k = partition_of(url(0), key(url(0)), 16)
    lease_key = member_key(crawl.key, k, "lease")
    a.store.client.delete(lease_key)  # (a's lease lapsed while it stalled)
    b = crawl()
    assert b._claim(k)
    a.held[k].renew_at = 0.0  # due
    a.flush()
    assert k not in a.held and k not in a.fleet.parts
    assert a.store.client.get(lease_key) == b.held[k].token.encode()


def test_no_request_goes_out_for_a_partition_whose_lease_may_have_lapsed(crawl):
    """By the process's own clock: a lease set or renewed at ``t`` is surely its own until
    ``t + lease``. A request of a partition whose lease would lapse within its hosts' delay
    (``quiet``) may not go out, and such a partition gives no more pages; one of a partition
    lost since the pop never goes out."""
    a = crawl(lease=30.0)
    a.quiet = 0.5
    a.schedule(
        [Entry(key(url(0)), url(0), 0, "", b"seed"), Entry(key(url(6)), url(6), 0, "", b"s")]
    )
    lease = a.pop()
    assert lease is not None and a.may_send(lease)
    k = partition_of(lease.url, lease.key, 16)
    a.held[k].valid_until = time.monotonic() + 0.4  # (stalled: the lease is nearly gone)
    assert not a.may_send(lease)
    assert a.pop() is None  # (the other page is of the same host: its partition too)
    a.held[k].renewed(time.monotonic(), a.lease_seconds)
    assert a.may_send(lease)
    a._lose(k)
    assert not a.may_send(lease)


def test_a_partition_made_mid_crawl_is_owed_the_teleport_credit_given_before(crawl):
    """A partition made while the crawl runs starts with the back pay of every page: the
    teleport credit the crawl gave before it existed (as one engine gives a page it meets)."""
    a = crawl()
    a.schedule([Entry(key(url(0)), url(0), 0, "", b"seed")])
    run([a], until_idle=False, steps=6)
    given = a.fleet.teleport()
    assert given > 0
    late = next(
        u
        for u in (f"http://late{n}.example/p" for n in range(100))
        if partition_of(u, key(u), 16) not in a.fleet.parts
    )
    assert a.schedule([Entry(key(late), late, 0, "", b"late")]) != []
    part = a.fleet.parts[partition_of(late, key(late), 16)]
    assert part.frontier.engine.credit_base == pytest.approx(given, rel=1e-12)
    a.commit()
    assert check(a.store.client, crawl.key) == []


def test_an_inbox_entry_whose_message_waits_for_an_earlier_one_stays(crawl):
    """An inbox entry is deleted with the write that records the application of its
    messages: one whose message waits for an earlier one of its source (which is then only in
    memory) stays, and is read again from there by the member's next owner."""
    from scrapy_opic._backends.held import Held
    from scrapy_opic.opic.messages import Payment, Transfer

    a = crawl()
    k = partition_of(url(0), key(url(0)), 16)
    assert a._claim(k)
    held = a.held[k]
    early = Transfer(POOL + 100, k, 2, (Payment(key(url(0)), url(0), Share(0.0, 0.0)),))
    held.read_inbox([("1-0", [early], [])], a.fleet)
    assert held.consumed == [] and held.read_from == ("at", "1-0")
    assert isinstance(held, Held)


@pytest.mark.parametrize("how", ["write", "checkpoint"])
def test_a_write_deletes_every_inbox_entry_it_applied_however_many(crawl, how):
    """The entries a write deletes go to Redis in chunks (Lua's ``unpack`` gives at most about
    8,000 values): a member whose applied entries piled up (writes that failed for a while)
    deletes them all with its next write or checkpoint."""
    from scrapy_opic._backends.redis_state import pack

    a = crawl()
    k = partition_of(url(0), key(url(0)), 16)
    assert a._claim(k)
    inbox = member_key(crawl.key, k, "in")
    pipe = a.store.client.pipeline(transaction=False)
    for _ in range(9000):
        pipe.xadd(inbox, {"m": pack(([], []))})
    ids = pipe.execute()
    a.held[k].consumed = list(ids)
    a.held[k].read_from = ("after", ids[-1])
    if how == "write":
        a.flush()
        assert a.held[k].consumed == []
    else:
        a.close([])
    assert a.store.client.xlen(inbox) == 0
