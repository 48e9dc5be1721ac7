"""The refresher wired into the in-memory and sqlite frontiers: money on every path of a crawl
that refetches by change, 304s over kept links, the refetch order, closed pages, settle
visits, the state saved and resumed, and the schedule's eligibility rule."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from scrapy_opic._backends import StoreError
from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.store import MemoryStore
from scrapy_opic.opic.change import PRIOR_WEIGHTS, ChangeRates
from scrapy_opic.opic.config import CrawlConfig
from scrapy_opic.opic.constants import ERROR, FETCHED, FORBIDDEN, IN_FLIGHT, OK, PENDING
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.refetch import DISCARDED, POPPED, WAITING
from scrapy_opic.opic.refresh import Planner, Refresher
from tests.support.frontiers import L, key, one, sqlite_crawl, take, visit

TOL = 1e-9
EPS = 0.2


class Clock:
    """A fake wall clock, moved by hand (seconds since the epoch)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def entry(i: int, slot: str = "s") -> Entry:
    return Entry(key(i), f"http://h/{i}", 0, slot, b"req%d" % i)


def link(i: int, slot: str = "s", **kw) -> L:
    return L(key(i), f"http://h/{i}", slot=slot, payload=b"req%d" % i, **kw)


def make(
    clock: Clock, discovery: float = 0.0, keep_links: bool = False, **kw
) -> tuple[Crawl, Refresher]:
    """A continuous crawl in memory that refetches by change, on ``clock``."""
    config = CrawlConfig(
        epsilon=EPS,
        refresh=1.0,
        continuous=True,
        refetch="freshness",
        discovery=discovery,
        keep_links=keep_links,
    )
    f = Crawl(MemoryStore(), config, time_fn=clock)
    f.fleet.planner = Planner(**kw)
    f.open({})
    r = one(f).refresher
    assert r is not None and r.planner is f.fleet.planner
    return f, r


def idx(f: Crawl, lease) -> int:
    return one(f).engine.id_of(lease.key)


def ring(f: Crawl, r: Refresher, clock: Clock, n: int, pops: int, **kw) -> None:
    """Seed pages ``0..n-1`` (each links to the next two) and crawl ``pops`` pops, one second
    apart, every page visited over its links."""
    f.schedule([entry(i) for i in range(n)])
    for _ in range(pops):
        clock.t += 1.0
        lease = f.pop()
        i = idx(f, lease)
        visit(f, lease, [link((i + 1) % n), link((i + 2) % n)], **kw)


# -- 1. money ----------------------------------------------------------------------------------


def test_cash_is_conserved_on_every_path_of_a_crawl_that_refetches_by_change():
    clock = Clock()
    f, r = make(clock, discovery=0.3, keep_links=True, plan_every=16, plan_seconds=60.0)
    rng = random.Random(5)
    n = 20  # pages 0..13 at first, the others when a closed page is asked for again
    graph = {i: rng.sample([j for j in range(14) if j != i], rng.randint(0, 4)) for i in range(n)}
    number = {key(i): i for i in range(n)}
    f.schedule([entry(0, "a"), entry(1, "b")])
    held: list = []
    done: dict[str, int] = {}
    for step in range(700):
        clock.t += rng.choice((0.1, 1.0, 7.0))
        if not held or (len(held) < 4 and rng.random() < 0.55):
            lease = f.pop()
            if lease is None:  # every page closed or in flight: ask for one again
                f.schedule([entry(rng.randrange(n), "c")], again=True)
            else:
                held.append(lease)
        else:
            lease = held.pop(rng.randrange(len(held)))
            i = number[lease.key]
            kind = rng.choice(
                ("visit", "visit", "visit", "unchanged", "unchanged", "error", "404", "release")
                + ("retry", "forfeit")
            )
            if kind == "visit":
                links = [
                    link(j, rng.choice("abc"), weight=rng.choice((1.0, 0.5, 3.0))) for j in graph[i]
                ]
                changed = rng.choice((True, False, None))
                vw = rng.choice((0.0, 0.0, 1.5))
                assert visit(f, lease, links, virtual_weight=vw, changed=changed) is not None
                kind = f"visit-{changed}"
            elif kind == "unchanged":
                assert f.unchanged(lease) is not None
            elif kind == "error":
                assert f.fail(lease, ERROR)
                assert f.status_of(lease.key) == "pending"
            elif kind == "404":
                assert f.fail(lease, 404)
                assert f.status_of(lease.key) == "visited"
            elif kind == "release":
                assert f.release([lease]) == 1
            elif kind == "retry":
                assert f.retry(lease, Entry(lease.key, "u", 0, "a", b"again")) is not None
            else:
                assert f.forfeit(lease, FORBIDDEN)
            done[kind] = done.get(kind, 0) + 1
            if rng.random() < 0.2:  # a second outcome under a settled lease changes nothing
                before = one(f).engine.cash()
                assert f.unchanged(lease) is None and visit(f, lease, []) is None
                np.testing.assert_array_equal(one(f).engine.cash(), before)
        assert f.total_cash() == pytest.approx(1.0, abs=TOL), (step, done)
    for lease in held:
        assert f.status_of(lease.key) == "in_flight"
    expected = {"visit-True", "visit-False", "visit-None", "unchanged", "error", "404"}
    assert expected | {"release", "retry", "forfeit"} <= set(done)
    assert r.planner.plans > 0 and r.relays > 0, r.figures()  # (the refetch paths were taken)
    assert one(f).engine.importance().sum() == pytest.approx(1.0, abs=TOL)


