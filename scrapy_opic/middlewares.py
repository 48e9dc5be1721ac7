"""The middlewares that report each fetch's outcome to the OPIC frontier.

``OpicSpiderMiddleware`` (spider middleware at 75: a callback's output reaches it after every
middleware numbered above, Scrapy's Depth (900) and UrlLength (800) filters, a project's own
middlewares (543 in Scrapy's template) and DeltaFetch-like filters (100), so it sees exactly the
requests that go on to the scheduler). It buffers the callback's output, turns every request
into a page (its fingerprint), and pays the parent's cash out over them in one step: the visit.
Links whose URL matches ``OPIC_BOOST_PATTERNS`` weigh ``1 + OPIC_BOOST`` times a plain link
(:func:`~scrapy_opic.opic.frontier.boosted_weight`).
Requests to hosts the spider does not allow (Scrapy's OffsiteMiddleware drops them before the
scheduler sees them) are left out of the out-degree (``OPIC_REFUSED_LINKS = "ignore"``) or give
their share to the virtual page (``"virtual"``). A page links to another page once, however
many of its requests lead there (the scheduler merges them by fingerprint). A callback error
or an HTTP error response (``HttpError`` from Scrapy's HttpErrorMiddleware) is a visit with no
out-links: the cash goes to the virtual page.

``OpicDownloaderMiddleware`` (downloader middleware, below RetryMiddleware, 550, so that it only
sees errors that will not be retried) handles requests that never produce a response: a download
error is a visit with no out-links; an ``IgnoreRequest`` (robots.txt...) gives the page up and
sends its cash to the virtual page without a visit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy import Request, signals
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.utils.httpobj import urlparse_cached

from .opic.frontier import boosted_weight
from .scheduler import OpicScheduler, prepare
from .settings import OpicSettings

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import AsyncIterator, Iterable

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class OpicSpiderMiddleware:
    """Pays a parsed page's cash to the links its callback follows (see the module docstring)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self._warned_field: set[type] = set()
        self._collecting: set[int] = set()  # responses whose callback output is being read
        self._offsite = OffsiteMiddleware(crawler.stats)
        self._offsite.crawler = crawler
        crawler.signals.connect(self._offsite.spider_opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicSpiderMiddleware:
        return cls(crawler, prepare(crawler))

    # The whole output is buffered: the visit pays all the followed links at once. If the
    # callback raises part-way, what it yielded before still goes on (as without OPIC) and is
    # paid for, the page's status is spider_error (as for a callback that raises before
    # yielding), then the exception goes on to the middlewares below.
    # (Scrapy runs the process_spider_exception chain, ours included, before the exception
    # reaches the loop below: ``_collecting`` tells ours to leave the page to the loop, which
    # pays the links yielded so far.)
    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterable[Any]:
        out: list[Any] = []
        self._collecting.add(id(response))
        try:
            for o in result:
                out.append(o)
        except Exception:
            self._settle(response, out, failed=True)
            yield from out
            raise
        finally:
            self._collecting.discard(id(response))
        self._settle(response, out)
        yield from out

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        out: list[Any] = []
        self._collecting.add(id(response))
        try:
            async for o in result:
                out.append(o)
        except Exception:
            self._settle(response, out, failed=True)
            for o in out:
                yield o
            raise
        finally:
            self._collecting.discard(id(response))
        self._settle(response, out)
        for o in out:
            yield o

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Spider | None = None
    ) -> None:
        if id(response) in self._collecting:  # raised part-way through a callback's output
            return
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is not None:
            scheduler.settle_callback_error(response.request, exception)

    def _settle(self, response: Response, out: list[Any], failed: bool = False) -> None:
        """The visit of the response's page: one payout over the links it follows. ``failed``:
        the callback raised after yielding ``out`` (the page's status is ``spider_error``, its
        links found so far are paid all the same)."""
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is None:
            return
        s = self.settings
        spider = self.crawler.spider
        assert spider is not None  # (a response is parsed: the spider is open)
        should_follow = self._offsite.should_follow
        patterns = s.boost_patterns
        virtual = s.refused_links == "virtual"
        plain = s.internal_weight == s.external_weight == 1.0 and not virtual and not patterns
        page_host = urlparse_cached(response).hostname
        follows: dict[str | None, bool] = {}  # host -> Scrapy follows it (asked once per host)
        followed: list[Request] = []
        weights: list[float] = []
        refused: list[tuple[Request, float]] = []
        for o in out:
            if not isinstance(o, Request):
                continue
            host = urlparse_cached(o).hostname
            if o.dont_filter or o.meta.get("allow_offsite"):
                ok = True
            else:
                # (OffsiteMiddleware.should_follow reads the request's host name alone.)
                known = follows.get(host)
                if known is None:
                    known = follows[host] = should_follow(o, spider)
                ok = known
            if plain:
                if ok:
                    followed.append(o)
                continue
            weight = s.internal_weight if host == page_host else s.external_weight
            if not ok:
                if virtual:
                    refused.append((o, weight))
                continue
            followed.append(o)
            if patterns and any(p.search(o.url) for p in patterns):
                weight = boosted_weight(weight, s.boost)
            weights.append(weight)
        importance = scheduler.settle_visit(
            response.request,
            followed,
            weights=None if plain else weights,
            boosts=None,
            refused=refused,
            failed=failed,
        )
        if s.item_field and importance is not None:
            self._stamp(out, importance)

    def _stamp(self, out: list[Any], importance: float) -> None:
        """``OPIC_ITEM_FIELD``: the page's importance (just after its visit) into its items."""
        name = self.settings.item_field
        if name is None:
            return
        for o in out:
            if isinstance(o, Request) or not is_item(o):
                continue
            try:
                ItemAdapter(o)[name] = importance
            except Exception as exc:  # no such field (KeyError), a frozen dataclass...
                # Never lose the page's output over an annotation.
                if type(o) not in self._warned_field:
                    self._warned_field.add(type(o))
                    logger.warning(
                        "OPIC_ITEM_FIELD: cannot set %r on %s items (%s: %s); declare the "
                        "field to get the importance in them. (Logged once per item class.)",
                        name,
                        type(o).__name__,
                        type(exc).__name__,
                        exc,
                    )


class OpicDownloaderMiddleware:
    """Reports requests that end without a response (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicDownloaderMiddleware:
        prepare(crawler)
        return cls(crawler)

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is not None:
            scheduler.settle_failure(request, exception)
