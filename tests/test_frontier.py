"""The frontier's page life cycle and the money on every exit path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_opic.opic import OpicEngine
from scrapy_opic.opic.frontier import DISCOVERED, IN_FLIGHT, PENDING, VISITED, Frontier

TOL = 1e-9


def make(continuous=False, strategy="greedy", refresh=0.0) -> Frontier:
    return Frontier(OpicEngine(epsilon=0.2, refresh=refresh), strategy, continuous, seed=0)


@settings(max_examples=120, deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 10**6)), max_size=80),
    continuous=st.booleans(),
    strategy=st.sampled_from(["greedy", "random", "cycle"]),
    refresh=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_every_path_conserves_cash_and_the_life_cycle_holds(ops, continuous, strategy, refresh):
    f = make(continuous, strategy, refresh)
    rng = np.random.default_rng(len(ops))
    in_flight: set[int] = set()
    visited_once: set[int] = set()
    for kind, r in ops:
        key = f"p{r % 25}"
        slot = f"h{r % 3}"
        if kind <= 1:
            before = f.status_of(key)
            ok = f.schedule(key, {"url": key}, slot)
            i = f.engine.id_of(key)
            if before in ("pending", "in flight") or (before == "visited" and not continuous):
                assert not ok
            else:
                assert ok and f.status[i] == PENDING
        elif kind == 2:
            full = {f"h{k}" for k in range(3) if rng.random() < 0.3}
            got = f.pop(lambda s, full=full: s not in full)
            if got is not None:
                i, payload = got
                assert i not in in_flight and payload == {"url": f.engine.key_of(i)}
                assert f.status[i] == IN_FLIGHT
                in_flight.add(i)
        elif in_flight:
            i = sorted(in_flight)[r % len(in_flight)]
            in_flight.discard(i)
            if kind == 3:
                kids = [f.discover(f"p{(r >> k) % 25}") for k in range(r % 4)]
                f.complete(i, kids)
                visited_once.add(i)
            elif kind == 4:
                f.fail(i)
                visited_once.add(i)
            elif kind == 5:
                target = f"p{(r >> 3) % 25}"
                f.redirect(i, target, {"url": target}, slot)
                if f.engine.id_of(target) == i:
                    assert f.status[i] == PENDING
            elif kind == 6:
                f.retry(i)
                assert f.status[i] == PENDING
            else:
                f.forfeit(i)
        assert abs(f.total_cash() - 1.0) < TOL
        n = f.engine.n
        assert f.counts == [sum(1 for k in range(n) if f.status[k] == s) for s in range(4)]
        assert len(f.selection) == f.counts[PENDING]
        assert all(k in f.payloads for k in range(n) if f.status[k] in (PENDING, IN_FLIGHT))
        assert all(f.status[k] == IN_FLIGHT for k in in_flight)
        # The per-slot in-flight counts (politeness) follow every transition.
        for h in ("h0", "h1", "h2", None):
            expected = sum(1 for k in in_flight if f._slots.get(k, (0, None))[1] == h)
            assert f.in_flight(h) == expected, h


def test_a_link_to_a_known_page_pays_it_even_when_the_fetch_is_a_duplicate():
    f = make()
    assert f.schedule("home", "req-home")
    i, _ = f.pop()
    about = f.discover("about")
    f.complete(i, [about])
    assert f.schedule("about", "req-about")
    j, _ = f.pop()
    f.complete(j, [i])  # about links back home: home is visited, so no new fetch...
    assert not f.schedule("home", "req-home-again")
    f.engine.payout()
    assert f.engine.cash_of(i) > 0  # ...but the link's money stays with home
    assert f.status_of("home") == "visited"
    assert abs(f.total_cash() - 1.0) < TOL


def test_continuous_crawl_puts_visited_pages_back_in_line():
    f = make(continuous=True, refresh=1.0)
    f.schedule("a", "A")
    f.schedule("b", "B")
    i, payload = f.pop()
    f.complete(i, [f.discover("b")])
    assert f.status[i] == PENDING and f.payloads[i] == payload
    assert len(f) == 2
    popped = [f.pop()[0] for _ in range(2)]
    assert sorted(popped) == sorted([i, f.engine.id_of("b")])


def test_redirect_moves_the_cash_to_the_target():
    f = make()
    f.schedule("old", "req-old")
    i, _ = f.pop()  # the first pop pays the virtual page's cash out: "old" holds it all
    cash = f.engine.cash_of(i)
    j, scheduled = f.redirect(i, "new", "req-new")
    assert scheduled
    assert f.engine.cash_of(j) == pytest.approx(cash)
    assert f.engine.cash_of(i) == 0.0
    assert f.status_of("old") == "visited" and f.status_of("new") == "pending"
    assert f.pop() == (j, "req-new")


def test_fail_and_forfeit_send_the_cash_to_the_virtual_page():
    f = make()
    f.schedule("a", "A")
    f.schedule("b", "B")
    i, _ = f.pop()
    f.fail(i)
    assert f.engine.cash_of(i) == 0.0 and f.engine.hist[i] > 0  # visited: history kept
    b = f.engine.id_of("b")
    f.forfeit(b)
    assert f.status[b] == VISITED and f.engine.hist[b] == 0.0 and len(f) == 0
    assert f.engine.virtual_cash == pytest.approx(1.0)


def test_released_in_flight_pages_are_fetched_again_with_their_cash():
    f = make()
    for k in "abc":
        f.schedule(k, k.upper())
    f.pop()
    f.pop()
    assert f.release_in_flight() == 2
    assert f.counts[IN_FLIGHT] == 0 and len(f) == 3
    assert {f.pop()[0] for _ in range(3)} == {f.engine.id_of(k) for k in "abc"}
    assert f.counts[DISCOVERED] == 0


def test_greedy_frontier_honours_slot_limits():
    f = make(refresh=1.0)
    f.schedule("big1", 1, "big")
    f.schedule("big2", 2, "big")
    f.schedule("small1", 3, "small")
    i, _ = f.pop(lambda slot: slot != "big")
    assert f.engine.key_of(i) == "small1"
    assert f.pop(lambda slot: slot != "big") is None
    assert f.pop() is not None


def test_in_flight_counts_survive_a_restore():
    f = make()
    for k in range(6):
        f.schedule(f"p{k}", {"url": k}, f"h{k % 2}")
    popped = [f.pop()[0] for _ in range(3)]
    slots = {i: f._slots[i] for i in range(f.engine.n) if i in f.payloads}
    g = Frontier.restore(f.engine, bytes(f.status[: f.engine.n]), dict(f.payloads), slots)
    assert all(g.status[i] == PENDING for i in popped)
    assert g.in_flight("h0") == g.in_flight("h1") == 0
    i, _ = g.pop()
    assert g.in_flight(g._slots[i][1]) == 1