# -- 2. a 304: a visit over the kept links ----------------------------------------------------


def test_unchanged_pays_over_the_links_kept_at_the_last_parsed_visit_and_observes_a_rate():
    clock = Clock()
    f, r = make(clock)
    e = one(f).engine
    f.schedule([entry(0), entry(3)])  # (ids 0 and 1; the links' pages get 2 and 3)
    lease = take(f, 0)
    links = [link(1, weight=1.0), link(2, weight=3.0)]
    assert visit(f, lease, links, virtual_weight=1.0, changed=None) is not None
    assert [e.id_of(key(k)) for k in (0, 3, 1, 2)] == [0, 1, 2, 3]
    kept = r.links_of(0)
    assert kept.ids.tolist() == [2, 3] and kept.weights.tolist() == [1.0, 3.0]
    assert kept.virtual_weight == 1.0
    b, c, never = 2, 3, 1  # (the two children; the page of key 3, never parsed)
    e.payout()  # (every page gets cash: page 0 has some to pay)
    c0, cb, cc, v = e.cash_of(0), e.cash_of(b), e.cash_of(c), e.virtual_cash
    assert c0 > 0
    clock.t += 100.0
    lease = take(f, 0)
    got = f.unchanged(lease)
    assert got is not None and got.codes == []  # (the links are not filed again)
    rest = (1.0 - EPS) * c0  # over weights 1 and 3, and 1 of links not followed
    assert e.cash_of(0) == pytest.approx(0.0, abs=1e-15)
    assert e.cash_of(b) - cb == pytest.approx(rest / 5, rel=1e-9)
    assert e.cash_of(c) - cc == pytest.approx(3 * rest / 5, rel=1e-9)
    assert e.virtual_cash - v == pytest.approx(EPS * c0 + rest / 5, rel=1e-9)
    # An unchanged interval of 100 s observed; the page waits again, answered ok.
    a = r.rates.a
    assert (a["u"][0], a["n_u"][0], a["n_c"][0], a["last"][0]) == (100.0, 1.0, 0.0, clock.t)
    assert r.schedule.last[0] == clock.t and r.schedule.state[0] == WAITING
    assert f.status_of(key(0)) == "pending" and one(f).outcome[0] == OK
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)

    # A stale lease: nothing moves, nothing is observed.
    cash, rates = e.cash(), {k: x.copy() for k, x in a.items()}
    assert f.unchanged(lease) is None
    np.testing.assert_array_equal(e.cash(), cash)
    for k in ChangeRates.FIELDS:
        np.testing.assert_array_equal(a[k], rates[k])

    # A 304 at a page's first fetch (never parsed, no links kept): a dangling page.
    assert r.links_of(never) is None
    cn, cb, cc, v = e.cash_of(never), e.cash_of(b), e.cash_of(c), e.virtual_cash
    assert cn > 0
    assert f.unchanged(take(f, never)) is not None
    assert e.virtual_cash - v == pytest.approx(cn, rel=1e-9)
    assert (e.cash_of(b), e.cash_of(c)) == (cb, cc)
    assert a["n_u"][never] == 0 and a["last"][never] == clock.t  # (a first look)
    assert f.status_of(key(3)) == "pending"
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)


