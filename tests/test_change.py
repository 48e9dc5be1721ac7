"""Change rates from observations at irregular intervals; validators checked against content."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import brentq

from scrapy_opic.opic.change import (
    PRIOR_WEIGHTS,
    ChangeRates,
    Snapshot,
    ValidatorAudit,
    solve_rates,
    static_share,
    unseen_change_freshness,
)

LN2 = math.log(2.0)


def observe_page(cr: ChangeRates, i: int, rate: float, intervals, rng) -> tuple[list, list]:
    """Observe page ``i`` (Poisson changes at ``rate``) after each interval; returns the changed
    and unchanged intervals."""
    changed, unchanged = [], []
    t = 0.0
    cr.observe(i, t, None)
    for dt in intervals:
        t += dt
        hit = rng.random() < -math.expm1(-rate * dt)
        cr.observe(i, t, bool(hit))
        (changed if hit else unchanged).append(dt)
    return changed, unchanged


def exact_mle(changed, unchanged, tau=LN2, weights=PRIOR_WEIGHTS) -> float:
    """The smoothed MLE from every interval (no quadrature), by Brent's method."""

    def score(lam: float) -> float:
        h = sum(t / math.expm1(min(lam * t, 700)) for t in changed)
        h += weights[0] * tau / math.expm1(min(lam * tau, 700))
        return h - sum(unchanged) - weights[1] * tau

    return brentq(score, 1e-9, 1e9, xtol=1e-15, rtol=1e-13)


@pytest.mark.parametrize("rate", [0.05, 0.5, 2.0, 8.0])
@pytest.mark.parametrize("spread", [0.0, 0.7])
def test_the_estimate_converges_to_the_true_rate(rate, spread):
    rng = np.random.default_rng(int(rate * 100) + int(spread * 10))
    cr = ChangeRates()
    intervals = np.exp(rng.normal(0.0, spread, 4000)) * 0.5  # l t from 0.01 to about 10
    observe_page(cr, 0, rate, intervals, rng)
    est, se = cr.rates()[0], cr.log_se()[0]
    assert abs(math.log(est / rate)) < 3 * se  # within its own confidence...
    assert se < 0.15  # ...which is narrow after 4,000 looks


def test_changes_over_time_is_biased_low_and_the_mle_is_not():
    rng = np.random.default_rng(3)
    cr = ChangeRates()
    rate, dt = 3.0, 1.0  # several changes fall between two fetches
    changed, unchanged = observe_page(cr, 0, rate, [dt] * 3000, rng)
    naive = len(changed) / (3000 * dt)
    assert naive < 0.4 * rate
    assert cr.rates()[0] == pytest.approx(rate, rel=0.08)


@pytest.mark.parametrize("values", [(1.0,), (0.2, 5.0), (0.01, 3.0)])
def test_the_quadrature_is_exact_for_at_most_two_interval_lengths(values):
    rng = np.random.default_rng(len(values))
    cr = ChangeRates()
    intervals = rng.choice(values, 60)
    changed, unchanged = observe_page(cr, 0, 1.3, intervals, rng)
    assert changed and unchanged
    assert cr.rates()[0] == pytest.approx(exact_mle(changed, unchanged), rel=1e-8)


@pytest.mark.parametrize("seed", range(5))
def test_the_quadrature_stays_close_for_log_spread_intervals(seed):
    rng = np.random.default_rng(seed)
    cr = ChangeRates()
    intervals = np.exp(rng.normal(0.0, 1.0, 80))  # a factor e either way, one sd
    changed, unchanged = observe_page(cr, 0, 1.0, intervals, rng)
    assert cr.rates()[0] == pytest.approx(exact_mle(changed, unchanged), rel=0.05)


