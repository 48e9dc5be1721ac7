"""Selection strategies: Greedy pops the most cash, never a page in flight, with bounded heaps."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_opic.opic import (
    CycleSelection,
    GreedySelection,
    OpicEngine,
    RandomSelection,
    SlottedGreedySelection,
    TieredSelection,
    Tiers,
    make_selection,
)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 15),
    seed=st.integers(0, 10**6),
    refresh=st.sampled_from([0.0, 0.3, 1.0]),
    steps=st.integers(1, 80),
)
def test_greedy_pops_the_candidate_with_most_cash(n, seed, refresh, steps):
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.3, refresh=refresh)
    e.add_pages(n)
    sel = GreedySelection(e)
    for i in range(n):
        sel.push(i)
    in_flight = set()
    for _ in range(steps):
        action = rng.integers(0, 4)
        if action == 0 and e.n < 40:  # discover pages
            for i in e.add_pages(int(rng.integers(1, 3))):
                sel.push(int(i))
        elif action == 1 and in_flight:  # a fetch completes
            i = in_flight.pop()
            kids = rng.choice(e.n, size=min(e.n, int(rng.integers(0, 4))), replace=False)
            if rng.random() < 0.5:
                e.visit(i, kids.tolist())
            else:  # the batch path credits many pages at once
                e.visit_batch(np.array([i]), np.array([0, kids.size]), kids)
            if rng.random() < 0.7:
                sel.push(i)  # continuous crawl: pending again
        else:
            e.payout()
            cands = [i for i in range(e.n) if i in sel]
            i = sel.pop()
            if not cands:
                assert i is None
                continue
            cash = e.cash()
            assert cash[i] >= max(cash[j] for j in cands) - 1e-15
            assert i not in in_flight
            in_flight.add(i)
        # One heap entry per candidate: nothing stale accumulates.
        assert len(sel) == sum(1 for i in range(e.n) if i in sel)
        assert not any(i in sel for i in in_flight)


def test_greedy_discard_and_transfer_keep_heaps_consistent():
    e = OpicEngine()
    e.add_pages(5)
    e.init_uniform()
    sel = GreedySelection(e)
    for i in range(5):
        sel.push(i)
    sel.discard(2)
    e.transfer(3, 4)  # a redirect: page 3 gives its cash to 4 and stops being a candidate
    assert 3 not in sel and len(sel) == 3
    assert sel.pop() == 4
    assert sorted([sel.pop(), sel.pop()]) == [0, 1]
    assert sel.pop() is None


def test_greedy_compares_cash_across_fetched_and_unfetched_sets():
    e = OpicEngine(epsilon=1.0, refresh=0.0)
    e.add_pages(3)
    e.init_uniform()
    sel = GreedySelection(e)
    e.visit(0, [])  # 1/3 to the virtual page, due to the two unfetched pages
    sel.push(0)
    sel.push(1)
    assert sel.pop() == 1  # 1/3 + 1/6 beats the fetched page's 0
    assert e.cash_of(1) == 0.5


def test_random_and_cycle_pop_every_candidate_once():
    for cls in (RandomSelection, CycleSelection):
        e = OpicEngine()
        e.add_pages(20)
        sel = cls(e)
        for i in range(20):
            sel.push(i)
        sel.discard(7)
        got = [sel.pop() for _ in range(19)]
        assert sorted(got) == [i for i in range(20) if i != 7]
        assert sel.pop() is None and len(sel) == 0


def test_cycle_goes_around_in_a_fixed_order():
    e = OpicEngine()
    e.add_pages(5)
    sel = CycleSelection(e)
    for i in (3, 1, 4):
        sel.push(i)
    assert sel.pop() == 1
    sel.push(0)
    assert [sel.pop(), sel.pop(), sel.pop()] == [3, 4, 0]


def test_random_is_roughly_uniform():
    e = OpicEngine()
    e.add_pages(4)
    sel = make_selection("random", e, seed=1)
    counts = np.zeros(4)
    for _ in range(4000):
        for i in range(4):
            sel.push(i)
        counts[sel.pop()] += 1
    assert counts.min() > 800


def test_unknown_strategy_is_refused():
    import pytest

    with pytest.raises(ValueError):
        make_selection("best", OpicEngine())


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 20),
    seed=st.integers(0, 10**6),
    refresh=st.sampled_from([0.0, 0.5, 1.0]),
    steps=st.integers(1, 80),
    slots=st.integers(1, 4),
)
def test_slotted_greedy_pops_the_best_candidate_among_slots_with_room(
    n, seed, refresh, steps, slots
):
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.3, refresh=refresh)
    e.add_pages(n)
    sel = SlottedGreedySelection(e)
    slot = {}
    for i in range(n):
        slot[i] = f"host{rng.integers(0, slots)}"
        sel.push(i, slot[i])
    in_flight = set()
    for _ in range(steps):
        action = rng.integers(0, 4)
        if action == 0 and e.n < 40:
            for i in e.add_pages(int(rng.integers(1, 3))):
                slot[int(i)] = f"host{rng.integers(0, slots)}"
                sel.push(int(i), slot[int(i)])
        elif action == 1 and in_flight:
            i = in_flight.pop()
            kids = rng.choice(e.n, size=min(e.n, int(rng.integers(0, 4))), replace=False)
            if rng.random() < 0.5:
                e.visit(i, kids.tolist())
            else:
                e.visit_batch(np.array([i]), np.array([0, kids.size]), kids)
            if rng.random() < 0.7:
                sel.push(i, slot[i])
        else:
            full = {f"host{k}" for k in range(slots) if rng.random() < 0.4}
            e.payout()
            cands = [i for i in range(e.n) if i in sel and slot[i] not in full]
            i = sel.pop(lambda host, full=full: host not in full)
            if not cands:
                assert i is None
            else:
                cash = e.cash()
                assert slot[i] not in full
                assert cash[i] >= max(cash[j] for j in cands) - 1e-15
                in_flight.add(i)
        assert len(sel) == sum(1 for i in range(e.n) if i in sel)
        assert not any(i in sel for i in in_flight)
    # Nothing was lost while slots were set aside: every candidate is still reachable.
    left = [sel.pop() for _ in range(len(sel))]
    assert None not in left and sel.pop() is None


def test_slotted_greedy_serves_other_hosts_while_one_is_busy():
    e = OpicEngine()
    e.add_pages(6)
    e.init_uniform()
    sel = SlottedGreedySelection(e)
    for i in range(3):
        sel.push(i, "big.example")
    for i in range(3, 6):
        sel.push(i, "small.example")
    e.transfer(3, 0)  # big.example's page 0 now holds the most cash
    busy = {"big.example"}
    assert sel.pop(lambda slot: slot not in busy) in (4, 5)
    assert sel.pop() == 0  # no slot limit: the richest page
    assert sel.pop(lambda slot: slot not in busy) in (4, 5)  # the other small one
    assert sel.pop(lambda slot: slot not in busy) is None  # big.example's two are left
    assert len(sel) == 2 and {sel.pop(), sel.pop()} == {1, 2}


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 20), seed=st.integers(0, 10**6), steps=st.integers(1, 60))
def test_tiers_serve_the_highest_priority_then_the_most_cash(n, seed, steps):
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.3, refresh=0.5)
    e.add_pages(n)
    e.init_uniform()
    tiers, codes = Tiers(), array("I", [0]) * n
    sel = TieredSelection(e, tiers, codes)
    tier, host = {}, {}
    for i in range(n):
        tier[i], host[i] = int(rng.integers(-1, 2)), f"h{rng.integers(0, 2)}"
        codes[i] = tiers.code(tier[i], host[i])
        sel.push(i)
    for _ in range(steps):
        if rng.random() < 0.5:
            i = int(rng.integers(0, n))
            e.visit(i, rng.choice(n, size=min(n, 3), replace=False).tolist())
            sel.push(i)
            continue
        full = {"h0"} if rng.random() < 0.3 else set()
        e.payout()
        cands = [i for i in range(n) if i in sel and host[i] not in full]
        i = sel.pop(lambda h, full=full: h not in full)
        if not cands:
            assert i is None
            continue
        best = max(tier[j] for j in cands)
        assert tier[i] == best
        cash = e.cash()
        assert cash[i] >= max(cash[j] for j in cands if tier[j] == best) - 1e-15
        assert len(sel) == sum(1 for j in range(n) if j in sel)
