"""The Poisson site of ``tests/support/changing_site.py`` itself: its graph, rates and change
times, its
validators and 304s, its lying modes, its change at ``T``, and the freshness computed from a log
(no crawl: a test client on 127.0.0.1 and a clock the tests move)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from typing import Any

import numpy as np
import pytest

from scrapy_opic.opic.signature import signature
from tests.support.changing_site import BIRTH, Fetch, PoissonSite, reachable

WALL = 1_700_000_000.0  # the site's time 0 as a Unix time (a whole second)


class Clock:
    """A monotonic clock the test sets."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def site(clock: Clock, n: int = 30, **kw: Any) -> PoissonSite:
    return PoissonSite(n=n, seed=2, clock=clock, wall=WALL, **kw)


def date(seconds: float) -> str:
    return formatdate(WALL + seconds, usegmt=True)


# -- the site's shape -----------------------------------------------------------------------
def test_the_site_is_deterministic_from_its_seed() -> None:
    a, b, c = PoissonSite(200, seed=3), PoissonSite(200, seed=3), PoissonSite(200, seed=4)
    for g in ("before", "after"):
        assert np.array_equal(getattr(a, g).indptr, getattr(b, g).indptr)
        assert np.array_equal(getattr(a, g).indices, getattr(b, g).indices)
    assert np.array_equal(a.rates, b.rates) and np.array_equal(a.removed, b.removed)
    assert not np.array_equal(a.rates, c.rates)
    # Change times do not depend on the order in which they are asked for.
    moving = np.flatnonzero(a.rates > 0)[:5]
    late = [a.version(int(i), 50.0) for i in moving]
    early = [b.version(int(i), 1.0) for i in moving]
    assert late == [b.version(int(i), 50.0) for i in moving] and sum(late) > sum(early)


def test_every_page_is_reachable_from_page_0_before_and_after_the_change() -> None:
    s = PoissonSite(300, seed=5)
    assert reachable(s.before, s.alive_before).sum() == 300
    assert reachable(s.after, s.alive_after).sum() == s.alive_after.sum() == 300 - 30 + 30
    assert s.removed.size == 30 and 0 not in s.removed
    # After the change no link points to a removed page; page 0 links to the section's index.
    assert not np.isin(s.after.indices, s.removed).any()
    assert s.n in s.after.children(0) and s.n not in s.before.children(0)
    assert not (s.before.indices >= s.n).any()  # nothing links to the new section before
    # A power law: a few pages hold many in-links.
    indeg = np.sort(s.before.in_degree)[::-1]
    assert indeg[0] == 299 and indeg[5] > 8 * np.median(indeg)


def test_rates_static_share_range_and_linked_fastest() -> None:
    lo, hi = 0.02, 2.0
    free = PoissonSite(300, seed=1, rates=(lo, hi))
    linked = PoissonSite(300, seed=1, rates=(lo, hi), linked_fastest=True)
    for s in (free, linked):
        r = s.rates[:300]
        assert (r == 0).sum() == 90
        assert r[r > 0].min() >= lo and r.max() <= hi and r.max() / r[r > 0].min() > 30
    pr = linked.pagerank_before()[:300]
    order = np.argsort(-pr, kind="stable")
    assert np.all(np.diff(linked.rates[order]) <= 0)  # rank for rank
    assert (linked.rates[order[-90:]] == 0).all()  # the least ranked never change
    # Independent rates: no such order.
    ranks = np.argsort(np.argsort(-pr))
    rate_ranks = np.argsort(np.argsort(-free.rates[:300]))
    assert abs(np.corrcoef(ranks, rate_ranks)[0, 1]) < 0.3


