"""Selection strategies: Greedy pops the most cash, never a page in flight, with bounded heaps."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scrapy_opic.opic import (
    CycleSelection,
    GreedySelection,
    OpicEngine,
    RandomSelection,
    make_selection,
)
from scrapy_opic.opic.batch import visit_batch
from scrapy_opic.opic.constants import CLOSED, FETCHED
from scrapy_opic.opic.selection import TieredSelection, Tiers


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
                visit_batch(e, np.array([i]), np.array([0, kids.size]), kids)
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


class _Slotted:
    """A :class:`TieredSelection` with one priority, pushed by slot: ``push(i, slot)``."""

    def __init__(self, e, web=False):
        self.sel = TieredSelection(e, Tiers(), array("I"), web)

    def push(self, i, slot):
        codes = self.sel.codes
        codes.extend([0] * (i + 1 - len(codes)))
        codes[i] = self.sel.tiers.code(0, slot)
        self.sel.push(i)

    def pop(self, has_room=None):
        return self.sel.pop(has_room)

    def __contains__(self, i):
        return i in self.sel

    def __len__(self):
        return len(self.sel)


def _slotted(e):
    return _Slotted(e)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 20),
    seed=st.integers(0, 10**6),
    refresh=st.sampled_from([0.0, 0.5, 1.0]),
    steps=st.integers(1, 80),
    slots=st.integers(1, 4),
)
def test_greedy_across_slots_pops_the_best_candidate_among_slots_with_room(
    n, seed, refresh, steps, slots
):
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.3, refresh=refresh)
    e.add_pages(n)
    sel = _slotted(e)
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
                visit_batch(e, np.array([i]), np.array([0, kids.size]), kids)
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


def test_greedy_across_slots_serves_other_hosts_while_one_is_busy():
    e = OpicEngine()
    e.add_pages(6)
    e.init_uniform()
    sel = _slotted(e)
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
    sel = TieredSelection(e, tiers, codes, web=False)
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


# -- TieredSelection: compact tiers, against a reference model ------------------------------------

PRIORITIES = (-1, 0, 2)
HOSTS = ("h0", "h1", "h2")


def reference_best(e, cand, tiers, full, discover, turns=None, continuous=False, votes=False):
    """The pages a pop may return, by a list scan over the candidates (``cand``: id -> code):
    the highest priority that has a candidate in a slot with room (with ``discover``, first the
    highest that has a never-fetched one, among those only), then the most cash, a tie between
    a fetched and a never-fetched page going to the never-fetched one. Cash is compared as the
    selection compares it, ``s + acc_unfetched`` for a page never fetched and ``s`` for one
    fetched (true cash minus ``acc_all``, which every live page has), so that rounding cannot
    make the two disagree; pages of equal cash are all acceptable. With ``turns`` (the web
    order; code -> the pages never fetched popped from it), the never-fetched candidate of a
    priority is the richest of the codes with the fewest turns, and it is compared by cash
    with the richest fetched one; with ``continuous`` too, only a discovery pop's pages never
    fetched are chosen so, the others by cash alone. With ``votes``, a never-fetched
    candidate is the one of most votes (the engine's ``order``), not of most cash: of the
    fewest turns in a pop that takes turns, of all in a continuous crawl's other pops, and
    it is compared by cash with the richest fetched one."""
    s = e.stored

    def unfetched(i):
        return not e.flags[i] & FETCHED

    def value(i):
        return s[i] + e.acc_unfetched if unfetched(i) else s[i]

    allowed = [i for i, c in cand.items() if tiers.slot(c) not in full]
    groups = []  # (candidates, whether turns choose among them)
    order = sorted({tiers.priority(c) for c in cand.values()}, reverse=True)
    if discover:
        groups += [
            ([i for i in allowed if tiers.priority(cand[i]) == p and unfetched(i)], True)
            for p in order
        ]
    groups += [
        ([i for i in allowed if tiers.priority(cand[i]) == p], not continuous) for p in order
    ]
    for group, by_turns in groups:
        if group and ((turns is not None and by_turns) or (votes and turns is not None)):
            fresh = [i for i in group if unfetched(i)]
            if fresh:
                counts = turns if by_turns else {}  # (a pop that takes none: slots alike)
                fewest = min(counts.get(cand[i], 0) for i in fresh)
                fresh = [i for i in fresh if counts.get(cand[i], 0) == fewest]
                rank = e.order.__getitem__ if votes else value
                best = max(rank(i) for i in fresh)
                fresh = [i for i in fresh if rank(i) == best]
            old = [i for i in group if not unfetched(i)]
            if old:
                rich = max(value(i) for i in old)
                old = [i for i in old if value(i) == rich]
            if fresh and old:  # (the selection compares its choice: any of the ties)
                if all(value(i) >= value(old[0]) for i in fresh):
                    return set(fresh)
                if all(value(i) < value(old[0]) for i in fresh):
                    return set(old)
                return set(fresh) | set(old)
            return set(fresh or old)
        if group:
            best = max(value(i) for i in group)
            ties = [i for i in group if value(i) == best]
            return {i for i in ties if unfetched(i)} or set(ties)
    return set()


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 20),
    seed=st.integers(0, 10**6),
    refresh=st.sampled_from([0.0, 0.5, 1.0]),
    steps=st.integers(1, 120),
    web=st.booleans(),
    continuous=st.booleans(),
    votes=st.booleans(),
)
# (A continuous web-order crawl whose refetch pops would take turns if they could: always run.)
@example(n=1, seed=90269, refresh=0.0, steps=48, web=True, continuous=True, votes=False)
def test_tiered_pops_match_a_reference_model(n, seed, refresh, steps, web, continuous, votes):
    """Random interleavings of push, discard, credits (visits, batch visits, redirects), closes
    and pops with random full slots and discovery flags, in the web order (in every pop, or a
    continuous crawl's discovery pops; by votes in a one-pass crawl whose engine keeps them,
    some pages seeds) or by cash: every pop
    is one the reference model allows, so the sequence of popped cash is the reference's (ids
    differ only among equal cash); membership and counts agree at every step."""
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.3, refresh=refresh, capacity=8, votes=votes)
    e.add_pages(n)
    tiers, codes = Tiers(), array("I")

    class Codes:  # the frontier's part: one code per page, grown with the engine
        def grow(self, capacity):
            codes.extend([0] * (capacity - len(codes)))

        def raised(self, i):
            pass

        def changed(self, ids):
            pass

        def taken(self, ids):
            pass

    sel = TieredSelection(e, tiers, codes, web, continuous)
    e.add_observer(Codes())
    cand: dict[int, int] = {}  # the reference's candidates: id -> code
    turns: dict[int, int] | None = {} if web else None  # code -> first fetches popped
    in_flight: set[int] = set()

    def push(i):
        if i in cand or i in in_flight:
            return
        if e.flags[i] & CLOSED:
            e.reopen_page(i)  # (as the frontier does for a closed page asked for again)
        codes[i] = tiers.code(int(rng.choice(PRIORITIES)), str(rng.choice(HOSTS)))
        if votes and rng.random() < 0.2:
            e.seed(i)  # (as the frontier files a start request: before it is a candidate)
        sel.push(i)
        cand[i] = codes[i]

    def taken(i):  # the engine takes a page out (a visit, a redirect, a close)
        cand.pop(i, None)
        in_flight.discard(i)

    for i in range(n):
        if rng.random() < 0.8:
            push(i)
    for _ in range(steps):
        action = rng.integers(0, 10)
        i = int(rng.integers(0, e.n))
        if action == 0 and e.n < 40:  # discoveries
            for j in e.add_pages(int(rng.integers(1, 3))).tolist():
                push(j)
        elif action == 1:
            push(i)
        elif action == 2:
            sel.discard(i)
            cand.pop(i, None)
        elif action == 3:  # a visit pays its links (a candidate visited leaves the heaps)
            kids = rng.choice(e.n, size=min(e.n, int(rng.integers(0, 5))), replace=False)
            if votes or rng.random() < 0.7:
                e.visit(i, kids.tolist())
            else:  # the batch path credits many pages at once
                visit_batch(e, np.array([i]), np.array([0, kids.size]), kids)
            taken(i)
            if rng.random() < 0.6:
                push(i)  # pending again
        elif action == 4:  # a redirect: the cash moves on
            j = int(rng.integers(0, e.n))
            e.transfer(i, j)
            if j != i:  # (a redirect to itself moves nothing)
                taken(i)
        elif action == 5 and rng.random() < 0.3:  # a close
            e.close_page(i)
            taken(i)
        else:
            full = {h for h in HOSTS if rng.random() < 0.35}
            discover = bool(rng.random() < 0.3)
            e.payout()
            allowed = reference_best(e, cand, tiers, full, discover, turns, continuous, votes)
            got = sel.pop(lambda h, full=full: h not in full, discover)
            if not allowed:
                assert got is None
            else:
                assert got in allowed
                if turns is not None and not e.flags[got] & FETCHED:
                    turns[cand[got]] = turns.get(cand[got], 0) + 1
                del cand[got]
                in_flight.add(got)
        assert len(sel) == len(cand)
        assert all((j in sel) == (j in cand) for j in range(e.n))
    # Nothing was lost while slots were set aside: the rest pops in the reference's order.
    while cand:
        e.payout()
        got = sel.pop()
        assert got in reference_best(e, cand, tiers, set(), False, turns, continuous, votes)
        if turns is not None and not e.flags[got] & FETCHED:
            turns[cand[got]] = turns.get(cand[got], 0) + 1
        del cand[got]
    assert sel.pop() is None and len(sel) == 0


def tiered_state(n, seed, n_priorities, n_slots):
    """An engine whose ``n`` pages hold distinct cash (two visits paid them by random link
    weights), a quarter of them fetched, with codes over ``n_priorities`` priorities and
    ``n_slots`` slots."""
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=0.2, refresh=0.5, capacity=n)
    e.add_pages(n)
    e.init_uniform()
    for i in rng.choice(n, size=n // 4, replace=False).tolist():
        e.visit(i)  # fetched (dangling: its cash goes to the virtual page)
    e.payout()
    everyone = list(range(n))
    for i in rng.choice(n, size=min(n, 2), replace=False).tolist():
        e.visit(i, everyone, weights=rng.random(n).tolist())
    tiers = Tiers()
    codes = array("I", [0]) * n
    for i in range(n):
        codes[i] = tiers.code(int(rng.integers(0, n_priorities)), f"h{rng.integers(0, n_slots)}")
    return e, tiers, codes


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 120),
    seed=st.integers(0, 10**6),
    n_priorities=st.integers(1, 4),
    n_slots=st.integers(1, 4),
    before=st.floats(0.0, 1.0),
)
def test_load_pops_as_pushing_one_by_one(n, seed, n_priorities, n_slots, before):
    """``load`` (a resumed crawl's bulk push) builds heaps that pop exactly as pages pushed one
    by one do, some of them candidates already (sorted in with the loaded ones)."""
    e, tiers, codes = tiered_state(n, seed, n_priorities, n_slots)
    one, bulk = TieredSelection(e, tiers, codes), TieredSelection(e, tiers, codes)
    rng = np.random.default_rng(seed + 1)
    ids = rng.permutation(n)
    for i in ids.tolist():
        one.push(i)
    early = ids[: int(before * n)]
    for i in early.tolist():
        bulk.push(i)
    bulk.load(ids)  # (the early ones included: left as they are)
    assert len(bulk) == len(one) == n and all(i in bulk for i in range(n))
    hosts = [f"h{k}" for k in range(n_slots)]
    while len(one):
        full = {h for h in hosts if rng.random() < 0.3}
        discover = bool(rng.random() < 0.3)
        room = (lambda h, full=full: h not in full) if full else None
        a, b = one.pop(room, discover), bulk.pop(room, discover)
        assert a == b  # distinct cash: the same page
        if a is None:
            assert one.pop() == bulk.pop()
    assert bulk.pop() is None and len(bulk) == 0


def test_load_with_equal_cash_pops_the_same_cash():
    """Pages of equal cash (never paid) may come out of ``load`` in another order than pushed
    one by one, never with another cash."""
    e = OpicEngine(capacity=300)
    e.add_pages(300)
    e.visit(0, list(range(1, 100)))  # a few pages richer, the rest tied
    tiers, codes = Tiers(), array("I", [0]) * 300
    for i in range(300):
        codes[i] = tiers.code(i % 3, "s")
    one, bulk = TieredSelection(e, tiers, codes), TieredSelection(e, tiers, codes)
    for i in range(1, 300):
        one.push(i)
    bulk.load(np.arange(1, 300))
    popped = []
    while len(one):
        a, b = one.pop(), bulk.pop()
        assert e.cash_of(a) == e.cash_of(b) and codes[a] == codes[b]
        popped.append(b)
    assert sorted(popped) == list(range(1, 300))


def test_tiered_selection_takes_about_8_bytes_per_page_whatever_the_tiers():
    """One int32 position per page and one int32 heap item per candidate: about 8 bytes per
    page with one tier and still so with five (the per-tier selections took 8 per tier)."""
    n = 20_000  # (each tier adds a few fixed bytes: 5 tiers are 8.3 per page here, 8.1 at 50,000)
    for n_priorities in (1, 5):
        e, tiers, codes = tiered_state(n, 7, n_priorities, 3)
        sel = TieredSelection(e, tiers, codes)
        sel.load(np.arange(n))
        assert len(sel) == n
        assert 8.0 <= sel.nbytes() / n < 8.5


def test_tiers_intern_pairs_to_dense_codes():
    tiers = Tiers()
    assert tiers.code(0, "a") == 1 and tiers.code(5, "a") == 2 and tiers.code(0, "a") == 1
    assert tiers.code(0, None) == 3 and len(tiers) == 3
    assert (tiers.priority(2), tiers.slot(2)) == (5, "a")
    again = Tiers.from_list(tiers.as_list())
    assert again.as_list() == [(0, "a"), (5, "a"), (0, None)] and again.code(5, "a") == 2
    import pytest

    for code in (0, 4):
        with pytest.raises(ValueError):
            tiers.slot(code)
    with pytest.raises(ValueError):
        Tiers.from_list([(0, "a"), (0, "a")])


def test_a_page_without_a_tier_code_is_refused():
    import pytest

    e = OpicEngine()
    e.add_pages(2)
    sel = TieredSelection(e, Tiers(), array("I", [0, 0]))
    with pytest.raises(ValueError):
        sel.push(1)
    with pytest.raises(ValueError):
        sel.load([0, 1])
    assert len(sel) == 0 and sel.pop() is None
