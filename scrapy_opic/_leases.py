"""The pages a Scrapy process has in flight, and how full each download slot is.

Each page in flight has the lease it was handed out under, a weak reference to the request it
went out with (a request freed with no outcome is seen: :meth:`Leases.lost`), the priority and
``dont_filter`` of its request as filed (its retries and redirects keep them), and, when the
request in flight is a follow-up, the request to fetch the page with later.

A download slot has room while fewer of its requests than its *room* are between their pop and
the end of their download (Scrapy's ``request_left_downloader``), or their outcome if they never
reach the downloader. Counted here, not read from the downloader, whose count lags behind a run
of pops, since a request reaches it only after the downloader middlewares. The room:

* a slot without a download delay: its concurrency. The downloader then never holds more of a
  slot's requests than it may send at once. (Scrapy 2.13+ on the asyncio reactor starts every
  queued request of a slot that has a free transfer slot at once: more queued would mean more
  than its concurrency sent.)
* a slot with a download delay ``d`` (``DOWNLOAD_DELAY``, ``DOWNLOAD_SLOTS``, AutoThrottle's):
  the downloader sends one of its requests every ``d`` seconds, and each is downloading for its
  latency ``l`` (the slot's recent ``download_latency``, a moving average): ``ceil(l / d)``
  requests downloading at once and one waiting for its turn, at least 2, at most its
  concurrency. A request popped earlier than that would wait in the downloader's queue for its
  turn, chosen that much earlier than it goes out, on what the crawl knew then: with a
  concurrency of 8 and a short latency, seven delays ahead.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING

from ._requests import FOLLOW_UP_META, later_request
from .opic.contract import Lease

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request
    from scrapy.crawler import Crawler


#: The weight of a download's latency in its slot's moving average.
LATENCY_WEIGHT = 0.2
#: Slots whose latency is kept beyond those with requests out: past it, the others' are
#: forgotten (a broad crawl meets hosts without end; a host seen again learns it anew).
LATENCY_SLOTS = 10_000


def slot_room(crawler: Crawler) -> Callable[[Hashable, float | None], int]:
    """``room(slot, latency)``: how many of a download slot's requests may be between their pop
    and the end of their download (see the module docstring), from its concurrency and download
    delay: the downloader's, or for a slot it has not made yet the settings' (``DOWNLOAD_SLOTS``,
    ``CONCURRENT_REQUESTS_PER_IP`` or ``_PER_DOMAIN``, ``DOWNLOAD_DELAY``); ``latency``: the
    slot's recent download latency in seconds (``None``: none seen yet)."""
    cs = crawler.settings
    default = cs.getint("CONCURRENT_REQUESTS_PER_IP") or cs.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    default_delay = cs.getfloat("DOWNLOAD_DELAY")
    configured = {
        key: (int(conf.get("concurrency", default)), float(conf.get("delay", default_delay)))
        for key, conf in cs.getdict("DOWNLOAD_SLOTS").items()
        if isinstance(conf, dict)
    }

    def room(slot: Hashable, latency: float | None) -> int:
        downloader_slot = crawler.engine.downloader.slots.get(str(slot))
        if downloader_slot is not None:
            concurrency, delay = int(downloader_slot.concurrency), float(downloader_slot.delay)
        else:
            concurrency, delay = configured.get(str(slot), (default, default_delay))
        if delay <= 0:
            return concurrency
        downloading = math.ceil(latency / delay) if latency else 1
        return max(1, min(concurrency, max(2, downloading + 1)))

    return room


def quiet_seconds(crawler: Crawler) -> float:
    """The longest download delay of the slots here, with its jitter: how long a partition
    stays quiet before its hosts are handed to another process."""
    delay = crawler.settings.getfloat("DOWNLOAD_DELAY")
    for slot in crawler.engine.downloader.slots.values():
        delay = max(delay, float(slot.delay))
    return 1.5 * delay


