"""The crawl's time series: bounded, evenly thinned, and round-trips through the store."""

from __future__ import annotations

import pytest

from scrapy_opic._series import Series


def test_series_stays_bounded_and_spans_the_whole_crawl():
    s = Series(limit=16)
    for k in range(1, 1001):
        s.add(visits=k, G=k / 10, elapsed=k * 0.5)
    assert len(s) < 16
    visits = s.column("visits")
    assert visits == sorted(visits) and visits[0] <= 64 and visits[-1] > 900
    gaps = {b - a for a, b in zip(visits, visits[1:])}
    assert len(gaps) == 1  # even spacing after thinning
    assert s.last_elapsed() == visits[-1] * 0.5


def test_series_round_trip_keeps_stride_and_tolerates_new_fields():
    s = Series(limit=8)
    for k in range(20):
        s.add(visits=k, error_factor=1 / (k + 1))
    again = Series.from_list(s.as_list(), limit=8)
    assert again.points == s.points and again.stride == s.stride
    old = [["visits", "G"], 1, [[1.0, 2.0], [2.0, 3.0]]]  # written before a field was added
    loaded = Series.from_list(old)
    assert loaded.column("visits") == [1.0, 2.0] and loaded.column("pending") == [0.0, 0.0]
    assert loaded.column("G") == [2.0, 3.0] and loaded.stride == 1
    with pytest.raises(ValueError):
        Series(limit=1)


def test_a_forced_point_is_kept_whatever_the_stride():
    s = Series(limit=4)
    for k in range(10):
        s.add(visits=k)
    assert s.stride > 1
    s.add(visits=99)  # may be skipped by the thinning...
    s.add(force=True, visits=100)  # ...the crawl's last point never is
    assert s.column("visits")[-1] == 100
