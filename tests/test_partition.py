"""One crawl over many partitions (scrapy_opic.opic.partition), in memory: fleets of processes
exchange their messages through tests.support.fleet.Bus, which can reorder and repeat them and
lose a
process. Cash stays 1, a journal replayed rebuilds a partition bit for bit, a crawl taken over
finishes, and the importance is PageRank's."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from scrapy_opic.opic.change import ChangeRates
from scrapy_opic.opic.config import CrawlConfig
from scrapy_opic.opic.constants import DUPLICATE, FORWARDED, SCHEDULED
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.engine import OpicEngine, Share
from scrapy_opic.opic.fleet import Fleet
from scrapy_opic.opic.frontier import MemoryFrontier
from scrapy_opic.opic.journal import Forgot, Relayed, Unchanged, Visited
from scrapy_opic.opic.messages import POOL, Figures, Mailbox, Payment, Report, Transfer
from scrapy_opic.opic.pagerank import pagerank
from scrapy_opic.opic.partition import Partition
from scrapy_opic.opic.pool import Pool
from scrapy_opic.opic.routing import partition_of
from scrapy_opic.opic.snapshot import engine_arrays, engine_header
from tests.support.fleet import Bus, crawl_step, key, partition_problems, seed, sequence_problems
from tests.support.frontiers import L, visit

TOL = 1e-9
P = 8


def site(hosts: int = 6, per_host: int = 25, seed_: int = 1):
    """A site of ``hosts`` hosts: each page links to 3 pages of its host and 2 anywhere."""
    rnd = random.Random(seed_)
    pages = [f"http://h{h}.example/p{j}" for h in range(hosts) for j in range(per_host)]
    by_host: dict[str, list[str]] = {}
    for u in pages:
        by_host.setdefault(u.split("/")[2], []).append(u)
    links = {}
    for u in pages:
        same = [v for v in by_host[u.split("/")[2]] if v != u]
        links[u] = rnd.sample(same, 3) + rnd.sample(pages, 2)
    return pages, links


def fleets(
    n: int,
    continuous: bool = False,
    refresh: float = 0.0,
    atomic: bool = False,
    refetch: str = "cash",
    time_fn=None,
    **kw,
) -> list[Fleet]:
    """``n`` processes sharing the partitions round-robin; the first owns the pool. Each
    applies the messages between its own members as soon as it may (``atomic``: at once)."""
    config = CrawlConfig(
        partitions=P, continuous=continuous, refresh=refresh, refetch=refetch, **kw
    )
    clock = {} if time_fn is None else {"time_fn": time_fn}
    out = [Fleet(config, atomic=atomic, **clock) for _ in range(n)]
    out[0].adopt_pool(Pool())
    for k in range(P):
        f = out[k % n]
        f.adopt(Partition.new(k, config, time_fn=f.time_fn))
    return out


def test_a_mailbox_applies_each_sources_messages_once_and_in_order():
    box = Mailbox()
    sent = Mailbox()
    m1, m2, m3 = (sent.stamp(Transfer, 3, 5, (Payment(i, "u", Share(0.0, 0.0)),)) for i in range(3))
    assert box.accept(m2) == []  # early: waits for m1
    assert box.accept(m1) == [m1, m2]  # m1 and what waited behind it
    assert box.accept(m1) == [] and box.accept(m2) == []  # duplicates
    assert box.accept(m3) == [m3]
    assert box.applied == {3: 3}
    assert len(sent.unconfirmed) == 3
    sent.confirm(5, 2)
    assert sorted(sent.unconfirmed) == [(5, 3)] and sent.delivered == {5: 2}


def test_the_pool_pays_each_other_partition_its_share_and_tells_the_teleport_credit():
    pool = Pool()
    # Partition 0 has 10 live pages (4 never fetched), 1 has 30 (0), 2 has 60 (20).
    for k, (live, unf) in enumerate([(10, 4), (30, 0), (60, 20)]):
        pool.figures[k] = Figures(live, unf, live, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0)
    # (1.2 of virtual cash paid out by 0)
    pool.receive(Report(0, POOL, 1, 0.9, 0.3, 1.2, 0.5, pool.figures[0]))
    paid = {m.dst: m for m in pool.pay()}
    assert paid[1].to_all == pytest.approx(0.9 * 30 / 90)
    assert paid[2].to_all == pytest.approx(0.9 * 60 / 90)
    assert paid[1].to_unfetched == 0.0  # never fetched: only 2 has
    assert paid[2].to_unfetched == pytest.approx(0.3)
    assert (paid[0].to_all, paid[0].to_unfetched) == (0.0, 0.0)  # (only the crawl's clock)
    assert {m.teleport for m in paid.values()} == {1.2}  # every page is owed 1.2 of teleport
    assert sum(m.to_all + m.to_unfetched for m in paid.values()) == pytest.approx(1.2)
    assert pool.total_cash() == 0.0
    assert pool.pay() == []  # nothing owed, and every clock is up to date


def test_a_crawl_of_one_partition_is_one_engine_bit_for_bit():
    """All pages on one host: the partition's engine makes exactly the floats of a frontier of
    one engine driven by the same operations."""
    pages, links = site(hosts=1, per_host=60)
    (fleet,) = fleets(1, refresh=0.3)
    one = MemoryFrontier(OpicEngine(refresh=0.3, votes=True), "greedy")
    seed([fleet], pages[0])
    one.schedule([Entry(key(pages[0]), pages[0], 0, "", b"seed", seed=True)])
    for _ in range(60):
        a, b = fleet.pop(), one.pop()
        assert a.key == b.key
        kids = [L(key(u), u, payload=b"r") for u in links[a.url]]
        visit(fleet, a, kids)
        visit(one, b, kids)
    (part,) = [p for p in fleet.parts.values() if p.frontier.engine.n]
    x, y = part.frontier.engine, one.engine
    for name, arr in engine_arrays(y).items():
        assert np.array_equal(arr[: y.n], engine_arrays(x)[name][: x.n]), name
    assert x.virtual_cash == y.virtual_cash and x.G == y.G


def test_votes_cross_partitions_as_they_move_in_one_engine():
    """A crawl over partitions by host, three processes, and one engine visiting the same pages
    in the same order with the same links: every page ends with the votes and depth the one
    engine gives it (votes to pages of other partitions travel in transfers, redirects
    included)."""
    pages, links = site()
    fs = fleets(3, atomic=True)
    bus = Bus(fs)
    one = MemoryFrontier(OpicEngine(votes=True), "greedy")
    seed(fs, pages[0])
    one.schedule([Entry(key(pages[0]), pages[0], 0, "", b"seed", seed=True)])
    rnd = random.Random(2)
    for step in range(120):
        f = rnd.choice(fs)
        lease = f.pop()
        if lease is None:
            bus.round()
            continue
        mine = one.take(one.engine.id_of(lease.key))
        if step % 9 == 4:  # a redirect, most often to a page of another host
            target = rnd.choice(pages)
            entry = Entry(key(target), target, 0, "", b"moved")
            f.redirect(lease, entry)
            one.redirect(mine, entry)
        else:
            kids = [L(key(u), u, payload=b"r") for u in links[lease.url]]
            visit(f, lease, kids)
            visit(one, mine, kids)
        bus.round()
    e = one.engine
    compared = 0
    for part in (p for f in fs for p in f.parts.values()):
        x = part.frontier.engine
        assert x.votes
        for i in range(x.n):
            j = e.id_of(x.key_of(i))
            assert x.depth[i] == e.depth[j]
            assert x.order[i] == pytest.approx(e.order[j], rel=1e-12, abs=1e-300)
            compared += x.order[i] > 0
    assert compared > 50


@pytest.mark.parametrize(
    "atomic",
    [
        pytest.param(False, id="durable-first", marks=pytest.mark.slow),
        pytest.param(True, id="atomic"),
    ],
)  # (the fast suite checks one mode of delivery, the full suite both)
@pytest.mark.parametrize("continuous", [False, True], ids=["one-pass", "continuous"])
def test_cash_stays_one_whatever_the_order_messages_arrive_in(continuous, atomic):
    pages, links = site()
    fs = fleets(3, continuous=continuous, refresh=1.0 if continuous else 0.0, atomic=atomic)
    bus = Bus(fs, seed=3)
    seed(fs, pages[0])
    rnd = random.Random(5)
    for step in range(1500):
        crawl_step(rnd.choice(fs), links.__getitem__)
        if step % 7 == 0:
            bus.round(shuffle=True, repeat=0.2)  # reordered, some twice
        assert bus.total_cash() == pytest.approx(1.0, abs=TOL), step
    for _ in range(5):
        bus.round()
    assert sequence_problems(bus.members(), bus.moving()) == []
    for f in fs:
        for part in f.parts.values():
            assert partition_problems(part) == []
    if not continuous:
        fetched = sum(p.frontier.engine.visit_count for f in fs for p in f.parts.values())
        assert fetched == len(
            {u for u in pages if any(u in v for v in links.values())} | {pages[0]}
        )


@pytest.mark.parametrize(
    "atomic",
    [
        pytest.param(False, id="durable-first", marks=pytest.mark.slow),
        pytest.param(True, id="atomic"),
    ],
)  # (the fast suite checks one mode of delivery, the full suite both)
def test_redirects_to_other_partitions_carry_their_cash(atomic):
    """Pages that redirect (now and then permanently) to pages of other partitions: the cash
    a redirect moves travels in a transfer, and the crawl's cash stays 1."""
    pages, links = site()
    fs = fleets(3, continuous=True, refresh=1.0, atomic=atomic)
    bus = Bus(fs, seed=8)
    seed(fs, pages[0])
    rnd = random.Random(9)
    moved = 0
    for step in range(800):
        f = rnd.choice(fs)
        lease = f.pop()
        if lease is None:
            continue
        here = partition_of(lease.url, lease.key, P)
        elsewhere = [u for u in pages if partition_of(u, key(u), P) != here]
        if step > 20 and step % 5 == 0:
            target = rnd.choice(elsewhere)
            entry = Entry(key(target), target, 0, "", b"moved")
            if f.redirect(lease, entry, permanent=step % 3 == 0) is not None:
                moved += 1
        else:
            visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
        if step % 7 == 0:
            bus.round(shuffle=True, repeat=0.2)
            assert bus.total_cash() == pytest.approx(1.0, abs=TOL), step
    for _ in range(5):
        bus.round()
    assert moved > 50
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)
    assert sequence_problems(bus.members(), bus.moving()) == []