# -- 3. the refetch order ---------------------------------------------------------------------


def test_important_pages_that_change_are_refetched_more_and_static_ones_at_the_floor():
    """Every page links to H (the most important) and to the next; H changes at every look,
    S never does (a 304 each time), the others now and then."""
    clock = Clock()
    floor_share = 0.1  # (S's own allocation is below this floor: the floor binds)
    f, r = make(clock, discovery=0.2, floor_share=floor_share)
    n, hot, static = 8, 0, 5
    f.schedule([entry(i) for i in range(n)])
    rng = np.random.default_rng(0)
    counts = np.zeros(n, int)
    static_at: list[int] = []
    seen: set[int] = set()
    for step in range(900):
        clock.t += 1.0
        lease = f.pop()
        i = idx(f, lease)
        if step >= 300:
            counts[i] += 1
            if i == static:
                static_at.append(step)
        first = i not in seen
        seen.add(i)
        if i == static and not first:
            f.unchanged(lease)
            continue
        changed = None if first else (i == hot or bool(rng.random() < 0.3))
        visit(f, lease, [link(hot), link((i + 1) % n)], changed=changed)
    assert r.planner.plans >= 10 and r.planner.budget == pytest.approx(1.0)  # (a pop a second)
    importance = one(f).engine.importance()
    assert importance[hot] == importance.max()
    rates = r.rates.rates(np.arange(n))
    assert rates[hot] > 100 * rates[static]
    # (H changes at every look, as fast as the budget follows: near the top, not past it;
    # the faster its rate reads, the less a refetch of it buys, Cho and Garcia-Molina's rule.)
    assert r.schedule.freq[hot] >= 0.8 * r.schedule.freq[:n].max()
    assert counts[hot] > 10 * max(counts[static], 1), counts
    # The static page gets the floor, and is checked now and then at that pace.
    floor = floor_share * r.planner.budget / n
    assert r.schedule.freq[static] == pytest.approx(floor, rel=1e-9)
    assert len(static_at) >= 4, static_at  # (600 s at the floor: 7.5 refetches)
    assert max(np.diff([300, *static_at, 900])) <= 2 / floor, static_at


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5])
def test_discovery_gets_its_share_of_the_pops_while_pages_were_never_fetched(share):
    """Four pages fetched and planned, every one always overdue; then 30 new pages: they get
    ``share`` of the pops, whatever the refetches due (none with no share)."""
    clock = Clock()
    f, r = make(clock, discovery=share, plan_every=10**6, plan_seconds=1e12)
    ring(f, r, clock, 4, 40)
    f.fleet.replan(clock.t)
    assert r.planner.plans == 1 and len(r.schedule) == 4
    f.fleet.discovery_debt = 0.0
    f.schedule([entry(100 + k) for k in range(30)])
    new = 0
    for _ in range(20):
        clock.t += 1000.0  # (every planned page overdue)
        lease = f.pop()
        i = idx(f, lease)
        new += not one(f).engine.flags[i] & FETCHED
        visit(f, lease, [link((i + 1) % 4)] if i < 4 else [])
    assert new == round(20 * share)


# -- 4. closed pages --------------------------------------------------------------------------