def test_change_times_are_a_poisson_process_of_the_page_rate() -> None:
    s = PoissonSite(60, seed=7, static=0.0, rates=(0.5, 0.5))
    counts = np.array([s.version(i, 400.0) for i in range(60)])
    assert abs(counts.mean() - 200.0) < 6.0  # 0.5/s for 400 s: sd of the mean 1.8
    assert abs(counts.var() - 200.0) < 80.0  # Poisson: variance = mean
    gaps = np.diff(s.change_times(3, 0.0, 400.0))
    assert abs(gaps.mean() - 2.0) < 0.5


# -- bodies, validators, 304 --------------------------------------------------------------
def test_the_clock_in_the_body_is_hidden_from_the_text_signature() -> None:
    clock = Clock()
    with site(clock, changes={1: [5.0]}) as s:
        clock.t = 1.0
        _, _, a = get(s.url(1))
        clock.t = 2.0
        _, _, b = get(s.url(1))
        clock.t = 6.0
        _, _, c = get(s.url(1))
    assert a != b and signature(a, "body") != signature(b, "body")
    assert signature(a) == signature(b)
    assert signature(a, ignore_digits=True) == signature(b, ignore_digits=True)
    assert signature(b) != signature(c)
    assert signature(b, ignore_digits=True) != signature(c, ignore_digits=True)


def test_etag_last_modified_and_304() -> None:
    clock = Clock()
    with site(clock, changes={1: [5.0, 6.5, 7.8]}) as s:
        clock.t = 1.0
        status, h, body = get(s.url(1))
        assert status == 200 and body
        etag0, lm0 = h["ETag"], h["Last-Modified"]
        assert not etag0.startswith("W/") and lm0 == date(BIRTH)
        status, h, body = get(s.url(1), **{"If-None-Match": etag0})
        assert (status, body) == (304, b"") and h["ETag"] == etag0
        assert get(s.url(1), **{"If-Modified-Since": lm0})[0] == 304
        clock.t = 6.0  # changed at 5.0
        status, h, _ = get(s.url(1), **{"If-None-Match": etag0})
        assert status == 200 and h["ETag"] != etag0 and h["Last-Modified"] == date(5.0)
        etag1 = h["ETag"]
        assert get(s.url(1), **{"If-Modified-Since": lm0})[0] == 200
        # If-None-Match wins over If-Modified-Since.
        assert get(s.url(1), **{"If-None-Match": etag0, "If-Modified-Since": date(6.0)})[0] == 200
        assert get(s.url(1), **{"If-None-Match": f'"x", {etag1}'})[0] == 304
        assert get(s.url(1), **{"If-None-Match": "*"})[0] == 304
        # A change within the current second: no Last-Modified until that second is over.
        clock.t = 6.7
        assert "Last-Modified" not in get(s.url(1))[1]
        clock.t = 7.6
        lm2 = get(s.url(1))[1]["Last-Modified"]
        assert lm2 == date(7.0)  # 6.5 rounded up
        assert get(s.url(1), **{"If-Modified-Since": lm2})[0] == 304
        clock.t = 8.0  # changed at 7.8, within the second the date names: still caught
        assert get(s.url(1), **{"If-Modified-Since": lm2})[0] == 200
        log = list(s.log)
    statuses = [f.status for f in log]
    assert statuses == [200, 304, 304, 200, 200, 200, 304, 304, 200, 200, 304, 200]
    assert [f.version for f in log[:4]] == [0, 0, 0, 1]
    assert log[1].inm and not log[1].ims and log[2].ims and not log[2].inm
    assert log[1].had and log[1].current and not log[3].had and log[3].current
    assert log[4].had  # a full download of the version the crawler had: a needless one


def test_no_validators_never_304() -> None:
    clock = Clock()
    with site(clock, validators=False) as s:
        _, h, _ = get(s.url(0))
        assert "ETag" not in h and "Last-Modified" not in h
        assert get(s.url(0), **{"If-None-Match": "*"})[0] == 200
        assert get(s.url(0), **{"If-Modified-Since": date(100.0)})[0] == 200


