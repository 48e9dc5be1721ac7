"""Freshness of periodic refetches and the optimal allocation of a refetch budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_opic.opic.freshness import (
    freshness,
    marginal,
    optimal_allocation,
    proportional_allocation,
    ratio_for,
    uniform_allocation,
    weighted_freshness,
)


def site(n: int = 500, seed: int = 0, static: float = 0.3):
    rng = np.random.default_rng(seed)
    w = rng.pareto(1.2, n) + 0.01
    rate = np.exp(rng.uniform(math.log(0.1), math.log(10.0), n))
    rate[rng.random(n) < static] = 0.0
    return w, rate


def test_freshness_formula_and_limits():
    assert freshness(1.0, 1.0) == pytest.approx(1 - math.exp(-1))
    assert freshness(2.0, 1.0) == pytest.approx(2 * (1 - math.exp(-0.5)))
    np.testing.assert_array_equal(freshness([0.0, 3.0, 0.0], [0.0, 0.0, 2.0]), [1.0, 1.0, 0.0])
    assert freshness(1e6, 1.0) == pytest.approx(1.0, abs=1e-6)


def test_freshness_is_the_time_average_of_a_simulated_periodic_refetch():
    rng = np.random.default_rng(1)
    rate, f, periods = 1.7, 0.8, 20000
    first_change = rng.exponential(1 / rate, periods)  # memoryless: from each refetch
    fresh = np.minimum(first_change, 1 / f).sum() / (periods / f)
    assert fresh == pytest.approx(float(freshness(f, rate)), abs=0.01)


@pytest.mark.parametrize("rate", [0.01, 0.5, 3.0, 40.0])
@pytest.mark.parametrize("f", [0.1, 1.0, 7.0])
def test_marginal_is_the_derivative(rate, f):
    h = 1e-6 * f
    numeric = (freshness(f + h, rate) - freshness(f - h, rate)) / (2 * h)
    assert marginal(f, rate) == pytest.approx(float(numeric), rel=1e-5, abs=1e-9)
    assert marginal(0.0, rate) == pytest.approx(1 / rate)
    assert marginal(f, 0.0) == 0.0


def test_ratio_for_inverts_g():
    y = np.concatenate(
        [np.logspace(-14, -1, 40), np.linspace(0.1, 0.99, 40), 1 - np.logspace(-3, -12, 10)]
    )
    r = ratio_for(y)
    g = -np.expm1(-r) - r * np.exp(-r)
    np.testing.assert_allclose(g, y, rtol=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("floor", [0.0, 0.02])
def test_the_optimal_allocation_meets_the_kkt_conditions(seed, floor):
    w, rate = site(seed=seed)
    budget = float(w.size)
    f = optimal_allocation(w, rate, budget, floor)
    assert f.sum() == pytest.approx(budget, rel=1e-12)
    assert (f >= floor).all()
    value = w * marginal(f, rate)
    above = f > floor * (1 + 1e-9)
    mu = np.median(value[above])
    np.testing.assert_allclose(value[above], mu, rtol=1e-7)  # equal marginal value
    assert (w[~above] * marginal(floor, rate[~above]) <= mu * (1 + 1e-7)).all()  # not worth more
    assert (f[rate == 0] == floor).all()  # a page that never changes: the floor only


@pytest.mark.parametrize("seed", range(3))
def test_no_feasible_move_improves_the_optimum(seed):
    w, rate = site(200, seed)
    f = optimal_allocation(w, rate, 200.0, 0.01)
    best = weighted_freshness(f, rate, w)
    rng = np.random.default_rng(seed)
    for _ in range(200):
        i, j = rng.choice(200, 2, replace=False)
        d = rng.uniform(0, 1) * (f[j] - 0.01)  # move some of j's refetches to i
        g = f.copy()
        g[i] += d
        g[j] -= d
        assert weighted_freshness(g, rate, w) <= best + 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_the_optimum_beats_uniform_and_proportional(seed):
    w, rate = site(seed=seed)
    n, budget = w.size, float(w.size)
    best = weighted_freshness(optimal_allocation(w, rate, budget), rate, w)
    assert best > weighted_freshness(uniform_allocation(n, budget), rate, w) + 0.01
    assert best > weighted_freshness(proportional_allocation(w, budget), rate, w) + 0.01


def test_the_allocation_is_not_monotone_in_the_change_rate():
    rate = np.logspace(-2, 2, 81)  # equal importance, rates over four orders of magnitude
    f = optimal_allocation(np.ones_like(rate), rate, 20.0, floor=0.001)
    peak = int(f.argmax())
    assert 0 < peak < rate.size - 1
    assert (np.diff(f[: peak + 1]) > 0).all()  # rises with the rate...
    assert (np.diff(f[peak:]) <= 0).all()  # ...then falls
    assert f[-1] == 0.001  # too fast to follow: the floor


def test_proportional_is_optimal_when_importance_over_rate_is_constant():
    rng = np.random.default_rng(2)
    rate = rng.uniform(0.5, 5.0, 100)
    w = 3.0 * rate
    np.testing.assert_allclose(
        optimal_allocation(w, rate, 80.0), proportional_allocation(w, 80.0), rtol=1e-8
    )


def test_degenerate_budgets():
    w, rate = site(10)
    np.testing.assert_allclose(optimal_allocation(w, rate, 1.0, floor=0.5), 0.1)
    static = np.zeros(10)  # nothing changes: nothing to gain, the budget is spread by w
    f = optimal_allocation(w, static, 10.0, floor=0.1)
    assert f.sum() == pytest.approx(10.0) and (f >= 0.1).all()
    assert optimal_allocation(np.zeros(0), np.zeros(0), 1.0).size == 0