def test_smoothing_no_observation_gives_the_prior_and_one_never_gives_zero_or_infinity():
    cr = ChangeRates(prior_rate=2.0, prior_weights=(1.0, 1.0))
    cr.grow(3)
    assert cr.rates()[0] == pytest.approx(2.0, rel=1e-8)  # the pseudo-observations alone
    cr.observe(1, 0.0, None)
    cr.observe(1, 1.0, False)
    cr.observe(2, 0.0, None)
    cr.observe(2, 1.0, True)
    r = cr.rates()
    assert 0 < r[1] < 2.0 < r[2] < 1e3
    # The default, a weak changed pseudo-observation: a page never seen changing falls toward
    # static faster, and still has a positive rate after many looks.
    weak = ChangeRates(prior_rate=2.0)
    for k in range(50):
        weak.observe(0, float(k), None if k == 0 else False)
    assert 0 < weak.rates()[0] < 0.1 / 49


def test_rates_are_clipped_to_the_bounds():
    cr = ChangeRates(bounds=(1e-3, 1e2))
    for k in range(200):
        cr.observe(0, k * 1e-3, None if k == 0 else True)  # changed at every quick look
        cr.observe(1, k * 1e6, None if k == 0 else False)  # never in a very long time
    r = cr.rates()
    assert r[0] == pytest.approx(1e2, rel=1e-6)
    assert r[1] == pytest.approx(1e-3, rel=1e-6)
    assert r.min() >= 1e-3 * (1 - 1e-9) and r.max() <= 1e2 * (1 + 1e-9)


def test_a_page_seen_changed_at_every_look_rises_with_the_evidence():
    cr = ChangeRates(prior_weights=(1.0, 1.0))
    seen = []
    for k in range(1, 40):
        cr.observe(0, k * 1.0, None if k == 1 else True)
        seen.append(cr.rates()[0])
    assert all(b > a for a, b in zip(seen, seen[1:]))
    assert seen[-1] < 10.0  # bounded by the unchanged pseudo-observation: ~ln(1 + k / tau)


def test_solving_many_pages_at_once_equals_solving_each():
    rng = np.random.default_rng(9)
    cr = ChangeRates(capacity=50)
    for i in range(50):
        observe_page(cr, i, rng.uniform(0.1, 5), rng.exponential(1.0, rng.integers(0, 20)), rng)
    together = cr.rates()
    alone = [cr.rates([i])[0] for i in range(50)]
    np.testing.assert_allclose(together, alone, rtol=0, atol=0)
    a = cr.a
    direct = solve_rates(a["n_c"][:50], a["s1"][:50], a["s2"][:50], a["s3"][:50], a["u"][:50],
                         1.0, PRIOR_WEIGHTS)  # fmt: skip
    np.testing.assert_allclose(together, direct, rtol=1e-12)


def test_confidence_grows_with_evidence_and_the_pooled_rate_of_alike_pages_is_theirs():
    rng = np.random.default_rng(4)
    cr = ChangeRates(capacity=3)
    for i, count in enumerate((5, 50, 500)):
        observe_page(cr, i, 1.0, [0.7] * count, rng)
    se = cr.log_se()
    assert se[0] > se[1] > se[2]
    assert se[2] == pytest.approx(1 / math.sqrt(500 * 0.55), rel=0.3)  # the Fisher information
    alike = ChangeRates(capacity=20)
    for i in range(20):
        observe_page(alike, i, 1.0, rng.exponential(0.7, 100), rng)
    assert alike.pooled_rate() == pytest.approx(1.0, rel=0.15)


def test_the_pooled_rate_weighs_each_page_once_however_long_it_was_watched():
    """Pages that never change, watched for a day, do not drag the prior of the others to
    none: the prior is about the mean of the pages' own rates."""
    rng = np.random.default_rng(8)
    cr = ChangeRates(capacity=10)
    for i in range(10):
        if i < 3:  # (never changing: one look a day ago, one now)
            cr.observe(i, 0.0, None)
            cr.observe(i, 86_400.0, False)
        else:
            observe_page(cr, i, 1.0, rng.exponential(0.5, 60), rng)
    assert cr.pooled_rate() == pytest.approx(0.7 * 1.0, rel=0.2)
    # (All the observations together: a rate near none, as the prior before.)
    tot = {f: np.array([v]) for f, v in cr.sums().items()}
    together = solve_rates(tot["n_c"], tot["s1"], tot["s2"], tot["s3"], tot["u"], exact=tot["n_e"])
    assert together[0] < 0.01


