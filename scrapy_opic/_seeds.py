"""Start URLs pushed into a running crawl (its feed: :mod:`scrapy_opic._backends.feed`) and a
crawl that waits for them (``OPIC_MAX_IDLE_TIME``): the Scrapy side.

Every second, and whenever Scrapy's engine finds nothing to do (``spider_idle``), the
scheduler's :class:`SeedIntake` takes the seeds waiting in the feed, turns each into a request
(:func:`seed_request`) and hands it to the engine (``engine.crawl``), which files it through
the scheduler as any request: a page already known is a duplicate, a new one waits with no
cash until the virtual page pays it (as every page discovered). Once they are filed, a commit
makes them durable and the feed forgets them.

A seed is one line: a URL, or a JSON object with ``url`` and optionally ``priority`` (an
integer), ``meta`` (an object) and ``callback`` (the name of a public method of the spider; a
spider with an ``opic_seed_callbacks`` attribute allows only the names it lists). It becomes a
start request (``is_start_request`` in its meta, ``dont_filter``), as those of ``start_urls``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import Request, signals
from scrapy.exceptions import CloseSpider, DontCloseSpider
from twisted.internet import task

from ._backends import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from collections import defaultdict

    from scrapy import Spider
    from scrapy.crawler import Crawler

    from ._backends.crawl import Crawl
    from ._settings import OpicSettings

logger = logging.getLogger(__name__)

#: Seconds between two looks at the feed.
FEED_SECONDS = 1.0
#: Refused seeds said in the log one by one per process (the others only counted).
SAID_REFUSED = 10
#: The fields of a seed given as JSON.
SEED_FIELDS = ("url", "priority", "meta", "callback")
#: The reason a crawl that waited ``OPIC_MAX_IDLE_TIME`` for work closes with.
IDLE_REASON = "idle_timeout"


def seed_bytes(
    url: str,
    priority: int | None = None,
    meta: Mapping[str, Any] | None = None,
    callback: str | None = None,
) -> bytes:
    """One seed as the feed keeps it: the URL alone, or a JSON object with what else is given."""
    extra = {"priority": priority, "meta": meta, "callback": callback}
    extra = {k: v for k, v in extra.items() if v is not None}
    if not extra and not url.lstrip().startswith("{"):
        return url.strip().encode()
    return json.dumps({"url": url.strip(), **extra}, separators=(",", ":")).encode()


def seed_request(raw: bytes, spider: Spider) -> Request:
    """The request of the seed ``raw`` (see the module docstring); :class:`ValueError` says
    what is wrong with it."""
    text = raw.decode("utf-8").strip()
    fields: dict[str, Any] = {"url": text}
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(fields, dict) or not isinstance(fields.get("url"), str):
            raise ValueError('a JSON seed is an object with a "url" string')
        unknown = sorted(set(fields) - set(SEED_FIELDS))
        if unknown:
            raise ValueError(f"unknown fields {unknown} (a seed has {', '.join(SEED_FIELDS)})")
    priority = fields.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError('"priority" is an integer')
    meta = fields.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError('"meta" is an object')
    name = fields.get("callback")
    callback = None
    if name is not None:
        allowed = getattr(spider, "opic_seed_callbacks", None)
        method = getattr(spider, name, None) if isinstance(name, str) else None
        if (
            method is None
            or not callable(method)
            or name.startswith("_")
            or (allowed is not None and name not in allowed)
        ):
            raise ValueError(f"the spider {spider.name!r} has no callback {name!r} for seeds")
        callback = method
    # A start request, as Scrapy makes those of start_urls (exempt from the offsite filter and
    # a project's dupefilter); the frontier still files a known page once.
    meta = {**meta, "is_start_request": True}
    return Request(fields["url"], callback, priority=priority, meta=meta, dont_filter=True)


class Scheduler(Protocol):
    """What :class:`SeedIntake` uses of the OPIC scheduler."""

    crawler: Crawler
    settings: OpicSettings
    counts: defaultdict[str, int]
    spider: Spider | None

    @property
    def frontier(self) -> Crawl: ...

    @property
    def failed(self) -> bool: ...

    def stop_on(self, exc: StoreError) -> None: ...


class SeedIntake:
    """The feed's seeds into a running crawl, and its wait when idle (see the module
    docstring), for ``scheduler``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.crawler = scheduler.crawler
        self.max_idle = scheduler.settings.max_idle_time
        self.counts = scheduler.counts
        self._tick: task.LoopingCall | None = None
        self._idle_since: float | None = None
        self._refused = 0
        self._unreadable = False

    def start(self) -> None:
        """Look at the feed every :data:`FEED_SECONDS`, and when the crawl is idle."""
        self.crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)
        if self.scheduler.frontier.feed is not None:
            self._tick = task.LoopingCall(self.take)
            self._tick.start(FEED_SECONDS, now=False)

    def stop(self) -> None:
        if self._tick is not None and self._tick.running:
            self._tick.stop()

    def busy(self) -> None:
        """The crawl has work: an idle wait starts again from nothing."""
        self._idle_since = None

    def take(self) -> int:
        """File the seeds waiting in the feed; how many requests the scheduler took (pages
        not known before)."""
        scheduler = self.scheduler
        crawl = scheduler.frontier
        # (Not while links a visit paid are on their way back: the commit that makes the
        # seeds durable would write a state holding pages without a request.)
        if crawl.feed is None or scheduler.failed or not crawl.ready():
            return 0
        try:
            raw = crawl.take_seeds()
            if not raw:
                return 0
            before = self.counts["opic/enqueued"]
            refused = sum(not self._file(seed) for seed in raw)
            filed = self.counts["opic/enqueued"] - before
            crawl.seeds_filed()
        except StoreError as exc:
            scheduler.stop_on(exc)
            return 0
        except Exception as exc:  # (a feed file it may not rename, a key that is not a list)
            if not self._unreadable:  # (said once until a take works again)
                self._unreadable = True
                logger.warning(
                    "OPIC: cannot take the start URLs of %s (%s: %s); trying again every %g s",
                    crawl.feed.name,
                    type(exc).__name__,
                    exc,
                    FEED_SECONDS,
                )
            return 0
        self._unreadable = False
        self.counts["opic/seeds_taken"] += len(raw)
        logger.info(
            "OPIC: took %d start URLs from %s: %d filed, %d already known, %d refused",
            len(raw),
            crawl.feed.name,
            filed,
            len(raw) - filed - refused,
            refused,
        )
        if filed:
            self.busy()
        return filed

    def _file(self, raw: bytes) -> bool:
        """Hand one seed's request to Scrapy's engine; False if the seed is refused."""
        spider = self.scheduler.spider
        assert spider is not None and self.crawler.engine is not None
        try:
            request = seed_request(raw, spider)
        except (ValueError, UnicodeDecodeError) as exc:
            self.counts["opic/seeds_refused"] += 1
            self._refused += 1
            if self._refused <= SAID_REFUSED:
                more = " (further ones are only counted)" if self._refused == SAID_REFUSED else ""
                logger.warning(
                    "OPIC: a start URL pushed was refused: %r: %s%s", raw[:200], exc, more
                )
            return False
        self.crawler.engine.crawl(request)
        return True

    def spider_idle(self, spider: Spider) -> None:
        """Scrapy's engine has nothing to do: seeds waiting are taken; else the crawl waits up
        to ``OPIC_MAX_IDLE_TIME`` seconds (``DontCloseSpider``), then closes with
        :data:`IDLE_REASON`."""
        if self.take():
            raise DontCloseSpider
        if self.max_idle <= 0:
            return
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
            feed = self.scheduler.frontier.feed
            logger.info(
                "OPIC: nothing to crawl: waiting %s for start URLs pushed into %s "
                "(OPIC_MAX_IDLE_TIME)",
                "for ever" if self.max_idle == float("inf") else f"up to {self.max_idle:g} s",
                feed.name if feed is not None else "the crawl",
            )
        if now - self._idle_since < self.max_idle:
            raise DontCloseSpider
        logger.info(
            "OPIC: closing: nothing to crawl for %.0f s (OPIC_MAX_IDLE_TIME=%g)",
            now - self._idle_since,
            self.max_idle,
        )
        raise CloseSpider(IDLE_REASON)


__all__ = ["FEED_SECONDS", "IDLE_REASON", "SeedIntake", "seed_bytes", "seed_request"]