def test_weak_etags_match_weakly() -> None:
    clock = Clock()
    with site(clock, weak=True) as s:
        etag = get(s.url(0))[1]["ETag"]
        assert etag.startswith('W/"')
        assert get(s.url(0), **{"If-None-Match": etag})[0] == 304
        assert get(s.url(0), **{"If-None-Match": etag.removeprefix("W/")})[0] == 304


def test_noisy_validators_change_at_every_response() -> None:
    clock = Clock()
    with site(clock, lying="noisy") as s:
        tags: list[str] = []
        for k in range(4):
            clock.t = float(k)
            status, h, _ = get(s.url(2), **({"If-None-Match": tags[-1]} if tags else {}))
            assert status == 200 and "Last-Modified" in h
            tags.append(h["ETag"])
        assert len(set(tags)) == 4
        assert get(s.url(2), **{"If-Modified-Since": date(10.0)})[0] == 200


def test_stale_validators_give_false_304s() -> None:
    clock = Clock()
    with site(clock, lying="stale", changes={3: [2.0]}) as s:
        clock.t = 1.0
        _, h0, b0 = get(s.url(3))
        clock.t = 3.0
        _, h1, b1 = get(s.url(3))
        assert signature(b0) != signature(b1)  # changed...
        assert (h0["ETag"], h0["Last-Modified"]) == (h1["ETag"], h1["Last-Modified"])  # ...hidden
        clock.t = 4.0
        status, _, _ = get(s.url(3), **{"If-None-Match": h1["ETag"]})
        assert status == 304  # true: the copy of 3.0 is current
        log = list(s.log)
    clock = Clock()
    with site(clock, lying="stale", changes={3: [2.0]}) as s2:
        clock.t = 1.0
        get(s2.url(3))
        clock.t = 3.0
        status, _, _ = get(s2.url(3), **{"If-None-Match": h0["ETag"]})
        assert status == 304  # false: the page changed at 2.0
        assert get(s2.url(3), **{"If-Modified-Since": h0["Last-Modified"]})[0] == 304
        false = s2.log[1]
    assert log[-1].had and log[-1].current
    assert false.status == 304 and not false.had and not false.current and false.version == 1


# -- the change at T --------------------------------------------------------------------------
@pytest.mark.parametrize("gone", [404, 410])
def test_pages_removed_and_a_section_added_at_t(gone: int) -> None:
    clock = Clock()
    with site(clock, n=40, static=1.0, change_after=3, gone_status=gone) as s:
        lost, index = int(s.removed[0]), s.n
        linkers = s.before.sources()[s.before.indices == lost]
        linker = int(linkers[s.alive_after[linkers]][0])
        clock.t = 1.0
        assert get(s.url(lost))[0] == 200
        assert get(s.url(index))[0] == 404  # not yet
        _, h, body = get(s.url(linker))
        assert f'href="/p/{lost}"'.encode() in body
        assert s.change_time is None
        clock.t = 2.0  # the 4th page request: the site changes
        assert get(s.url(lost))[0] == gone
        assert s.change_time == 2.0
        status, h2, body = get(s.url(linker))
        assert status == 200 and f'href="/p/{lost}"'.encode() not in body
        assert h2["ETag"] != h["ETag"]  # new links: a new version
        _, _, home = get(s.url(0))
        assert f'href="/p/{index}"'.encode() in home
        status, _, section = get(s.url(index))
        assert status == 200 and f'href="/p/{index + 1}"'.encode() in section
        log = list(s.log)
    assert [f.status for f in log] == [200, 404, 200, gone, 200, 200, 200]
    assert s.version(index, 2.0) == 0 and s.version(index, 1.0) == -1
    # The linker's only change is its new links at T: a copy of 1.0 was fresh until then.
    assert s.next_change(linker, 1.0) == 2.0 and s.next_change(linker, 2.0) == np.inf
    assert s.freshness([fetch(1.0, linker)], 0.0, 4.0)[linker] == pytest.approx(0.25)
    pr = s.pagerank_at(3.0)
    assert pr[s.removed].sum() == 0 and pr[s.new].sum() > 0 and pr.sum() == pytest.approx(1.0)
    assert s.pagerank_at(1.0)[s.new].sum() == 0


