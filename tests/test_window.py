"""Window policies against hand-computed cases (paper, section 3.3)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_opic.opic import (
    AdaptiveInterpolation,
    FixedWindow,
    ImprovedFixedWindow,
    Interpolation,
    OpicEngine,
    VariableWindow,
)
from scrapy_opic.opic.snapshot import engine_from_header, engine_header, shift_clock

ONE = np.array([0])


def engine_with(window, n=1, **kw) -> OpicEngine:
    e = OpicEngine(window=window, **kw)
    e.add_pages(n)
    return e


@pytest.mark.parametrize("scalar", [False, True])
def test_interpolation_formula_inside_the_window(scalar):
    w = Interpolation(10)
    e = engine_with(w)
    e.hist[0], e.last_g[0] = 4.0, 2.0
    if scalar:
        w.absorb_one(e.hist, 0, 1.5, 8.0, e.last_g[0])
    else:
        w.absorb(e.hist, ONE, np.array([1.5]), 8.0, e.last_g[ONE])
    # G - G[i] = 6 < T:  H * (T - 6) / T + C = 4 * 0.4 + 1.5
    assert e.hist[0] == pytest.approx(3.1)


@pytest.mark.parametrize("scalar", [False, True])
@pytest.mark.parametrize("now,expected", [(22.0, 0.75), (12.0, 1.5)])
def test_interpolation_formula_outside_the_window(scalar, now, expected):
    w = Interpolation(10)
    e = engine_with(w)
    e.hist[0], e.last_g[0] = 4.0, 2.0
    if scalar:
        w.absorb_one(e.hist, 0, 1.5, now, e.last_g[0])
    else:
        w.absorb(e.hist, ONE, np.array([1.5]), now, e.last_g[ONE])
    # G - G[i] >= T:  C * T / (G - G[i])   (at exactly T this is C: both cases meet)
    assert e.hist[0] == pytest.approx(expected)


def test_interpolation_estimate_is_the_rate_over_the_last_T():
    w = Interpolation(10)
    e = engine_with(w)
    e.hist[0], e.last_g[0] = 5.0, 0.0
    # now = 4: 5 * 6/10 + 2 = 5 over a window of 10 -> 0.5
    assert w.estimate(ONE, np.array([2.0]), 4.0)[0] == pytest.approx(0.5)
    assert w.estimate_one(0, 2.0, 4.0) == pytest.approx(0.5)


def test_interpolation_visits_through_the_engine_use_the_g_clock():
    # The window measures the link credit a page received; the clock is G (cash).
    e = OpicEngine(window="interpolation:4", epsilon=0.5)
    e.add_pages(2)
    e.payout()  # the virtual page pays 0.5 to each page: G = 1; teleport credit 1 each
    e.visit(1, [0])  # page 1 passes (1 - eps) of its credit 1 to page 0: 0.5
    assert e.held_credit[0] == pytest.approx(0.5)
    e.visit(0, [1])  # at G = 1.5 (page 1 took 0.5), G - G[0] = 1.5 < 4:  0 * 2.5/4 + 0.5
    assert e.hist[0] == pytest.approx(0.5)
    assert e.last_g[0] == pytest.approx(1.5)
    # Page 0 passed its teleport credit 1 and link credit 0.5: 0.75 to page 1, which passes
    # (teleport 0 since its visit) 0.375 back.
    e.visit(1, [0])
    dt = e.G - 1.5  # (the cash page 0 took, 0.75, then page 1's 0.375)
    assert dt == pytest.approx(1.125)
    e.visit(0, [1])  # dt < 4:  0.5 * (4 - dt)/4 + 0.375
    assert e.hist[0] == pytest.approx(0.5 * (4 - dt) / 4 + 0.375)


def test_windows_count_received_credit_not_the_initial_cash():
    e = OpicEngine(window="interpolation:100", epsilon=0.5)
    e.add_pages(2)
    e.init_uniform()  # C0 = 0.5 each; the endowment is every page's prior credit 1
    e.visit(1, [0])  # page 0 receives credit 0.5 (and cash 0.25)
    e.visit(0, [1])  # absorbs cash 0.75; its window gets the link credit 0.5 only
    assert e.hist[0] == pytest.approx(0.5)
    assert e.G == pytest.approx(0.5 + 0.75)  # the clock counts all absorbed cash


def test_wall_clock_interpolation():
    now = [1000.0]
    e = OpicEngine(window="interpolation:100:wall", epsilon=0.5, time_fn=lambda: now[0])
    e.add_pages(2)
    e.payout()  # teleport credit 1 each
    e.visit(1, [0])  # page 0 receives link credit 0.5
    now[0] = 1050.0
    e.visit(0, [1])  # 50 s after arrival, prior history 0
    assert e.hist[0] == pytest.approx(0.5)
    assert e.last_t[0] == 1050.0
    e.visit(1, [0])
    k = e.held_credit[0]
    assert k > 0
    now[0] = 1250.0
    e.visit(0, [1])  # 200 s >= T: credit * 100 / 200
    assert e.hist[0] == pytest.approx(k / 2)


def feed(w, e, measures):
    for cash, t in measures:
        w.absorb(e.hist, ONE, np.array([cash]), t, e.last_g[ONE])
        e.last_g[0] = t


def test_variable_window_keeps_the_last_k_measures():
    w = VariableWindow(2)
    e = engine_with(w)
    feed(w, e, [(1.0, 1.0), (2.0, 3.0), (4.0, 6.0)])
    assert e.hist[0] == pytest.approx(6.0)  # 2 + 4: the first measure left the window
    # Rate: (measures + current cash) over the time since the visit before the oldest kept.
    assert w.estimate(ONE, np.array([0.5]), 8.0)[0] == pytest.approx(6.5 / 7.0)
    assert w.measures_per_page(8.0) == 2.0


def test_fixed_window_uses_measures_since_now_minus_T():
    w = FixedWindow(4)
    e = engine_with(w)
    feed(w, e, [(1.0, 1.0), (2.0, 3.0), (4.0, 6.0)])
    # At now = 8 the window is [4, 8]: only the measure at 6 is in; its cash accrued since 3.
    assert w.estimate(ONE, np.array([0.5]), 8.0)[0] == pytest.approx(4.5 / 5.0)
    assert w.measures_per_page(8.0) == 1.0
    # Later, nothing is in the window: the rate is the current cash since the last visit.
    assert w.estimate(ONE, np.array([0.5]), 16.0)[0] == pytest.approx(0.5 / 10.0)


def test_improved_fixed_window_keeps_a_minimum_of_measures():
    w = ImprovedFixedWindow(4, m=2)
    e = engine_with(w)
    feed(w, e, [(1.0, 1.0), (2.0, 3.0), (4.0, 6.0)])
    assert w.estimate(ONE, np.array([0.5]), 8.0)[0] == pytest.approx(6.5 / 7.0)
    assert w.measures_per_page(100.0) == 2.0


def test_fixed_window_merges_measures_when_its_slots_are_full():
    w = FixedWindow(100, slots=2)
    e = engine_with(w)
    feed(w, e, [(1.0, 1.0), (2.0, 3.0), (4.0, 6.0)])
    assert w.count[0] == 2
    assert e.hist[0] == pytest.approx(7.0)  # nothing lost: 1 + 2 merged, then 4
    assert w.estimate(ONE, np.array([0.0]), 7.0)[0] == pytest.approx(7.0 / 7.0)


def test_new_pages_get_the_learned_default_history():
    e = OpicEngine(window="interpolation:2", epsilon=0.5)
    e.add_pages(3)
    e.init_uniform()
    for i in range(3):
        e.visit(i, [(i + 1) % 3])
    assert e.default_rate > 0
    j = e.add_page()
    assert e.hist[j] == pytest.approx(e.default_rate * 2)
    assert e.importance()[j] > 0  # never fetched, no cash, yet an estimate
    f = OpicEngine(window="variable:4", epsilon=0.5)
    f.add_pages(3)
    f.init_uniform()
    for t in range(9):
        f.payout()
        f.visit(t % 3, [(t + 1) % 3])
    k = f.add_page()
    assert f.importance()[k] > 0


def test_fixed_default_history_is_used_as_given():
    e = OpicEngine(window="interpolation:10", default_history=0.25)
    j = e.add_page()
    assert e.hist[j] == pytest.approx(2.5)


def changed(w: AdaptiveInterpolation, share: float, now: float, visits: int) -> None:
    for _ in range(visits):
        w.observe_change(share, now)


def test_the_adaptive_window_is_interpolation_until_the_links_change():
    a, b = engine_with("adaptive:10", n=3), engine_with("interpolation:10", n=3)
    for e in (a, b):
        e.init_uniform()
        for i in (0, 1, 2, 0, 2, 1, 0):
            e.visit(i, [(i + 1) % 3, (i + 2) % 3])
            e.links_changed(0.0)  # (revisits whose links are the same: no change)
    np.testing.assert_array_equal(a.hist[:3], b.hist[:3])
    np.testing.assert_array_equal(a.importance(), b.importance())
    assert a.window.window(a.G) == 10 and a.window.spec() == "adaptive:10"


def test_the_adaptive_window_shrinks_at_a_change_and_grows_back_with_the_time_since():
    w = AdaptiveInterpolation(30)
    assert w.T_min == 5 and w.window(100.0) == 30
    changed(w, 1.0, 10.0, 3)  # one page that moved all its links: noise, not a change
    assert w.changed_at is None
    changed(w, 0.3, 12.0, 20)  # a third of the links of page after page: a change
    assert w.changed_at == 12.0 and w.changing
    assert w.window(12.0) == 5 and w.window(20.0) == 8 and w.window(50.0) == 30
    changed(w, 0.3, 14.0, 200)  # the change goes on: it started at 12
    assert w.changed_at == 12.0 and w.window(22.0) == 10
    changed(w, 0.0, 16.0, 400)  # quiet, then a new change starts
    assert not w.changing
    changed(w, 0.5, 40.0, 20)
    assert w.changed_at == 40.0 and w.window(41.0) == 5


def test_a_site_whose_links_churn_steadily_gets_its_long_window_back():
    w = AdaptiveInterpolation(30, 3)
    for k in range(5000):  # a tenth of every page's links rotate, visit after visit
        w.observe_change(0.1, k / 100)
    assert w.changed_at is not None and w.changed_at < 1 and w.window(50.0) == 30


@pytest.mark.parametrize("scalar", [False, True])
def test_the_adaptive_formula_reads_the_history_over_the_window_of_the_moment(scalar):
    w = AdaptiveInterpolation(10, 2)
    e = engine_with(w)
    changed(w, 1.0, 5.0, 10)  # window(8) = 3
    e.hist[0], e.last_g[0] = 4.0, 6.0
    # The history stands for a rate of 4 / 10. Over the window of 3: 1.2, of which the
    # paper's update keeps (3 - 2) / 3 and adds the cash: 0.4 + 1.5 = 1.9, a rate of 1.9 / 3,
    # stored as that rate times T.
    assert w.estimate_one(0, 1.5, 8.0) == pytest.approx(1.9 / 3)
    if scalar:
        w.absorb_one(e.hist, 0, 1.5, 8.0, e.last_g[0])
    else:
        w.absorb(e.hist, ONE, np.array([1.5]), 8.0, e.last_g[ONE])
    assert e.hist[0] == pytest.approx(1.9 / 3 * 10)
    e.hist[0] = 4.0  # outside the window of 3 (dt = 4): C * T / dt
    if scalar:
        w.absorb_one(e.hist, 0, 1.5, 8.0, 4.0)
    else:
        w.absorb(e.hist, ONE, np.array([1.5]), 8.0, np.array([4.0]))
    assert e.hist[0] == pytest.approx(1.5 * 10 / 4)


def test_the_adaptive_window_keeps_its_watch_through_a_saved_state_and_a_clock_shift():
    e = engine_with("adaptive:20:4:wall", time_fn=lambda: 100.0)
    changed(e.window, 0.4, 90.0, 30)
    again = engine_from_header(engine_header(e))
    assert again.window.spec() == "adaptive:20:4:wall"
    assert again.window.scalars() == e.window.scalars() and again.window.window(96.0) == 6
    g = engine_with("adaptive:20")
    changed(g.window, 1.0, 3.0, 10)
    shift_clock(g, 2.0)
    assert g.window.changed_at == 5.0
    parts = [{"changed_at": None}, {"changed_at": 7.0, "level": 0.2}, {"changed_at": 5.0}]
    assert AdaptiveInterpolation.merge_scalars(parts)["changed_at"] == 7.0