def test_an_unknown_rate_has_a_wide_confidence():
    cr = ChangeRates()
    for k in range(20):
        cr.observe(0, float(k), None if k == 0 else False)
    assert cr.log_se()[0] > 1.0  # only bounded above: no change ever seen


def test_last_changed_lies_in_the_interval_that_saw_it_or_is_the_trusted_time():
    cr = ChangeRates(capacity=3)
    cr.observe(0, 10.0, None)
    cr.observe(0, 14.0, True)
    cr.observe(0, 15.0, False)  # (an unchanged look does not move it)
    cr.observe(1, 10.0, None)
    cr.observe(1, 14.0, True, at=11.5)  # a trusted Last-Modified
    cr.observe(2, 10.0, None)
    t = cr.last_changed()
    assert 10.0 < t[0] < 14.0 and t[0] >= 12.0  # at most half the interval back
    assert t[1] == 11.5
    assert np.isnan(t[2])
    fast = cr.last_changed([0], rates=np.array([100.0]))[0]
    assert fast == pytest.approx(14.0 - 0.01, rel=1e-6)  # a fast page changed just before


def test_a_first_look_or_a_zero_interval_is_no_observation():
    cr = ChangeRates()
    cr.observe(0, 5.0, True)  # nothing to compare with yet: only the reference time
    cr.observe(0, 5.0, True)  # same instant
    assert cr.observations()[0] == 0
    cr.observe(0, 6.0, False)
    assert cr.observations()[0] == 1 and cr.a["u"][0] == 1.0


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        ChangeRates(prior_rate=0)
    with pytest.raises(ValueError):
        ChangeRates(prior_weights=(0.0, 1.0))
    with pytest.raises(ValueError):
        ChangeRates(bounds=(1.0, 0.5))


# -- validators --------------------------------------------------------------------------------


def replay(audit: ValidatorAudit, key: str, snapshots: list[Snapshot]) -> None:
    for before, after in zip(snapshots, snapshots[1:]):
        audit.observe(key, before, after)