def test_a_journal_replayed_on_a_checkpoint_rebuilds_the_partition_bit_for_bit():
    pages, links = site()
    fs = fleets(2, continuous=True, refresh=1.0, window="interpolation:30")
    bus = Bus(fs)
    seed(fs, pages[0])
    rnd = random.Random(2)
    for _ in range(400):
        crawl_step(rnd.choice(fs), links.__getitem__)
        bus.round()
    for f in fs:
        for part in f.parts.values():
            bus.store.checkpoint(part)
    for step in range(800):
        f = rnd.choice(fs)
        lease = f.pop()
        if step % 11 == 0:
            f.fail(lease, 503)
        elif step % 13 == 0:
            target = rnd.choice(pages)
            entry = Entry(key(target), target, 0, "", b"moved")
            f.redirect(lease, entry, permanent=step % 2 == 0)
        else:
            visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
        if step % 5 == 0:
            bus.round(shuffle=True)
    written(bus, fs)
    for f in fs:
        for k, live in f.parts.items():
            again = bus.store.load(k, f)
            a, b = live.frontier.engine, again.frontier.engine
            for name, arr in engine_arrays(a).items():
                assert np.array_equal(arr[: a.n], engine_arrays(b)[name][: b.n]), (k, name)
            assert engine_header(a)["scalars"] == engine_header(b)["scalars"], k
            assert live.box.next_seq == again.box.next_seq
            assert live.box.applied == again.box.applied
            assert live.frontier.outcome[: a.n] == again.frontier.outcome[: b.n]
            assert live.frontier.status[: a.n] == again.frontier.status[: b.n] or any(
                s == 2
                for s in live.frontier.status[: a.n]  # (in flight: pending when loaded)
            )


