"""The last look before a request of a Redis crawl goes out: download handlers that wrap the ones
Scrapy would use for ``http`` and ``https`` (its own, or a project's, such as a browser's).

A request waits in Scrapy's downloader for its host's download delay after the scheduler handed
it out. A process that stalls meanwhile (stopped, or starved of CPU) past its partitions' lease
would, running again, send requests for pages whose hosts another process crawls by then: a
second fetch of the page, and two processes' requests to one host closer than its delay. Scrapy
has no other hook at the moment of sending (its downloader middlewares run before the delay), so
these handlers ask the scheduler's :meth:`~scrapy_opic._scheduler.OpicScheduler.may_send` there:
a request it refuses is not sent (it fails with ``IgnoreRequest``, as a request a middleware
drops) and its page waits again in its partition, wherever that is now. A request also waits
there until the record of its page's lease is durable in the store
(:meth:`~scrapy_opic._scheduler.OpicScheduler.until_durable`): a process that takes the
partition over then holds the page in doubt while the sender may still tell its outcome,
rather than fetch it a second time.

The add-on installs them for ``OPIC_STORE = "redis"``, keeping the handlers they wrap in
:data:`~scrapy_opic._sending.WRAPPED` (Scrapy's documented way for an add-on to fall back on
another handler).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from scrapy.core.downloader.handlers import DownloadHandlers
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.misc import build_from_crawler, load_object

from ._scheduler import OpicScheduler
from ._sending import wrapped_handler

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

#: Why a request was not sent.
REFUSED = "OPIC: not sent: its partition's lease may have passed to another process"

#: Scrapy 2.14+ awaits a handler's coroutines; earlier ones take Deferreds.
_ASYNC = hasattr(DownloadHandlers, "download_request_async")


class _Wrapper:
    """A scheme's handler, asked :meth:`OpicScheduler.may_send` first."""

    lazy = True  # (the wrapped handler is made with this one, at the scheme's first request)
    scheme = ""

    def __init__(self, crawler: Crawler, wrapped: Any) -> None:
        self.crawler = crawler
        self.wrapped = wrapped

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Any:
        path = wrapped_handler(crawler.settings, cls.scheme)
        return cls(crawler, build_from_crawler(load_object(path), crawler))

    def _refused(self, request: Request) -> bool:
        scheduler = OpicScheduler.of(self.crawler)
        return scheduler is not None and not scheduler.may_send(request)

    def _durable(self, request: Request) -> Any:
        """None if ``request`` may go out now, else a Deferred firing with whether it may once
        the record of its lease is durable (:meth:`OpicScheduler.until_durable`)."""
        scheduler = OpicScheduler.of(self.crawler)
        return scheduler.until_durable(request) if scheduler is not None else None


if _ASYNC or TYPE_CHECKING:

    class _Guard(_Wrapper):
        async def download_request(self, request: Request) -> Response:
            if self._refused(request):
                raise IgnoreRequest(REFUSED)
            waiting = self._durable(request)
            if waiting is not None and not (
                await maybe_deferred_to_future(waiting) and not self._refused(request)
            ):
                raise IgnoreRequest(REFUSED)
            send = self.wrapped.download_request
            if inspect.iscoroutinefunction(send):
                return await send(request)
            return await maybe_deferred_to_future(send(request, self.crawler.spider))

        async def close(self) -> None:
            close = getattr(self.wrapped, "close", None)
            result = close() if close is not None else None
            if inspect.isawaitable(result):
                await result
            elif result is not None:  # (a Deferred)
                await maybe_deferred_to_future(result)

else:  # pragma: no cover (Scrapy 2.13)
    from twisted.internet import defer

    class _Guard(_Wrapper):  # type: ignore[no-redef]
        def download_request(self, request: Request, spider: Any) -> Any:
            if self._refused(request):
                return defer.fail(IgnoreRequest(REFUSED))
            waiting = self._durable(request)
            if waiting is None:
                return self.wrapped.download_request(request, spider)

            def send(durable: bool) -> Any:
                if not durable or self._refused(request):
                    raise IgnoreRequest(REFUSED)
                return self.wrapped.download_request(request, spider)

            return waiting.addCallback(send)

        def close(self) -> Any:
            close = getattr(self.wrapped, "close", None)
            return close() if close is not None else None


class OpicHttpHandler(_Guard):
    """The ``http`` handler of a Redis crawl (see the module docstring)."""

    scheme = "http"


class OpicHttpsHandler(_Guard):
    """The ``https`` handler of a Redis crawl (see the module docstring)."""

    scheme = "https"