def test_a_closed_page_leaves_the_schedule_and_importance_follows_closed_pages():
    clock = Clock()
    f, r = make(clock, keep_links=True, plan_every=16)
    ring(f, r, clock, 6, 40)
    assert r.planner.plans > 0
    # A failure that leaves the page open keeps its kept links and its place.
    lease = take(f, 1)
    assert f.fail(lease, ERROR)
    assert r.links_of(1) is not None and r.schedule.state[1] == WAITING
    # 404: closed, out of the schedule, its links gone.
    gone = 2
    assert r.schedule.state[gone] == WAITING and np.isfinite(r.schedule.due[gone])
    live = len(r.schedule)
    assert f.fail(take(f, gone), 404)
    assert r.schedule.state[gone] == DISCARDED and len(r.schedule) == live - 1
    assert r.links_of(gone) is None and one(f).link_changes[gone] is None
    assert f.status_of(key(gone)) == "visited"
    # A page never fetched, given up (robots.txt): closed too.
    f.schedule([entry(50)])
    robots = one(f).engine.id_of(key(50))
    assert f.forfeit(take(f, robots), FORBIDDEN)
    for _ in range(40):
        clock.t += 1.0
        lease = f.pop()
        i = idx(f, lease)
        assert i not in (gone, robots)
        visit(f, lease, [link((i + 1) % 6), link((i + 2) % 6), link(50)], changed=False)
    f.fleet.replan(clock.t)  # (a re-plan leaves it out too)
    assert r.schedule.state[gone] == DISCARDED and r.links_of(gone) is None
    e = one(f).engine
    importance = e.importance()
    assert importance[gone] == 0.0
    kept = e.n - 1  # (the pages not gone)
    assert importance[robots] == pytest.approx(e.teleport_share() / kept, rel=1e-12)
    assert importance.sum() == pytest.approx(1.0, abs=TOL)
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)


# -- 5. settle visits -------------------------------------------------------------------------


def test_relay_visits_move_the_richest_waiting_page_never_one_in_flight():
    clock = Clock()
    f, r = make(clock, plan_every=16)
    n = 6
    ring(f, r, clock, n, 30)
    assert r.planner.plans > 0 and r.relays > 0
    e = one(f).engine
    # The richest fetched page, held in flight: it keeps gaining cash, and is never settled.
    x = int(np.argmax(e.cash(np.arange(n))))
    held = take(f, x)
    visits_x = int(e.visits[x])
    start = r.relays
    for _ in range(40):
        clock.t += 1.0
        before = e.visits[:n].copy()
        relays = r.relays
        lease = f.pop()
        i = idx(f, lease)
        settled = np.flatnonzero(e.visits[:n] > before).tolist()
        assert len(settled) == r.relays - relays <= 1
        for j in settled:
            assert j not in (x, i)
            assert one(f).status[j] == PENDING and j in one(f).selection
            assert e.cash_of(j) == pytest.approx(0.0, abs=1e-15)  # (paid out)
        visit(f, lease, [link((i + 1) % n), link((i + 2) % n)], changed=False)
    assert r.relays - start >= 30
    assert e.visits[x] == visits_x and one(f).status[x] == IN_FLIGHT
    others = [e.cash_of(j) for j in range(n) if j != x]
    assert e.cash_of(x) > max(others)  # (it would have been the settle's choice)
    assert visit(f, held, [link((x + 1) % n)], changed=True) is not None
    assert f.total_cash() == pytest.approx(1.0, abs=TOL)


# -- 6. persistence ---------------------------------------------------------------------------


def open_store(path, resume: bool, clock: Clock, refetch: str = "freshness", **kw) -> Crawl:
    return sqlite_crawl(
        path,
        resume,
        epsilon=EPS,
        refresh=1.0,
        continuous=True,
        keep_links=refetch == "freshness",
        refetch=refetch,
        persist_requests=True,
        time_fn=clock,
        **kw,
    )