def written(bus: Bus, fs: list[Fleet]) -> None:
    """Flush until every record is in the store (a flush applies messages between members of
    one process once they are durable: records made after its writes)."""
    bus.flush(reports=False)
    while any(m.journal for f in fs for m in f.members()):
        bus.flush(reports=False)


@pytest.mark.parametrize(
    "atomic",
    [
        pytest.param(False, id="durable-first", marks=pytest.mark.slow),
        pytest.param(True, id="atomic"),
    ],
)  # (the fast suite checks one mode of delivery, the full suite both)
def test_a_process_that_dies_is_taken_over_and_the_crawl_finishes(atomic):
    """A process dies between its flushes: what it had not written is lost (those pages are
    fetched again), its partitions are loaded by another, which sends again what was not known
    delivered; every page is fetched, none more than twice, and cash is 1."""
    pages, links = site()
    fs = fleets(3, atomic=atomic)
    bus = Bus(fs, seed=1)
    seed(fs, pages[0])
    fetched: dict[str, int] = {}
    rnd = random.Random(9)

    def step(f) -> bool:
        lease = f.pop()
        if lease is None:
            return False
        fetched[lease.url] = fetched.get(lease.url, 0) + 1
        visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
        return True

    for n in range(200):
        step(rnd.choice(bus.fleets))
        if n % 9 == 0:
            bus.round(shuffle=True)
    victim = bus.fleets[1]
    for _ in range(5):  # work done and never written
        step(victim)
    owned = list(victim.parts) + ([POOL] if victim.pool else [])
    bus.kill(victim)
    heir = bus.fleets[0]
    for k in owned:
        bus.adopt(heir, k)
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)
    idle = 0
    while idle < 3:
        busy = False
        for f in bus.fleets:
            for _ in range(5):
                busy |= step(f)
        bus.round()
        idle = 0 if busy or bus.moving() else idle + 1
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)
    linked = {v for vs in links.values() for v in vs} | {pages[0]}
    assert linked <= set(fetched)  # every page was fetched
    assert max(fetched.values()) <= 2


