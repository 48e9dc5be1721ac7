"""``OpicScheduler``: a Scrapy scheduler that fetches the page with the most cash first.

Contract with Scrapy's engine (see ``scrapy.core.scheduler.BaseScheduler``):

* ``enqueue_request(request)`` files the request under its page, keyed by
  ``crawler.request_fingerprinter.fingerprint(request)``. It returns ``False`` (Scrapy then fires
  ``request_dropped``) for a duplicate: a page already pending or in flight, or already visited
  in a one-pass crawl. The links that led to it have paid it cash all the same (the spider
  middleware did that): the dupefilter never drops money.
* ``next_request()`` pops the best page among the download slots that have room (politeness), or
  returns ``None`` when every slot with pending pages is full: the engine asks again when a
  download finishes. The request carries ``meta["opic_id"]`` so that its response, retries and
  redirects find their page again.
* A request whose ``meta["opic_id"]`` names an in-flight page is a *retry* (same fingerprint:
  nothing moves) or a *redirect* (another fingerprint: the page's cash moves to the target).
* ``has_pending_requests()`` is true while pages wait; in a continuous crawl visited pages wait
  again at once, so the spider stays open until something else closes it
  (``CLOSESPIDER_PAGECOUNT``...).

Not yet: ``request.priority`` is ignored (cash alone orders pages) and the frontier lives in
memory only (no JOBDIR persistence).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy.core.scheduler import BaseScheduler

from .core.engine import OpicEngine
from .core.frontier import IN_FLIGHT, Frontier
from .core.window import parse_window
from .settings import OpicSettings

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_RUNNING: WeakKeyDictionary = WeakKeyDictionary()


class OpicScheduler(BaseScheduler):
    """Greedy OPIC scheduling with politeness; the frontier lives in memory."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self.stats = crawler.stats
        self.fingerprinter = crawler.request_fingerprinter
        engine = OpicEngine(
            epsilon=settings.epsilon,
            refresh=settings.refresh,
            window=parse_window(settings.window),
        )
        self.frontier = Frontier(engine, settings.strategy, settings.continuous, settings.seed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicScheduler:
        return cls(crawler, OpicSettings.from_settings(crawler.settings))

    @staticmethod
    def of(crawler: Crawler) -> OpicScheduler | None:
        """The OPIC scheduler running for ``crawler`` (the middlewares' way in)."""
        return _RUNNING.get(crawler)

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, spider: Spider) -> None:
        _RUNNING[self.crawler] = self
        logger.info(
            "OPIC scheduler: %s, epsilon=%s, refresh=%s, window=%s, %s crawl",
            self.settings.strategy,
            self.settings.epsilon,
            self.settings.refresh,
            self.settings.window,
            "continuous" if self.settings.continuous else "one-pass",
        )

    def close(self, reason: str) -> None:
        self.update_stats()
        total = self.frontier.total_cash()
        logger.info(
            "OPIC scheduler closed (%s): %d pages known, %d visited, total cash %.12f",
            reason,
            self.frontier.engine.n,
            self.frontier.counts[3],
            total,
        )
        self.stats.set_value("opic/total_cash", total)
        _RUNNING.pop(self.crawler, None)

    # -- the scheduler interface -----------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return len(self.frontier) > 0

    def __len__(self) -> int:
        return len(self.frontier)

    def _slot(self, request: Request) -> Any:
        return self.crawler.engine.downloader.get_slot_key(request)

    def _has_room(self, slot: Any) -> bool:
        downloader_slot = self.crawler.engine.downloader.slots.get(slot)
        return downloader_slot is None or len(downloader_slot.active) < downloader_slot.concurrency

    def enqueue_request(self, request: Request) -> bool:
        frontier = self.frontier
        key = self.fingerprinter.fingerprint(request)
        source = request.meta.get("opic_id")
        if source is not None and frontier.status[source] == IN_FLIGHT:
            if frontier.engine.key_of(source) == key:  # a retry of the page in flight
                frontier.retry(source, request)
                self.stats.inc_value("opic/retried")
                return True
            target = frontier.redirect(source, key, request, self._slot(request))
            self.stats.inc_value("opic/redirected")
            return frontier.payloads.get(target) is request
        if frontier.schedule(key, request, self._slot(request)):
            self.stats.inc_value("opic/enqueued")
            return True
        self.stats.inc_value("opic/duplicates")
        return False

    def next_request(self) -> Request | None:
        got = self.frontier.pop(self._has_room)
        if got is None:
            return None
        i, request = got
        if self.settings.continuous:
            request = request.replace()  # the stored request is fetched again later
        request.meta["opic_id"] = i
        self.stats.inc_value("opic/popped")
        return request

    # -- stats -----------------------------------------------------------------------------
    def update_stats(self) -> None:
        for name, value in self.frontier.stats().items():
            self.stats.set_value(f"opic/{name}", value)