def test_a_resumed_crawl_gets_its_rates_periods_links_and_budget_back_and_replans(tmp_path):
    path = tmp_path / "s.sqlite"
    clock = Clock()
    f = open_store(path, False, clock, planner=Planner(plan_every=16))
    r = one(f).refresher
    n = 9
    f.schedule([entry(i) for i in range(n)])
    rng = np.random.default_rng(3)
    for _ in range(120):
        clock.t += 1.0
        lease = f.pop()
        i = idx(f, lease)
        if i % 3 == 0 and one(f).engine.flags[i] & FETCHED:
            f.unchanged(lease)
        else:
            targets = {int(j) for j in rng.choice(n, 3, replace=False)} - {i}
            visit(f, lease, [link(j, weight=2.0) for j in sorted(targets)], changed=i % 3 == 1)
    assert r.planner.plans > 0 and r.planner.budget > 0
    assert all(kept.weights is not None for _i, kept in r.kept())  # (weighed links)
    f.commit(wait=True)
    rates = {k: v[:n].copy() for k, v in r.rates.a.items()}
    periods = r.schedule.last[:n].copy()
    links = {i: sorted(k.ids.tolist()) for i, k in r.kept()}
    budget = r.planner.budget
    f.close([])

    clock.t += 50.0
    g = open_store(path, True, clock)
    s = one(g).refresher
    for k in ChangeRates.FIELDS:
        np.testing.assert_array_equal(s.rates.a[k][:n], rates[k], err_msg=k)
    assert np.isfinite(periods).all()
    np.testing.assert_array_equal(s.schedule.last[:n], periods)
    assert s.planner.budget == pytest.approx(budget, rel=1e-9)
    assert {i: sorted(k.ids.tolist()) for i, k in s.kept()} == links
    for _i, kept in s.kept():  # (weights are not saved: plain links)
        assert kept.weights is None and kept.virtual_weight == 0.0
    assert g.total_cash() == pytest.approx(1.0, abs=TOL)
    lease = g.pop()  # (and the crawl goes on, replanned first: every page waits its turn)
    assert s.planner.plans == 1 and len(s.schedule) == n - 1  # (all but the one popped)
    assert (s.schedule.freq[:n] > 0).all()
    assert g.unchanged(lease) is not None
    g.close([])

    # A crawl that refetched by change is not resumed by one that does not.
    before = path.read_bytes()
    with pytest.raises(StoreError, match="OPIC_REFETCH='freshness' there, 'cash' here"):
        open_store(path, True, clock, refetch="cash")
    assert path.read_bytes() == before


# -- 7. the schedule's eligibility rule -------------------------------------------------------


def planned(n: int, periods: list[float], at: float = 0.0) -> Refresher:
    """A refresher whose pages ``0..n-1`` were fetched at ``at`` and are due ``periods`` later."""
    r = Refresher(wall=lambda: at)
    for i in range(n):
        r.observed(i, None, now=at)
    r.schedule.plan(1.0 / np.asarray(periods, float), np.arange(n))
    return r


def test_due_takes_the_first_eligible_page_and_refused_ones_keep_their_places():
    r = planned(4, [1.0, 2.0, 4.0, 8.0])
    sched = r.schedule
    assert len(sched) == 4 and sched.peek() == (0, 1.0)
    # Nothing due yet: no page unless early.
    assert r.due(lambda j: True, early=False, now=0.5) is None
    assert len(sched) == 4 and sched.peek() == (0, 1.0)
    # Page 0 refused: page 1, the next due, is taken; 0 keeps its place.
    assert r.due(lambda j: j != 0, early=False, now=5.0) == 1
    assert sched.state[1] == POPPED and len(sched) == 3
    assert sched.peek() == (0, 1.0) and sched.state[0] == WAITING
    # Only page 3 eligible, not due yet: not taken unless early; nothing lost either way.
    assert r.due(lambda j: j == 3, early=False, now=5.0) is None
    assert len(sched) == 3 and sched.peek() == (0, 1.0)
    assert r.due(lambda j: j == 3, early=True, now=5.0) == 3
    # Everything refused: nothing taken, nothing lost.
    assert r.due(lambda j: False, early=True, now=100.0) is None
    assert len(sched) == 2
    assert [r.due(lambda j: True, early=False, now=100.0) for _ in range(3)] == [0, 2, None]


def test_due_looks_at_64_pages_at_most_and_loses_none():
    n = 70
    r = planned(n, [1.0 + k for k in range(n)])
    assert r.due(lambda j: j >= 65, early=True, now=1000.0) is None  # (beyond its look)
    assert len(r.schedule) == n and r.schedule.peek() == (0, 1.0)
    assert r.due(lambda j: j >= 60, early=True, now=1000.0) == 60
    assert len(r.schedule) == n - 1


