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

In a continuous crawl that refetches by freshness (``OPIC_REFETCH``), the downloader middleware
also watches change. A refetch carries what the page's last full response showed (its request's
``opic_validators`` meta: URL, ETag, Last-Modified, content signature); the middleware sends
them as ``If-None-Match`` / ``If-Modified-Since`` (``OPIC_CONDITIONAL``; a header the request
already has is left as it is, and a host whose validators disagree with the content is not
sent them, see :class:`~scrapy_opic.opic.change.ValidatorAudit`). A 304 to validators it sent,
or a 200 whose signature (``OPIC_SIGNATURE``) is that of the last full response, is the visit
of an unchanged page: its cash goes over the links of its last parsed visit, and its response
reaches neither callback nor errback (the spider middleware raises
:class:`~scrapy_opic._scheduler.NotModified` before the callback, and the errback wrapper
swallows it) unless ``OPIC_UNCHANGED_CALLBACK``. A 304 to a request that sent no validator is
no answer: it goes on, and Scrapy's HttpErrorMiddleware makes it a failed fetch. Next to Scrapy's
HttpCacheMiddleware (900: its ``process_request`` runs after this one's), the cache's own
validators replace these when it holds a copy, and the cached copy it returns for a 304 is a
200 whose signature says "unchanged"; without a copy the 304 comes here.
"""

from __future__ import annotations

import logging
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter, is_item
from scrapy import Request, signals
from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware
from scrapy.utils.httpobj import urlparse_cached

from ._requests import (
    SEEN_META,
    SENT_META,
    UNCHANGED_META,
    VALIDATORS_META,
    NotModified,
    Seen,
    origin_of,
)
from ._scheduler import OpicScheduler, prepare
from ._settings import OpicSettings
from .opic.change import Snapshot, ValidatorAudit
from .opic.contract import boosted_weight
from .opic.signature import signature

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import AsyncIterator, Iterable, Iterator

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Seconds between two reads of the crawl's verdicts on validators (see
#: OpicDownloaderMiddleware).
VERDICTS_EVERY = 10.0
logger = logging.getLogger(__name__)


class OpicSpiderMiddleware:
    """Pays a parsed page's cash to the links its callback follows (see the module docstring)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        # Every followed link weighs 1, a refused one nothing: no host to compare, no pattern.
        self._plain = settings.internal_weight == settings.external_weight == 1.0 and not (
            settings.refused_links == "virtual" or settings.boost_patterns
        )
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

    def process_spider_input(self, response: Response, spider: Spider | None = None) -> None:
        # An unchanged page (the downloader middleware did its visit): no callback. Raised
        # here, not in the downloader middleware, so that Scrapy counts the response as one
        # (its stats, CLOSESPIDER_PAGECOUNT); the request's errback wrapper swallows it.
        if response.meta.get(UNCHANGED_META):
            raise NotModified(f"unchanged: {response.url}")

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
        if self._plain:
            followed = [o for o, _host, ok in self._requests(out) if ok]
            importance = scheduler.settle_visit(response.request, followed, None, failed=failed)
        else:
            weighed = self._weighed(response, out)  # (followed, weights, refused)
            importance = scheduler.settle_visit(response.request, *weighed, failed=failed)
        if self.settings.item_field and importance is not None:
            self._stamp(out, importance)

    def _weighed(
        self, response: Response, out: list[Any]
    ) -> tuple[list[Request], list[float], list[tuple[Request, float]]]:
        """The requests of ``out`` Scrapy follows with their weights (internal or external,
        boosted), and the refused ones with theirs (none unless refused links are virtual)."""
        s = self.settings
        virtual = s.refused_links == "virtual"
        page_host = urlparse_cached(response).hostname
        followed: list[Request] = []
        weights: list[float] = []
        refused: list[tuple[Request, float]] = []
        for o, host, ok in self._requests(out):
            weight = s.internal_weight if host == page_host else s.external_weight
            if not ok:
                if virtual:
                    refused.append((o, weight))
                continue
            followed.append(o)
            if any(p.search(o.url) for p in s.boost_patterns):
                weight = boosted_weight(weight, s.boost)
            weights.append(weight)
        return followed, weights, refused

    def _requests(self, out: list[Any]) -> Iterator[tuple[Request, str | None, bool]]:
        """The requests of a callback's output, each with its host and whether Scrapy follows
        it (OffsiteMiddleware's answer, asked once per host; ``dont_filter`` and
        ``allow_offsite`` requests always)."""
        spider = self.crawler.spider
        assert spider is not None  # (a response is parsed: the spider is open)
        should_follow = self._offsite.should_follow
        # Host and answer per URL origin (``scheme://netloc``, of which the host name is a
        # function), so that a page's many links to a few hosts parse a few URLs, not all.
        # (OffsiteMiddleware.should_follow reads the request's host name alone.)
        origins: dict[str, tuple[str | None, bool]] = {}
        for o in out:
            if not isinstance(o, Request):
                continue
            origin = origin_of(o.url)
            known = origins.get(origin) if origin else None
            if known is None:
                host = urlparse_cached(o).hostname
                known = (host, should_follow(o, spider))
                if origin:
                    origins[origin] = known
            if o.dont_filter or o.meta.get("allow_offsite"):
                yield o, known[0], True
            else:
                yield o, known[0], known[1]

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


def _http_time(value: bytes | None) -> float | None:
    """An HTTP date as seconds since the epoch (None if absent or not a date)."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value.decode("latin-1")).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class OpicDownloaderMiddleware:
    """Reports requests that end without a response, and refetches that found their page
    unchanged (see the module docstring)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self.watch = settings.continuous and settings.refetch == "freshness"
        self.audit = ValidatorAudit()
        # The verdicts are the crawl's, kept in its store: a host found to lie is not trusted
        # again after a resume, nor by the process that crawls it next. Read now and then
        # (another process may have found one of the hosts this one takes over).
        self._verdicts_read = -VERDICTS_EVERY
        self._unreadable: set[str] = set()  # (hosts whose kept verdict was said unreadable)

    def _read_verdicts(self, now: float) -> None:
        self._verdicts_read = now
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is None:
            return
        for host, verdict in scheduler.validator_verdicts().items():
            try:
                self.audit.merge(host, verdict)
            except ValueError as exc:
                if host not in self._unreadable:
                    self._unreadable.add(host)
                    logger.warning("OPIC: the kept verdict on %s's validators is unreadable "
                                   "(%s): they are judged afresh", host, exc)  # fmt: skip

    def _judged(self, host: str, before: tuple[bool, ...], dates_before: bool) -> None:
        """``host``'s verdict changed from ``before`` (:meth:`ValidatorAudit.distrusted`; its
        ``Last-Modified`` agreed with its content: ``dates_before``): said once, dated if it
        lied, kept."""
        audit = self.audit
        lied = audit.lie_found(host) is not None
        audit.judge(host, time.time())
        for kind, was, now_bad in zip(("ETag", "Last-Modified"), before, audit.distrusted(host)):
            if now_bad and not was and host not in audit.false_304:
                logger.warning(
                    "OPIC: %s's %s disagrees with its content (the same for changed pages, or "
                    "new for unchanged ones): it is no longer sent",
                    host,
                    kind,
                )
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is not None:
            scheduler.judge_validators(host, audit.verdict(host))
            # A lie found: the time thought unchanged goes; a Last-Modified that disagrees
            # with the content (a lie, or noise): the changes it dated at first looks go. A
            # server that only answers 304 falsely dates its full responses truly: its dates
            # stay (without them its pages' rates would be learned low, static ones high).
            unchanged = not lied and audit.lie_found(host) is not None
            dated = dates_before and not audit.agrees(host, "last_modified")
            if unchanged or dated:
                scheduler.forget_lies(host, unchanged=unchanged, dated=dated)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicDownloaderMiddleware:
        return cls(crawler, prepare(crawler))

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        meta = request.meta
        if not self.watch or "opic_id" not in meta:
            return
        headers = request.headers
        for name in meta.pop(SENT_META, ()):  # (a retry or a redirect: decided again)
            headers.pop(name, None)
        kept = meta.get(VALIDATORS_META)
        if self.settings.conditional and kept and kept[0] == request.url:
            now = time.monotonic()
            if now - self._verdicts_read >= VERDICTS_EVERY:
                self._read_verdicts(now)
            self._send_validators(request, kept)

    def _send_validators(self, request: Request, kept: tuple) -> None:
        """Send the page's ``kept`` validators as conditional headers: those its host's audit
        allows and the request does not have already (their names go in its meta)."""
        _url, etag, modified, _sig = kept
        headers = request.headers
        send_etag, send_modified = self.audit.conditional(urlparse_cached(request).hostname)
        sent = []
        if etag and send_etag and b"If-None-Match" not in headers:
            headers[b"If-None-Match"] = etag
            sent.append(b"If-None-Match")
        # (A Last-Modified that is no HTTP date is no validator: a server cannot compare it.)
        if (
            send_modified
            and _http_time(modified) is not None
            and b"If-Modified-Since" not in headers
        ):
            headers[b"If-Modified-Since"] = modified
            sent.append(b"If-Modified-Since")
        if sent:
            request.meta[SENT_META] = tuple(sent)

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        meta = request.meta
        if not self.watch or "opic_id" not in meta:
            return response
        status = response.status
        if status == 304:
            self._on_304(request)
            return response
        if not 200 <= status < 300:
            return response
        mode = self.settings.signature
        sig = None if mode == "off" else signature(response.body, mode)
        etag = response.headers.get(b"ETag")
        modified = response.headers.get(b"Last-Modified")
        host = urlparse_cached(request).hostname
        changed = self._changed(request, host, etag, modified, sig)
        since = _http_time(modified) if self.audit.agrees(host, "last_modified") else None
        meta[SEEN_META] = Seen(request.url, etag, modified, sig, changed, since)
        if changed is False:
            self._unchanged(request)
        return response

    def _on_304(self, request: Request) -> None:
        """A 304: the page is unchanged if the request asked (it sent validators, ours or its
        own); a 304 nobody asked for is no answer (HttpErrorMiddleware fails it)."""
        h = request.headers
        sent = request.meta.get(SENT_META)
        if sent:
            self._refetched(urlparse_cached(request).hostname, True, False)
        if sent or b"If-None-Match" in h or b"If-Modified-Since" in h:
            self._unchanged(request)

    def _changed(
        self, request: Request, host: str | None, etag: Any, modified: Any, sig: int | None
    ) -> bool | None:
        """Whether the page changed since its last full response (None if none was kept, or
        for a redirect target: another page's); both signatures audit the host's validators."""
        kept = request.meta.get(VALIDATORS_META)
        if not kept or kept[0] != request.url:
            return None
        if sig is None or kept[3] is None:
            return True
        audit = self.audit
        before, dates_before = audit.distrusted(host), audit.agrees(host, "last_modified")
        audit.observe(host, Snapshot(kept[1], kept[2], kept[3]), Snapshot(etag, modified, sig))
        self._refetched(host, bool(request.meta.get(SENT_META)), sig != kept[3])
        judged = (audit.distrusted(host), audit.agrees(host, "last_modified"))
        if judged != (before, dates_before) and host is not None:
            self._judged(host, before, dates_before)
        return sig != kept[3]

    def _refetched(self, host: str | None, conditional: bool, changed: bool) -> None:
        if self.audit.refetched(host, conditional, changed):
            logger.warning(
                "OPIC: %s answers 304 (unchanged) to conditional requests for pages that "
                "changed: its validators are no longer sent",
                host,
            )

    def _unchanged(self, request: Request) -> None:
        """The page is unchanged: its visit, then (unless the callback is wanted) a mark that
        keeps the response from the callback (see :class:`OpicSpiderMiddleware`)."""
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is None or not scheduler.settle_unchanged(request):
            return
        if not self.settings.unchanged_callback:
            request.meta[UNCHANGED_META] = True

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is not None:
            scheduler.settle_failure(request, exception)