class Leases:
    """The pages in flight here (see the module docstring); ``room(slot, latency)``: a download
    slot's room (:func:`slot_room`), asked once per slot until :meth:`forget_limits`."""

    def __init__(self, room: Callable[[Hashable, float | None], int]) -> None:
        self._room = room
        self._latency: dict[Hashable, float] = {}  # download slot -> its latency, averaged
        self._leases: dict[Hashable, Lease] = {}  # page key -> its lease
        self._out: dict[Hashable, weakref.ref] = {}  # page key -> the request handed out
        #: page key -> the priority and dont_filter of its request as filed.
        self.base: dict[Hashable, tuple[int, bool]] = {}
        self._later: dict[Hashable, Request] = {}  # page key -> its request for later
        self._load: dict[Hashable, int] = {}  # download slot -> its requests not downloaded
        self._downloaded: set[Hashable] = set()  # pages whose download is over
        self._limits: dict[Hashable, int] = {}
        #: The download slots without room.
        self.full: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._leases)

    def __iter__(self) -> Iterator[Lease]:
        return iter(list(self._leases.values()))

    def hold(
        self, lease: Lease, request: Request, base: tuple[int, bool], later: Request | None
    ) -> None:
        """Page ``lease.key`` goes out with ``request``."""
        self.end(lease.key)  # (a page whose lease lapsed, popped again: one lease)
        self._leases[lease.key] = lease
        self._out[lease.key] = weakref.ref(request)
        self.base[lease.key] = base
        if later is not None:
            self._later[lease.key] = later
        slot = lease.slot
        n = self._load[slot] = self._load.get(slot, 0) + 1
        if n >= self.limit(slot):
            self.full.add(slot)

    def hand_out(self, lease: Lease, request: Request, continuous: bool) -> None:
        """Page ``lease.key`` goes out with ``request``, which carries its lease in meta. A
        follow-up's page is fetched later with a plain request; in a one-pass crawl the request
        itself is the engine's alone (the lease gets it back when the crawl closes), so that
        its loss is seen."""
        meta = request.meta
        base = (
            meta.get("opic_priority", request.priority),
            meta.get("opic_dont_filter", request.dont_filter),
        )
        later = None
        if continuous and any(k in meta for k in FOLLOW_UP_META):
            later = later_request(request, *base)
        if not continuous and not isinstance(lease.payload, (bytes, dict)):
            lease = lease._replace(payload=None)
        self.hold(lease, request, base, later)
        meta["opic_id"] = lease.key
        meta["opic_lease"] = lease.token

    def of(self, request: Request) -> Lease | None:
        """The lease ``request`` was handed out under, if this process still holds it. (A
        request whose lease lapsed and whose page was then popped again under another lease is
        not the holder: its outcome is ignored.)"""
        lease = self._leases.get(request.meta.get("opic_id"))
        if lease is None or lease.token != request.meta.get("opic_lease"):
            return None
        return lease

    def request(self, key: Hashable) -> Request | None:
        """The request page ``key`` went out with, if it is still alive."""
        ref = self._out.get(key)
        return ref() if ref is not None else None

    def keep_base(self, request: Request, key: Hashable) -> bool:
        """A follow-up (retry, redirect) of page ``key`` waits at the priority its page's
        request had, with its ``dont_filter``: an adjustment (retry -1, redirect +2) is for the
        one request, not for the page's tier. Kept in meta, so that the follow-up, stored or
        shared, and its own follow-ups still know them. Whether its priority was adjusted."""
        base = self.base.get(key)
        if base is None:
            return False
        if request.dont_filter != base[1]:
            request.meta["opic_dont_filter"] = base[1]
        if request.priority == base[0]:
            return False
        request.meta["opic_priority"] = base[0]
        return True

    def take(self, request: Request) -> tuple[Lease, Request | None] | None:
        """The lease ``request`` was handed out under, if this process still holds it
        (:meth:`of`), ended (:meth:`end`), with the request to fetch its page with later."""
        lease = self.of(request)
        return None if lease is None else (lease, self.end(lease.key)[1])

    def end(self, key: Hashable) -> tuple[Lease | None, Request | None]:
        """This process's lease of page ``key`` ends (its outcome is being reported): the lease,
        and the request to fetch the page with later if the one in flight was a follow-up."""
        lease = self._leases.pop(key, None)
        self._out.pop(key, None)
        self.base.pop(key, None)
        later = self._later.pop(key, None)
        if lease is not None and key not in self._downloaded:
            self._unload(lease.slot)
        self._downloaded.discard(key)
        return lease, later

    def downloaded(self, request: Request) -> None:
        """``request``'s download is over: its slot has room again (and its latency, if it
        had a response, goes into the slot's average)."""
        lease = self.of(request)
        if lease is not None and lease.key not in self._downloaded:
            self._downloaded.add(lease.key)
            latency = request.meta.get("download_latency")
            if latency is not None:
                slot, before = lease.slot, self._latency.get(lease.slot)
                self._latency[slot] = (
                    latency if before is None else before + LATENCY_WEIGHT * (latency - before)
                )
            self._unload(lease.slot)

    def lost(self) -> list[Lease]:
        """The leases whose request was freed with no outcome (ended)."""
        gone = [key for key, ref in self._out.items() if ref() is None]
        return [lease for key in gone if (lease := self.end(key)[0]) is not None]

    def limit(self, slot: Hashable) -> int:
        """The slot's room (cached until :meth:`forget_limits`)."""
        limit = self._limits.get(slot)
        if limit is None:
            limit = self._limits[slot] = self._room(slot, self._latency.get(slot))
        return limit

    def forget_limits(self) -> None:
        """The downloader's slots (their concurrency, their delay) and their latencies may
        have changed: their room is asked again, and the slots' fullness follows it."""
        self._limits.clear()
        if len(self._latency) > LATENCY_SLOTS:
            self._latency = {s: x for s, x in self._latency.items() if s in self._load}
        self.full = {
            slot
            for slot in self.full | self._load.keys()
            if self._load.get(slot, 0) >= self.limit(slot)
        }

    def clear(self) -> list[Lease]:
        """Every lease ends (a closing crawl); the leases, each with the request it went out
        with as its payload if the frontier handed it over."""
        out = []
        for lease in self._leases.values():
            if lease.payload is None:
                lease = lease._replace(payload=self.request(lease.key))
            out.append(lease)
        self._leases, self._out, self.base, self._later = {}, {}, {}, {}
        self._load, self._downloaded, self.full = {}, set(), set()
        return out

    def _unload(self, slot: Hashable) -> None:
        n = self._load.get(slot, 0) - 1
        if n > 0:
            self._load[slot] = n
        else:
            self._load.pop(slot, None)
        if slot in self.full and n < self.limit(slot):
            self.full.discard(slot)
