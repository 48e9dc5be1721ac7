"""How full a download slot is: the room of a slot (its concurrency, or with a download delay
the requests it downloads at once and one waiting) and the leases that fill it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from scrapy import Request, Spider
from scrapy.core.downloader import Slot
from scrapy.utils.test import get_crawler

from scrapy_opic import _leases
from scrapy_opic._leases import LATENCY_WEIGHT, Leases, slot_room
from scrapy_opic.opic.contract import Lease


def room_of(slots: dict | None = None, **settings):
    crawler = get_crawler(Spider, {"CONCURRENT_REQUESTS_PER_DOMAIN": 8, **settings})
    crawler.engine = SimpleNamespace(downloader=SimpleNamespace(slots=slots or {}))
    return slot_room(crawler)


def test_a_slot_without_a_delay_has_room_for_its_concurrency():
    room = room_of()
    assert room("a.example", None) == 8
    assert room("a.example", 30.0) == 8  # (its latency does not matter)
    assert room_of(CONCURRENT_REQUESTS_PER_DOMAIN=3)("a.example", None) == 3


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        (None, 2),  # none seen yet: one downloading, one waiting
        (0.004, 2),  # a short latency: the same
        (1.0, 2),  # one delay long: one downloading while the next waits
        (3.5, 5),  # four downloading at once, one waiting
        (60.0, 8),  # no more than its concurrency
    ],
)
def test_a_delayed_slot_has_room_for_what_it_downloads_at_once_and_one_waiting(latency, expected):
    assert room_of(DOWNLOAD_DELAY=1.0)("a.example", latency) == expected


def test_the_downloaders_slot_and_download_slots_settings_come_first():
    # (AutoThrottle changes the downloader's slot's delay as the crawl goes: it is read then.)
    slot = Slot(4, 0.5, 0.0)
    room = room_of({"a.example": slot}, DOWNLOAD_DELAY=0.0)
    assert room("a.example", 0.9) == 3  # ceil(0.9 / 0.5) downloading, one waiting
    slot.delay = 0.0
    assert room("a.example", 0.9) == 4
    configured = {"b.example": {"concurrency": 3, "delay": 0.25}, "c.example": {"delay": 0}}
    room = room_of(DOWNLOAD_SLOTS=configured, DOWNLOAD_DELAY=2.0)
    assert room("b.example", 0.6) == 3  # ceil(0.6 / 0.25) + 1 = 4, at most 3
    assert room("c.example", None) == 8  # no delay there: the default concurrency
    assert room("d.example", None) == 2  # the settings' delay


def _lease(n: int, slot: str = "a.example") -> tuple[Lease, Request]:
    request = Request(f"http://{slot}/{n}")
    lease = Lease(f"k{n}", n, None, slot, request.url)
    request.meta.update(opic_id=lease.key, opic_lease=lease.token)
    return lease, request


def test_a_delayed_slot_is_full_at_its_room_and_learns_its_latency():
    leases = Leases(room_of(DOWNLOAD_DELAY=1.0))
    held = [_lease(n) for n in range(6)]
    for lease, request in held[:2]:
        leases.hold(lease, request, (0, False), None)
    assert leases.full == {"a.example"}  # two between their pop and their download's end
    # A download took 3.5 s: after the next look at the slots, five fit.
    held[0][1].meta["download_latency"] = 3.5
    leases.downloaded(held[0][1])
    assert leases.full == set()
    for lease, request in held[2:4]:
        leases.hold(lease, request, (0, False), None)
    assert leases.full == {"a.example"}  # (the room is kept until the slots are looked at)
    leases.forget_limits()
    assert leases.full == set() and leases.limit("a.example") == 5
    # A moving average: a second download of 1.0 s moves it a fifth of the way.
    held[1][1].meta["download_latency"] = 1.0
    leases.downloaded(held[1][1])
    leases.forget_limits()
    assert leases.limit("a.example") == 4  # ceil(3.5 - 0.2 * 2.5 = 3.0) + 1
    assert 3.5 + LATENCY_WEIGHT * (1.0 - 3.5) == pytest.approx(3.0)


def test_a_slot_made_full_by_a_smaller_room_is_seen_full():
    """The slot's delay grew (AutoThrottle): its requests between pop and download's end now
    exceed its room, and it is full from the next look at the slots."""
    slot = Slot(8, 0.0, 0.0)
    leases = Leases(room_of({"a.example": slot}))
    for lease, request in (_lease(n) for n in range(4)):
        leases.hold(lease, request, (0, False), None)
    assert leases.full == set()
    slot.delay = 1.0
    leases.forget_limits()
    assert leases.full == {"a.example"}


def test_latencies_of_idle_slots_are_forgotten_past_a_bound(monkeypatch):
    monkeypatch.setattr(_leases, "LATENCY_SLOTS", 3)
    leases = Leases(room_of(DOWNLOAD_DELAY=1.0))

    def downloaded(n: int, slot: str) -> None:
        lease, request = _lease(n, slot)
        leases.hold(lease, request, (0, False), None)
        request.meta["download_latency"] = 3.5
        leases.downloaded(request)

    for n in range(3):
        downloaded(n, f"h{n}.example")
    leases.forget_limits()
    assert leases.limit("h1.example") == 5  # three slots' latencies: kept
    lease, request = _lease(9, "h1.example")
    leases.hold(lease, request, (0, False), None)  # (a request out on h1)
    downloaded(3, "h3.example")  # a fourth
    leases.forget_limits()
    assert leases.limit("h1.example") == 5  # a request out: kept
    assert leases.limit("h0.example") == leases.limit("h3.example") == 2  # forgotten
