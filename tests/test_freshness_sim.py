"""A small, deterministic run of the freshness simulation (``benchmarks.freshness``)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # (the benchmark's simulation, small)


@pytest.fixture(scope="module")
def fb():
    from benchmarks import freshness

    return freshness


@pytest.fixture(scope="module")
def runs(fb):
    out = {}
    for case in fb.CASES:
        site = fb.make_site(300, case, seed=1)
        pols = ("optimal", "learned", "uniform", "proportional")
        out[case] = site, {p: fb.simulate(site, p) for p in pols}
    return out


def test_the_site_has_its_share_of_static_pages_and_its_rates(fb):
    site = fb.make_site(1000, "independent", seed=3)
    assert (site.rates == 0).mean() == pytest.approx(0.3)
    moving = site.rates[site.rates > 0]
    assert 0.1 <= moving.min() and moving.max() <= 10.0 and moving.max() / moving.min() > 50
    changes = sum(len(site.change_times(i, 0.0, 10.0)) for i in range(site.n))  # in 10 passes
    assert changes == pytest.approx((site.rates * 10.0).sum(), rel=0.05)
    linked = fb.make_site(1000, "linked", seed=3)
    pr = linked.pagerank_before()
    top = np.argsort(-pr)[:50]
    assert linked.rates[top].min() >= np.quantile(moving, 0.9)  # the highest PageRank fastest
    assert pr[linked.rates == 0].max() <= pr[linked.rates > 0].min()  # the lowest: static


def test_the_measured_freshness_of_the_optimum_is_its_expectation(runs):
    from scrapy_opic.opic.freshness import optimal_allocation, weighted_freshness

    for site, res in runs.values():
        w = site.pagerank_before()
        f = optimal_allocation(w, site.rates, site.n)  # periodic refetches
        expected = weighted_freshness(f, site.rates, w)
        assert res["optimal"]["freshness"] == pytest.approx(expected, abs=0.03)
        assert res["optimal"]["static"] == 0.0


def test_a_site_that_never_changes_is_always_fresh_after_discovery(fb):
    site = fb.make_site(100, static=1.0, seed=2)
    r = fb.simulate(site, "learned")
    assert r["freshness"] == pytest.approx(1.0)
    assert r["static"] == 1.0


def test_learning_comes_close_to_the_optimum_and_beats_the_simple_allocations(runs):
    for case, (_, res) in runs.items():
        learned = res["learned"]
        best = res["optimal"]["freshness"]
        assert learned["freshness"] >= 0.93 * best
        assert learned["freshness"] > res["uniform"]["freshness"]
        assert learned["static"] <= 0.10 < res["uniform"]["static"]
        assert learned["static"] < res["proportional"]["static"]
        if case == "independent":  # (in case 2 importance follows the rate: close to optimal)
            assert learned["freshness"] > res["proportional"]["freshness"]


def test_on_a_site_where_two_pages_in_five_never_change_they_take_under_a_tenth_of_fetches(fb):
    # (The change prior decides how soon a page never seen changing is left to the floor: a
    # changed weight of 0.1 gave these sites 12.1% and 7.7%.)
    for case in fb.CASES:
        for seed in (1, 2):
            site = fb.make_site(1000, case, static=0.4, seed=seed)
            learned = fb.simulate(site, "learned")
            assert learned["static"] <= 0.10
            assert learned["freshness"] >= 0.95 * fb.simulate(site, "optimal")["freshness"]


def test_the_run_is_deterministic(fb, runs):
    site, res = runs["linked"]
    assert fb.simulate(site, "learned") == res["learned"]