def test_honest_validators_stay_trusted():
    audit = ValidatorAudit()
    snaps = [Snapshot(f'"v{k // 2}"', f"day {k // 2}", k // 2) for k in range(40)]
    replay(audit, "honest", snaps)
    assert audit.trusted("honest", "etag") and audit.trusted("honest", "last_modified")
    assert audit.counts[("honest", "etag")] == [39, 0, 0]


def test_a_new_etag_on_every_response_for_the_same_content_is_noticed():
    audit = ValidatorAudit()
    replay(audit, "h", [Snapshot(f'W/"{k}"', None, 7) for k in range(3)])
    assert not audit.trusted("h", "etag")
    assert audit.counts[("h", "etag")] == [0, 2, 0]
    assert audit.trusted("h", "last_modified")  # never seen: nothing against it


def test_a_constant_last_modified_while_the_content_changes_is_noticed():
    audit = ValidatorAudit()
    replay(audit, "h", [Snapshot(None, "Mon, 01 Jan 2024", k) for k in range(3)])
    assert not audit.trusted("h", "last_modified")
    assert audit.counts[("h", "last_modified")] == [0, 0, 2]


def test_last_modified_always_now_is_noticed_and_hosts_are_judged_apart():
    audit = ValidatorAudit()
    replay(audit, "a", [Snapshot(None, f"now {k}", 1) for k in range(4)])
    replay(audit, "b", [Snapshot(None, f"day {k}", k) for k in range(4)])
    assert not audit.trusted("a", "last_modified")
    assert audit.trusted("b", "last_modified")


def test_a_rare_disagreement_among_many_agreements_is_tolerated():
    audit = ValidatorAudit(min_evidence=2, max_share=0.1)
    snaps = [Snapshot(f'"{k}"', None, k) for k in range(50)]
    snaps[20] = Snapshot('"19"', None, 20)  # one stale ETag, then one noisy (back to "20"...)
    replay(audit, "h", snaps)
    assert audit.counts[("h", "etag")][1:] != [0, 0]
    assert audit.trusted("h", "etag")


def test_conditional_requests_leave_distrusted_validators_off_and_audit_now_and_then():
    audit = ValidatorAudit(audit_every=4)
    asked = [audit.conditional("h") for _ in range(8)]
    assert asked == [(True, True)] * 3 + [(False, False)] + [(True, True)] * 3 + [(False, False)]
    replay(audit, "h", [Snapshot(None, "same", k) for k in range(3)])
    assert audit.conditional("h") == (True, False)


def test_304s_that_hide_changes_are_found_out_and_honest_304s_are_not():
    """A server that answers 304 to every conditional request (its full responses honest):
    the audits' unconditional refetches find changes its conditional ones never do, and its
    validators stop within a few audits. Honest servers, whose conditional and unconditional
    refetches find changes at one rate, keep theirs (two hundred of them, at rates from rare
    to most refetches)."""
    rng = np.random.default_rng(5)
    liar = ValidatorAudit(audit_every=16)
    found_at = None
    for n in range(1, 400):
        conditional = liar.conditional("liar") != (False, False)
        changed = bool(rng.random() < 0.5) and not conditional  # (a 304 hides the change)
        if liar.refetched("liar", conditional, changed):
            found_at = n
            break
    assert found_at is not None and found_at <= 16 * 8, found_at
    assert not liar.trusted("liar", "etag") and liar.conditional("liar") == (False, False)
    false_alarms = 0
    for h in range(200):
        honest = ValidatorAudit(audit_every=16)
        rate = rng.uniform(0.02, 0.9)
        for _ in range(600):
            conditional = honest.conditional(h) != (False, False)
            false_alarms += honest.refetched(h, conditional, bool(rng.random() < rate))
    assert false_alarms <= 1


def test_a_host_found_to_lie_is_dated_once_and_one_that_never_sends_a_304_is_not():
    audit = ValidatorAudit()
    replay(audit, "noisy", [Snapshot(f'"{k}"', None, 0) for k in range(4)])  # new tag, same page
    replay(audit, "stale", [Snapshot('"same"', None, k) for k in range(4)])  # same tag, new page
    audit.false_304.add("liar")
    for key in ("noisy", "stale", "liar", "honest"):
        audit.judge(key, 100.0)
    audit.judge("stale", 200.0)  # (already dated)
    assert audit.distrusted("noisy") == (True, False)  # (never a 304: its rates told no lie)
    assert [audit.lie_found(k) for k in ("noisy", "stale", "liar", "honest")] == [
        None,
        100.0,
        100.0,
        None,
    ]


def test_a_host_that_only_lies_in_its_304s_keeps_its_dates_and_one_that_lies_in_them_does_not():
    """A server whose 304s hide changes is sent no validator, but its ``Last-Modified`` still
    agrees with its content on full responses: its dates stay evidence. A constant one does
    not agree, whatever its 304s."""
    audit = ValidatorAudit()
    replay(audit, "liar", [Snapshot(None, f"day {k}", k) for k in range(4)])
    audit.false_304.add("liar")
    replay(audit, "stale", [Snapshot(None, "same", k) for k in range(4)])
    assert not audit.trusted("liar", "last_modified") and audit.agrees("liar", "last_modified")
    assert not audit.trusted("stale", "last_modified")
    assert not audit.agrees("stale", "last_modified")


def test_a_verdict_is_taken_back_when_it_distrusts_what_is_trusted_and_anything_else_refused():
    audit = ValidatorAudit()
    replay(audit, "stale", [Snapshot(None, "same", k) for k in range(3)])
    audit.false_304.add("liar")
    audit.refetched("liar", True, False)
    audit.judge("liar", 12.5)
    back = ValidatorAudit()
    for host in ("stale", "liar", "honest"):
        taken = back.merge(host, json.loads(json.dumps(audit.verdict(host))))
        assert taken == (host != "honest")
    assert back.distrusted("stale") == (False, True) and back.distrusted("liar") == (True, True)
    assert back.distrusted("honest") == (False, False)
    assert back.lied == audit.lied and back.refetches["liar"] == [1, 0, 0, 0]
    # (What this process distrusts already, it keeps: its own counts are not replaced.)
    assert not back.merge("stale", ValidatorAudit().verdict("stale"))
    assert back.distrusted("stale") == (False, True)
    verdict = audit.verdict("liar")
    for bad in (
        {},
        {**verdict, "counts": {"etag": [1]}},
        {**verdict, "counts": {"colour": [1, 2, 3]}},
        {**verdict, "refetches": [1, 2]},
        {**verdict, "lied": "soon"},
        {**verdict, "counts": 3},
    ):
        with pytest.raises(ValueError, match="not a verdict on validators"):
            ValidatorAudit().merge("h", bad)


def watched_population(rng, n: int, static: float, mean_rate: float):
    """``n`` pages, a share ``static`` never changing, the others at rates drawn from an
    exponential law of mean ``mean_rate``, each watched for a time of its own: the rates, the
    times watched, and which pages were seen to change."""
    rate = np.where(rng.random(n) < static, 0.0, rng.exponential(mean_rate, n))
    watched = rng.uniform(0.0, 20.0 / mean_rate, n)
    seen = rng.random(n) < -np.expm1(-rate * watched)
    return rate, watched, seen


@pytest.mark.parametrize("static", [0.1, 0.4, 0.7])
def test_the_static_share_is_recovered_from_pages_watched_for_unequal_times(static):
    rng = np.random.default_rng(int(static * 10))
    rate, watched, seen = watched_population(rng, 20_000, static, 0.05)
    got = static_share(watched[~seen], int(seen.sum()), 0.05)
    assert got == pytest.approx(static, abs=0.02)
    # Counting the pages never seen to change as static would overstate the share.
    assert (~seen).mean() > static + 0.04


def test_the_freshness_of_pages_never_seen_to_change_is_calibrated():
    """Of the pages never seen to change, the share whose copy is still current ``age``
    later (static, or no change within it) is the mean of what the mixture expects; their
    point rates (the smoothed MLE) would expect far more of the briefly watched ones."""
    rng = np.random.default_rng(7)
    mean_rate = 0.05
    rate, watched, seen = watched_population(rng, 40_000, 0.4, mean_rate)
    unseen = ~seen
    age = rng.uniform(0.0, 40.0, unseen.sum())
    current = rng.random(unseen.sum()) < np.exp(-rate[unseen] * age)
    p = static_share(watched[unseen], int(seen.sum()), mean_rate)
    expected = unseen_change_freshness(watched[unseen], age, p, mean_rate)
    assert expected.mean() == pytest.approx(current.mean(), abs=0.01)
    brief = watched[unseen] < 2.0 / mean_rate  # (watched for less than two mean periods)
    assert expected[brief].mean() == pytest.approx(current[brief].mean(), abs=0.02)
    cr = ChangeRates(prior_rate=mean_rate)
    for k, u in enumerate(watched[unseen][brief][:200]):
        cr.observe(k, 0.0, None)
        cr.observe(k, u, False)
    point = np.exp(-cr.rates(np.arange(cr.n)) * age[brief][: cr.n])
    assert point.mean() > current[brief][: cr.n].mean() + 0.05


def test_a_page_never_seen_to_change_is_fresher_the_longer_it_was_watched():
    u = np.array([0.0, 10.0, 100.0, 1000.0])
    fresh = unseen_change_freshness(u, np.full(4, 20.0), 0.4, 0.05)
    assert np.all(np.diff(fresh) > 0) and 0 < fresh[0] and fresh[-1] < 1
    assert fresh[-1] == pytest.approx(1.0, abs=0.01)  # (a page unchanged for long: static)
    assert unseen_change_freshness(u, np.zeros(4), 0.4, 0.05) == pytest.approx(np.ones(4))


def test_with_no_page_seen_to_change_every_page_is_static_and_with_none_unseen_none_is():
    assert static_share(np.array([5.0, 50.0]), 0, 0.05) == 1.0
    assert unseen_change_freshness(np.array([5.0]), np.array([100.0]), 1.0, 0.05)[0] == 1.0
    assert static_share(np.zeros(0), 3, 0.05) == 0.0
    # Pages never watched (a first look only) tell nothing: they are the slab's.
    assert static_share(np.zeros(5), 5, 0.05) == pytest.approx(0.0, abs=1e-6)