def test_a_pop_skips_a_due_page_whose_slot_is_full_and_keeps_its_place():
    clock = Clock()
    f, r = make(clock, plan_every=16)
    f.schedule([entry(i, "ab"[i % 2]) for i in range(6)])
    for _ in range(30):
        clock.t += 1.0
        lease = f.pop()
        i = idx(f, lease)
        visit(f, lease, [link(j, "ab"[j % 2]) for j in ((i + 1) % 6, (i + 2) % 6)])
    assert r.planner.plans > 0
    r.planner.plan_every, r.planner.plan_seconds = (
        10**6,
        1e12,
    )  # (no re-plan from here: due times stay)
    clock.t += 1.0
    first = r.schedule.peek()[0]
    slot = "ab"[first % 2]
    lease = f.pop(full_slots={slot})
    i = idx(f, lease)
    assert i != first and "ab"[i % 2] != slot
    # (Its place: first still; its due time too, see the test below.)
    assert r.schedule.peek()[0] == first and r.schedule.state[first] == WAITING
    visit(f, lease, [])
    clock.t += 1.0
    assert idx(f, f.pop()) == first  # (its turn, once its slot has room)


@pytest.mark.parametrize("how", ["refused", "released"])
def test_a_page_put_back_keeps_the_due_time_a_phase_kept_replan_gave_it(how):
    r = planned(3, [1.0, 1.9, 1.8])  # due 1.0, 1.9, 1.8
    sched = r.schedule
    sched.plan(np.array([0.5, 1 / 1.9, 1 / 1.8]), now=0.5)  # page 0 halves: phase kept
    assert sched.due[0] == pytest.approx(1.5) and sched.peek() == (0, 1.5)
    if how == "refused":
        assert r.due(lambda j: j != 0, early=True, now=0.6) == 2
    else:
        r.taken(0)  # (leased, then handed back unfetched: a release, a retry)
        r.returned(0)
    assert sched.due[0] == pytest.approx(1.5)  # got: 2.0 (last + 1 / f)
    assert sched.peek()[0] == 0  # got: page 1 (due 1.9) first


def test_a_trusted_last_modified_is_evidence_at_a_first_look_and_dates_a_change():
    clock = Clock()
    r = Refresher(wall=clock)
    clock.t = 10_000.0
    r.observed(0, None, since=10.0)  # changed 9,990 s ago, and not since
    r.observed(1, None)  # nothing known
    r.observed(2, None, since=20_000.0)  # a date in the future: no evidence
    r.observed(3, None, since=9_990.0)  # changed 10 s ago
    rates = r.rates.rates(prior_rate=1 / 600.0)  # (a prior of one change in 10 minutes)
    # A change s ago and none since: one change in s (a Poisson process's last change is
    # Exp(rate) back from any moment), with the prior's unchanged pseudo-interval tau: about
    # 1 / (s + a_u tau). (As unchanged time alone, a_c / (s + a_u tau): 20 times lower.)
    tau = PRIOR_WEIGHTS[1] * math.log(2) * 600.0  # (its weight times its length)
    for i, s in ((0, 9_990.0), (3, 10.0)):
        assert 0.8 / (s + tau) < rates[i] < 1.2 / (s + tau)
    assert rates[2] == rates[1]
    assert r.rates.last_changed()[[0, 3]].tolist() == [10.0, 9_990.0]
    # After a change seen, a date between the two looks dates it; an older one lies.
    clock.t = 10_100.0
    r.observed(1, True, since=10_050.0)
    r.observed(2, True, since=9_000.0)
    last = r.rates.last_changed()
    assert last[1] == 10_050.0
    assert 10_000.0 < last[2] < 10_100.0  # (the expected time within the interval)


def test_a_last_modified_that_lied_takes_the_change_it_dated_with_it():
    """A change dated at a first look is forgotten with a distrusted Last-Modified, and kept
    when only 304s lied (the page's rate then rests on it); unchanged time goes with 304s."""
    clock = Clock()
    r = Refresher(wall=clock)
    for i in (0, 1, 2):
        r.observed(i, None, now=86_400.0, since=0.0)  # changed a day before its first look
        r.observed(i, False, now=86_460.0)  # a minute later, unchanged
    before = r.rates.rates(prior_rate=1.0)
    r.forget(np.array([0]), unchanged=False, dated=True)
    r.forget(np.array([1]), unchanged=True, dated=False)
    after = r.rates.rates(prior_rate=1.0)
    assert r.rates.a["u_e"][:3].tolist() == [0.0, 86_400.0, 86_400.0]
    assert r.rates.a["u"][:3].tolist() == [60.0, 0.0, 60.0]
    assert after[0] > 30 * before[0]  # (a minute unchanged alone: nothing of a day)
    assert before[1] < after[1] < 2 * before[1] and after[2] == before[2]