def test_writes_that_land_for_some_members_only_then_a_kill_keep_cash_one():
    """Each member written apart (a Redis Cluster): some writes fail, and are made at a later
    flush. A message between two members of one process is applied only once the record that
    made it is durable, and confirmed to its source only once its application is: a process
    killed between its writes loses nothing, and creates nothing."""
    pages, links = site()
    fs = fleets(2, atomic=False)
    bus = Bus(fs, seed=4)
    seed(fs, pages[0])
    rnd = random.Random(6)
    fetched: dict[str, int] = {}
    for n in range(600):
        f = rnd.choice(bus.fleets)
        lease = f.pop()
        if lease is not None:
            fetched[lease.url] = fetched.get(lease.url, 0) + 1
            visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
        if n % 3 == 0:
            bus.round(fail=0.5)
        if n % 40 == 39:  # a process dies; a new one takes its members from the store
            victim = bus.fleets[0]
            owned = list(victim.parts) + ([POOL] if victim.pool else [])
            bus.kill(victim)
            heir = Fleet(victim.config, atomic=False)
            bus.fleets.append(heir)
            for k in owned:
                bus.adopt(heir, k)
            assert bus.total_cash() == pytest.approx(1.0, abs=TOL), n
    for _ in range(40):
        for f in bus.fleets:
            while (lease := f.pop()) is not None:
                fetched[lease.url] = fetched.get(lease.url, 0) + 1
                visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
        bus.round()
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)
    assert sequence_problems(bus.members(), bus.moving()) == []
    assert {v for vs in links.values() for v in vs} | {pages[0]} <= set(fetched)


@pytest.mark.slow  # (a long run: the fast suite checks cash and order, this the limit)
def test_importance_over_partitions_is_pagerank():
    pages, links = site(hosts=6, per_host=30, seed_=2)
    fs = fleets(2, continuous=True, refresh=1.0, window="unbounded")
    bus = Bus(fs)
    seed(fs, pages[0])
    for step in range(12_000):
        crawl_step(fs[step % 2], links.__getitem__)
        if step % 10 == 0:
            bus.round()
    for _ in range(3):
        bus.round()
    from scrapy_opic.opic.graph import from_edges

    index = {u: i for i, u in enumerate(pages)}
    edges = np.array([(index[u], index[v]) for u in pages for v in links[u]])
    g = from_edges(edges[:, 0], edges[:, 1], len(pages))
    pr = pagerank(g, 0.85, 1e-12)
    parts = [p for f in fs for p in f.parts.values()]
    engines = [p.frontier.engine for p in parts]
    from scrapy_opic.opic.importance import CrawlView, importance_of

    view = CrawlView(
        0,
        0,
        sum(e.n for e in engines),
        sum(e.credit_total for e in engines),
        sum(e.b_total for e in engines),
        sum(e.d_total for e in engines),
        sum(e.credit_passed for e in engines),
        sum(e.credit_dangling for e in engines),
        1.0,
    )
    got = np.zeros(len(pages))
    for p in parts:
        e = p.frontier.engine
        e.view = view
        for i in range(e.n):
            got[index[p.frontier.url_of(i)]] = importance_of(e, i)
    assert got.sum() == pytest.approx(1.0, abs=1e-6)
    assert np.abs(got - pr).sum() < 0.01  # L1 over all pages


