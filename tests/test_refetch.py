"""The refetch schedule: earliest due first, re-plans that keep phases, a bounded heap."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_opic.opic.refetch import POPPED, RefetchSchedule


def schedule_with(freq, last) -> RefetchSchedule:
    s = RefetchSchedule()
    s.grow(len(freq))
    s.plan(np.asarray(freq, float))
    for i, t in enumerate(last):
        if t is not None:
            s.fetched(i, t)
    return s


def test_pops_come_in_due_order_and_pages_never_fetched_or_at_zero_wait_for_none():
    #            due: 0 + 1/2, 1 + 1/4, -, 0.2 + 1/1, never (f = 0)
    s = schedule_with([2.0, 4.0, 3.0, 1.0, 0.0], [0.0, 1.0, None, 0.2, 0.0])
    assert len(s) == 3
    assert s.peek() == (0, 0.5)
    assert [s.pop(), s.pop(), s.pop(), s.pop()] == [0, 3, 1, None]
    assert s.state[0] == POPPED


def test_a_fetch_makes_the_page_due_one_period_later():
    s = schedule_with([2.0, 1.0], [0.0, 0.0])
    assert s.pop() == 0
    s.fetched(0, 0.5)  # due 1.0, with page 1
    assert s.peek()[1] == 1.0
    s.fetched(1, 0.9)  # fetched out of turn (a discovery pop found it): due 1.9
    assert s.pop() == 0 and s.pop() == 1


def test_a_page_popped_early_keeps_its_grid_and_one_fetched_late_starts_afresh():
    s = schedule_with([1.0, 1.0], [0.0, 0.5])  # due 1.0 and 1.5
    assert s.pop() == 0
    s.fetched(0, 0.7)  # no page was due yet: next due 1.0 + 1, not 0.7 + 1
    assert s.due[0] == 2.0
    assert s.pop() == 1
    s.fetched(1, 1.8)  # late: a period from the fetch
    assert s.due[1] == pytest.approx(2.8)


def test_with_the_budget_equal_to_the_rate_each_page_gets_its_frequency():
    rng = np.random.default_rng(0)
    n = 50
    f = rng.dirichlet(np.ones(n)) * n  # sum f = n refetches per unit
    s = schedule_with(f, rng.uniform(-1, 0, n))
    counts = np.zeros(n)
    steps = 40 * n  # 40 units of time, n fetches per unit
    for k in range(steps):
        i = s.pop()
        counts[i] += 1
        s.fetched(i, k / n)
    np.testing.assert_allclose(counts, f * 40, atol=2.0)


def test_a_replan_with_now_scales_the_time_left_instead_of_bunching():
    s = schedule_with([1.0, 1.0, 0.0], [0.0, 0.5, 0.0])  # due 1.0 and 1.5; page 2 not scheduled
    s.plan(np.array([4.0, 0.5, 2.0]), now=0.8)
    # page 0: 0.2 left at f = 1 -> 0.05 at f = 4; page 1: 0.7 left -> 1.4; page 2 (was at f = 0):
    # from its last fetch, 0 + 1/2 -- in the past, as without now.
    np.testing.assert_allclose(s.due, [0.85, 2.2, 0.5])
    s.plan(np.array([4.0, 0.5, 2.0]))  # without now: from the last fetches
    np.testing.assert_allclose(s.due, [0.25, 2.5, 0.5])


def test_push_discard_and_a_plan_for_some_pages():
    s = schedule_with([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert s.pop() == 2
    s.push(2)  # handed back unfetched: same due time
    assert s.peek() == (2, pytest.approx(1 / 3))
    s.discard(2)
    assert len(s) == 2 and s.pop() == 1
    s.plan(np.array([10.0]), ids=[0])
    assert s.peek() == (0, 0.1)
    s.fetched(2, 1.0)  # a discarded page fetched again is scheduled again
    assert len(s) == 2


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_match_a_reference_and_the_heap_stays_bounded(seed):
    rng = np.random.default_rng(seed)
    n = 30
    s = schedule_with(rng.uniform(0, 3, n), rng.uniform(0, 1, n))
    popped: set[int] = set()
    gone: set[int] = set()
    now = 1.0
    for _ in range(2000):
        op = rng.integers(0, 6)
        i = int(rng.integers(0, n))
        if op == 0:
            s.fetched(i, now)
            popped.discard(i)
            gone.discard(i)
        elif op == 1:
            if i in popped:
                s.push(i)
                popped.discard(i)
        elif op == 2:
            s.discard(i)
            gone.add(i)
        elif op == 3:
            s.plan(rng.uniform(0, 3, n) * (rng.random(n) < 0.9), now=now)
        else:
            live = [k for k in range(n) if k not in popped and k not in gone]
            due = {k: s.due[k] for k in live if np.isfinite(s.due[k])}
            got = s.pop()
            if not due:
                assert got is None
            else:
                assert s.due[got] == min(due.values())
                popped.add(got)
        now += 0.01
        live = [k for k in range(n) if k not in popped and k not in gone]
        assert len(s) == sum(np.isfinite(s.due[k]) for k in live)
        assert len(s._heap) <= 2 * len(s) + 64 + 1