def test_pages_whose_host_lied_forget_what_they_were_thought_unchanged():
    """Pages of a host that answered "unchanged" for changed pages (false 304s): they drop
    the time they were thought unchanged (their changes seen stand) and are re-planned soon;
    a page of an honest host keeps everything."""
    clock = Clock()
    r = Refresher(wall=clock)
    for i in (0, 1):
        r.observed(i, None, now=0.0)
        for k in range(1, 60):  # 59 "unchanged" looks a second apart (304s)...
            r.observed(i, False, now=float(k))
        r.observed(i, True, now=60.0)  # ...then a change
    before = r.rates.rates(prior_rate=1.0)  # (a prior as the crawl's: one change a second)
    r.planner.wanted = False
    r.forget(np.array([0]))
    assert r.rates.a["u"][0] == 0.0 and r.rates.a["n_c"][0] == 1 and r.planner.wanted
    assert r.rates.a["u"][1] == 59.0
    after = r.rates.rates(prior_rate=1.0)
    assert after[0] > 10 * before[0] and after[1] == before[1]


def test_plans_take_at_most_a_twentieth_of_the_crawls_time():
    clock = Clock()
    r = Refresher(Planner(plan_every=1, plan_seconds=1.0), wall=clock)
    r.observed(0, None)
    r.planner.count_refetch(clock())
    clock.t += 1.0
    r.plan(np.array([1.0]), np.array([True]))
    r.planner.plan_cost = 2.0  # (a plan that took 2 s: none again before 40 s)
    for _ in range(5):
        r.planner.count_refetch(clock())
    clock.t += 39.0
    assert not r.planner.due(1, clock())
    clock.t += 1.5
    assert r.planner.due(1, clock())


def test_a_revisit_tells_the_engine_how_far_the_page_links_moved():
    """What the adaptive window watches: at each parsed revisit, the share of the page's
    links (to other pages) new or gone since its last parsed visit; a page gone counts 1."""
    clock = Clock()
    config = CrawlConfig(
        epsilon=EPS, refresh=1.0, window="adaptive:30", continuous=True, refetch="freshness"
    )
    f = Crawl(MemoryStore(), config, time_fn=clock)
    f.open({})
    engine = one(f).engine
    told: list[tuple[int, float]] = []
    last: list[int] = []

    def observe(share: float, now: float) -> None:
        told.append((last[-1], share))

    engine.window.observe_change = observe  # type: ignore[method-assign]
    links = {0: [1, 2], 1: [], 2: [], 3: []}

    def lease_of(i: int):
        """Pops (visiting the other pages over their links) until page ``i`` comes out."""
        for _ in range(50):
            clock.t += 1.0
            lease = f.pop()
            if lease is None:
                f.schedule([entry(i)], again=True)
                continue
            last.append(idx(f, lease))
            if last[-1] == i:
                return lease
            visit(f, lease, [link(j) for j in links[last[-1]]])
        raise AssertionError(f"page {i} never popped")

    f.schedule([entry(0)])
    visit(f, lease_of(0), [link(1), link(2)])
    assert told == []  # a first visit: nothing to compare with
    visit(f, lease_of(1), [])
    visit(f, lease_of(0), [link(1), link(2)])
    assert told[-1] == (0, 0.0)  # the same links
    links[0] = [2, 0, 3, 3]
    visit(f, lease_of(0), [link(j) for j in links[0]])
    assert told[-1] == (0, pytest.approx(2 / 3))  # 1 gone, 3 new, of 1, 2, 3 (self, repeat: none)
    visit(f, lease_of(3), [])
    assert f.fail(lease_of(3), 404)  # fetched before, now gone
    assert told[-1] == (3, 1.0)
    count = len(told)
    f.schedule([entry(4)])
    assert f.fail(lease_of(4), 404)  # a broken link met at the first fetch: no news
    assert f.fail(lease_of(0), 503)  # (a failure that is not final: no news either)
    # (the pages visited on the way over the same links: no change either)
    assert all(share == 0.0 for _, share in told[count:]) and 4 not in {i for i, _ in told}