def test_codes_for_pages_of_other_partitions():
    """An entry or a link for a page of a partition another process owns is sent there
    (FORWARDED); for one of a partition this process owns, it can tell: a page already pending
    there is a DUPLICATE."""
    pages = site()[0]
    a, b = fleets(2)

    def of(f: Fleet) -> list[str]:
        return [u for u in pages if partition_of(u, key(u), P) in f.parts]

    theirs, mine = of(b), of(a)
    other = next(
        u for u in mine if partition_of(u, key(u), P) != partition_of(mine[0], key(mine[0]), P)
    )
    assert a.schedule([Entry(key(theirs[0]), theirs[0], 0, "", b"x")]) == [FORWARDED]
    assert b.schedule([Entry(key(theirs[0]), theirs[0], 0, "", b"x")]) == [SCHEDULED]
    assert a.schedule([Entry(key(u), u, 0, "", b"x") for u in (mine[0], other)]) == [SCHEDULED] * 2
    lease = next(x for x in iter(a.pop, None) if x.url == mine[0])
    assert b.visit(lease, []) is None  # not b's lease
    links = [L(key(u), u, payload=b"r") for u in (theirs[1], other, theirs[1])]
    assert visit(a, lease, links).codes == [FORWARDED, DUPLICATE, DUPLICATE]


def test_a_checkpoint_round_trips_through_pickle():
    pages, links = site(hosts=2, per_host=20)
    fs = fleets(1)
    seed(fs, pages[0])
    for _ in range(15):
        crawl_step(fs[0], links.__getitem__)
    for part in fs[0].parts.values():
        state = pickle.loads(pickle.dumps(part.state()))
        again = Partition.from_state(state, fs[0].config)
        assert again.frontier.engine.n == part.frontier.engine.n
        assert again.frontier.engine.total_cash() == part.frontier.engine.total_cash()


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def fresh_step(f: Fleet, links, rnd: random.Random, clock: Clock, step: int) -> None:
    """One pop of a fleet that refetches by change: a first fetch parsed, a refetch unchanged
    (a 304) or changed, now and then a failure or a page gone."""
    clock.t += 0.5
    lease = f.pop()
    if lease is None:
        return
    part = f.parts[lease.token[0]]
    i = part.frontier.engine.id_of(lease.key)
    fetched = part.frontier.fetched(i)
    roll = rnd.random()
    if fetched and roll < 0.5:
        assert f.unchanged(lease, b"again") is not None
    elif step > 50 and step % 17 == 0:
        f.fail(lease, 503 if step % 2 else 404)
    else:
        # (a changed page drops two links now and then: kept links change with it)
        out = links[lease.url][: 3 if fetched and roll < 0.6 else 5]
        got = [L(key(u), u, payload=b"r") for u in out]
        changed = None if not fetched else roll < 0.8
        assert visit(f, lease, got, changed=changed, modified=clock.t - 100.0) is not None


@pytest.mark.parametrize(
    "atomic",
    [
        pytest.param(False, id="durable-first", marks=pytest.mark.slow),
        pytest.param(True, id="atomic"),
    ],
)  # (the fast suite checks one mode of delivery, the full suite both)
def test_refetches_by_change_over_partitions_keep_cash_one(atomic):
    """Refetches by freshness over partitions: unchanged pages pay their kept links (those to
    other partitions by transfer), relay visits after refetches, plans over every partition
    a process owns, messages reordered and repeated: the crawl's cash stays 1."""
    pages, links = site()
    clock = Clock()
    fs = fleets(3, True, 1.0, atomic, "freshness", time_fn=clock, discovery=0.3)
    bus = Bus(fs, seed=4)
    seed(fs, pages[0])
    rnd = random.Random(6)
    for step in range(800):
        fresh_step(rnd.choice(fs), links, rnd, clock, step)
        if step % 7 == 0:
            bus.round(shuffle=True, repeat=0.2)
            assert bus.total_cash() == pytest.approx(1.0, abs=TOL), step
    for _ in range(5):
        bus.round()
    assert sequence_problems(bus.members(), bus.moving()) == []
    frs = [p.frontier for f in fs for p in f.parts.values()]
    relays = sum(fr.refresher.relays for fr in frs)
    unchanged = sum(fr.refresher.rates.a["u"].sum() > 0 for fr in frs)
    assert all(f.planner.plans > 0 for f in fs) and relays > 0 and unchanged
    remote = sum(len(p.remote_kept) for f in fs for p in f.parts.values())
    assert remote > 0  # (pages kept links into other partitions)