def test_pace_spaces_the_requests() -> None:
    with PoissonSite(20, seed=1, pace=50.0) as s:
        threads = [threading.Thread(target=get, args=(s.url(i),)) for i in range(10)]
        t = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.monotonic() - t
        times = sorted(f.t for f in s.log)
    assert elapsed >= 0.17 and times[-1] - times[0] >= 0.17


# -- freshness from a log ---------------------------------------------------------------------
def fetch(t: float, page: int, status: int = 200) -> Fetch:
    return Fetch(t, f"/p/{page}", page, status, status == 304, False, 0, False, True)


def test_freshness_from_a_hand_made_log() -> None:
    s = PoissonSite(10, seed=1, changes={0: [2.0, 6.0], 1: [], 2: [5.0], 3: [3.0]})
    log = [
        fetch(1.0, 0), fetch(1.0, 2), fetch(2.0, 3), fetch(2.5, 3),  # (2.5: an unneeded one)
        fetch(3.0, 0), fetch(4.0, 1), fetch(7.0, 2, 304),  # (7.0: a false 304, no refresh)
        fetch(8.0, 1, 304), fetch(9.0, -1, 404), fetch(12.0, 3),
    ]  # fmt: skip
    # Fresh: page 0 [1, 2) and [3, 6); page 1 [4, 10]; page 2 [1, 5); page 3 [2, 3).
    assert s.freshness(log, 0.0, 10.0)[:4] == pytest.approx([0.4, 0.6, 0.4, 0.1])
    assert s.freshness(log, 2.5, 5.0)[:4] == pytest.approx([0.8, 0.4, 1.0, 0.2])
    assert s.freshness(log, 0.0, 10.0)[4:].sum() == 0  # never downloaded: never fresh
    w = np.zeros(s.total)
    w[:4] = [1, 2, 3, 4]
    assert s.weighted_freshness(log, 0.0, 10.0, w) == pytest.approx(0.32)
    assert s.weighted_freshness(log[::-1], 0.0, 10.0, w) == pytest.approx(0.32)  # any order


def test_freshness_of_a_served_log_follows_the_change_times() -> None:
    clock = Clock()
    with site(clock, changes={4: [3.0, 3.5, 9.0]}) as s:
        for t in (1.0, 2.0, 4.0, 8.0):
            clock.t = t
            get(s.url(4))
        log = list(s.log)
    # Fresh from 1.0 until the change at 3.0, from 4.0 until 9.0; the window [0, 10].
    assert s.freshness(log, 0.0, 10.0)[4] == pytest.approx(0.7)
    assert [f.had for f in log] == [False, True, False, True]


def test_freshness_matches_a_sampled_reading_of_the_versions() -> None:
    """Random refetches served by the site (no HTTP); freshness at sampled instants read from
    the versions alone: the copy of the last 200 is current if it is the version of now."""
    clock = Clock()
    s = PoissonSite(40, seed=9, rates=(0.05, 5.0), clock=clock, wall=WALL)
    rng = np.random.default_rng(0)
    for t in np.sort(rng.uniform(0.0, 60.0, 800)):
        clock.t = float(t)
        s.respond(f"/p/{rng.integers(40)}", {})
    grid = np.linspace(10.0, 50.0, 4001)[:-1] + 0.005
    fresh = np.zeros(s.total)
    for i in range(40):
        served = [(f.t, f.version) for f in s.log if f.page == i and f.status == 200]
        for t in grid:
            copy = [v for u, v in served if u <= t]
            fresh[i] += bool(copy) and copy[-1] == s.version(i, float(t))
    assert s.freshness(s.log, 10.0, 50.0) == pytest.approx(fresh / grid.size, abs=0.003)
    assert 0.1 < fresh[:40].mean() / grid.size < 0.9