def test_a_journal_of_refetches_by_change_replays_bit_for_bit():
    """Unchanged visits, relay visits, change observations and kept links are records: a
    partition loaded from its checkpoint and journal is the live one, rates and links too."""
    pages, links = site()
    clock = Clock()
    fs = fleets(
        2, True, 1.0, False, "freshness", time_fn=clock, window="adaptive:30", discovery=0.3
    )
    bus = Bus(fs)
    seed(fs, pages[0])
    rnd = random.Random(3)  # (a run whose refetches see links change: asserted below)
    for step in range(400):
        fresh_step(rnd.choice(fs), links, rnd, clock, step)
        bus.round()
    for f in fs:
        for part in f.parts.values():
            bus.store.checkpoint(part)
    for step in range(500):
        fresh_step(rnd.choice(fs), links, rnd, clock, step)
        if step % 5 == 0:
            bus.round(shuffle=True)
        if step == 250:  # (a host found to lie: its pages forget, a record replayed too)
            part = next(p for f in fs for p in f.parts.values() if p.frontier.engine.n)
            assert part.forget_lies(part.frontier.slot_of(0)) > 0
    written(bus, fs)
    journaled = {type(rec) for js in bus.store.journals.values() for rec in js}
    assert {Unchanged, Relayed, Visited, Forgot} <= journaled
    for f in fs:
        for k, live in f.parts.items():
            again = bus.store.load(k, f)
            a, b = live.frontier.engine, again.frontier.engine
            for name, arr in engine_arrays(a).items():
                assert np.array_equal(arr[: a.n], engine_arrays(b)[name][: b.n]), (k, name)
            assert engine_header(a)["scalars"] == engine_header(b)["scalars"], k
            # (The adaptive window's watch on the links is fed by records too.)
            assert engine_header(a)["window"] == engine_header(b)["window"], k
            ra, rb = live.frontier.refresher, again.frontier.refresher
            # (Each page's period follows the plans, which are the fleet's and not records:
            # a new owner plans again. The change observations are records.)
            for name in ChangeRates.FIELDS:
                col, other = ra.columns(a.n)[f"r.{name}"], rb.columns(b.n)[f"r.{name}"]
                assert np.array_equal(col, other, equal_nan=True), (k, name)
            assert [(i, x.ids.tolist()) for i, x in ra.kept()] == [
                (i, x.ids.tolist()) for i, x in rb.kept()
            ]
            assert live.remote_kept == again.remote_kept
    seen = [p.frontier.engine.window.changed_at for f in fs for p in f.parts.values()]
    assert any(at is not None for at in seen)  # (links dropped, pages gone: changes seen)


def test_kept_links_to_other_partitions_get_their_share_of_unchanged_and_relay_visits():
    """A page of one host linking to a page of its own host and one of another: a 304 and a
    relay visit pay both alike, the second through a message to its partition."""
    a, b = "http://one.example/a", "http://one.example/b"
    c = next(
        u
        for u in (f"http://two{j}.example/c" for j in range(100))
        if partition_of(u, key(u), P) != partition_of(a, key(a), P)
    )
    clock = Clock()
    (f,) = fleets(1, True, 1.0, False, "freshness", time_fn=clock)
    bus = Bus([f])
    seed([f], a)
    lease = f.pop()
    visit(f, lease, [L(key(b), b, payload=b"r"), L(key(c), c, payload=b"r")])
    bus.round()

    def cash() -> tuple[float, float]:
        bus.round()
        return f.cash_of(key(b)), f.cash_of(key(c))

    part = f.parts[partition_of(a, key(a), P)]
    i = part.frontier.engine.id_of(key(a))
    for act in ("unchanged", "relay"):
        part.frontier.engine.receive(i, Share(0.25, 0.0))  # (cash for A to pay, taken back below)
        part.frontier.engine.virtual_cash -= 0.25
        before = cash()
        if act == "unchanged":
            clock.t += 10.0
            lease = part.frontier.take(i)
            lease = lease._replace(token=(part.k, f.epochs[part.k], lease.token))
            assert f.unchanged(lease) is not None
        else:
            part._relay(clock(), i)
        after = cash()
        got_b, got_c = after[0] - before[0], after[1] - before[1]
        assert got_b > 0.1 and got_c == pytest.approx(got_b, rel=1e-9), act
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)


def test_a_hosts_pages_are_one_partition_however_the_host_is_written():
    # Case, port, user, scheme and path do not move a page: its host's requests stay with one
    # process (Scrapy's politeness is per process). Pinned values: the same in every process
    # and Python (a salted hash would scatter a host across a fleet's processes).
    same = [
        "http://Example.COM/a",
        "http://user:pw@example.com:8080/b",
        "https://example.com/c?q=1",
        "http://example.com",
    ]
    for parts in (16, 1024):
        assert len({partition_of(u, key(u), parts) for u in same}) == 1
    assert partition_of(same[0], b"k", 16) == 3 and partition_of(same[0], b"k", 1024) == 275
    # Similar names spread (not one partition for www1, www2...); no host: by the URL's text.
    assert partition_of("http://www1.example.com/", b"k", 16) == 4
    assert partition_of("http://www2.example.com/", b"k", 16) == 11
    assert partition_of("mailto:x@example.com", b"k", 16) == 7
    assert partition_of("http://[::1]:80/x", b"k", 16) == 14
    # By key: the page's key alone, whatever its URL.
    assert partition_of(same[0], b"k", 16, by="url") == partition_of(same[1], b"k", 16, by="url")


def test_a_message_applied_here_is_confirmed_only_once_its_application_is_durable():
    """Member by member (a Redis Cluster), a process applies a message between two of its
    partitions once the record that made it is durable; it tells the source only once the
    destination's record of the application is durable too. Killed in between, with the
    source written and the destination not, the message is sent again: nothing is lost."""
    pages, links = site()
    (f,) = fs = fleets(1, atomic=False)
    bus = Bus(fs)
    seed(fs, pages[0])
    bus.round()
    lease = f.pop()
    src = partition_of(lease.url, lease.key, P)
    visit(f, lease, [L(key(u), u, payload=b"r") for u in links[lease.url]])
    a = f.parts[src]
    assert a.outbox  # (transfers to the partitions of its links, held until durable)
    bus.store.write(a)
    f.durable_now()  # applied here at once, in their destinations (their records not durable)
    assert f.applied_here()
    f.durable_now()
    bus.store.write(a)  # the source written again; its destinations never
    owned = list(f.parts) + [POOL]
    bus.kill(f)
    heir = Fleet(f.config, atomic=False)
    bus.fleets.append(heir)
    for k in owned:
        bus.adopt(heir, k)
    for _ in range(3):
        bus.round()
    assert bus.total_cash() == pytest.approx(1.0, abs=TOL)
    assert sequence_problems(bus.members(), bus.moving()) == []


def test_a_partitions_payout_keeps_only_its_pages_share_and_leaves_the_rest_to_the_pool():
    """A partition's virtual page pays its own pages their share of the crawl's live pages (and
    of its pages never fetched), and leaves the rest for the pool to pay the others."""
    from scrapy_opic.opic.importance import CrawlView

    e = OpicEngine(refresh=0.5)
    e.pooled = True
    e.add_pages(10)  # 10 live pages here, never fetched; 30 live elsewhere, 10 never fetched
    e.view = CrawlView(30, 10, 30, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    assert e.payout() == pytest.approx(0.5 * 10 / 40 + 0.5 * 10 / 20)
    assert float(e.cash().sum()) == pytest.approx(0.125 + 0.25)
    assert (e.pool_all, e.pool_unfetched) == (pytest.approx(0.375), pytest.approx(0.25))
    assert e.total_cash() == pytest.approx(1.0)
