"""A crawl that cannot start because of what the user gave it ends with one error line.

A bad ``OPIC_*`` value, a damaged or foreign state, a state in use by another crawl, an
unreachable Redis server: each is an exception whose message is one line that says what is wrong
and what to do. Raised while Scrapy builds the crawl, such an exception would reach the user as a
traceback logged by the event loop (asyncio's "Task exception was never retrieved", or Twisted's
"Unhandled error in Deferred"), tens of lines around the one that matters.
:func:`raise_in_one_line` raises it so that the failed start is logged as that one line instead
(logger ``scrapy_opic``, level ERROR); Scrapy still counts the crawl as failed (``scrapy crawl``
exits with 1). Any other exception is logged exactly as before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NoReturn

logger = logging.getLogger("scrapy_opic")

#: The messages of the one-line failures raised so far in this process (Twisted's log carries
#: a failure's text, not the exception object).
_MESSAGES: set[str] = set()
_TWISTED_FILTER: logging.Filter | None = None


#: The close reason of a crawl whose store failed (a full disk...).
STORE_FAILED = "opic_store_failed"


def stop_crawl(
    crawler: Any, exc: BaseException, jobdir: bool, closing: bool, kept: bool = True
) -> None:
    """A crawl's store failed for good (a full disk, an I/O error): one error line, and the
    spider closes (unless ``closing`` already). Nothing more is written, so the state stays
    that of its last commit (resumable with its JOBDIR once the cause is gone; ``kept``
    False: no state is left, as the error says); ``scrapy crawl`` exits with 1, as for a
    crawl that failed to start."""
    from scrapy import signals
    from scrapy.utils.defer import deferred_from_coro

    if not kept:
        logger.error("OPIC: %s: the crawl stops", exc)
    else:
        resume = " (resume it with the same JOBDIR once the cause is gone)" if jobdir else ""
        logger.error(
            "OPIC: %s: the crawl stops; its state is that of its last checkpoint%s", exc, resume
        )

    def failed() -> None:
        # Scrapy's crawler process counts a crawl whose crawler has no spider at the end as one
        # that failed (bootstrap_failed): the exit code is then 1. (The engine has stopped.)
        crawler.spider = None

    crawler.signals.connect(failed, signal=signals.engine_stopped, weak=False)
    if not closing:
        d = deferred_from_coro(crawler.engine.close_spider_async(reason=STORE_FAILED))
        d.addErrback(lambda failure: None)  # (a spider closing already: nothing to do)


def is_one_line(exc: BaseException) -> bool:
    return bool(getattr(exc, "_opic_one_line", False))


def raise_in_one_line(exc: Exception) -> NoReturn:
    """Raise ``exc`` (a failure to start the crawl, with a one-line message) so that it is
    logged as that line, without its traceback."""
    exc._opic_one_line = True  # type: ignore[attr-defined]
    _MESSAGES.add(str(exc))
    _install_asyncio_handler()
    _install_twisted_filter()
    raise exc


def _install_asyncio_handler() -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no running loop (Twisted's CrawlerProcess): the log filter's case
        return
    previous = loop.get_exception_handler()
    if getattr(previous, "_opic", False):
        return

    def handler(loop: Any, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is not None and is_one_line(exc):
            logger.error("%s", exc)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler._opic = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


class _TwistedFailureFilter(logging.Filter):
    """On Scrapy's ``twisted`` logger: the unhandled failure of a one-line error becomes that
    line, and the "Unhandled error in Deferred:" header before it goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _MESSAGES:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_one_line(exc):
            record.msg, record.args = "%s", (str(exc),)
            record.name = logger.name
            record.levelno, record.levelname = logging.ERROR, "ERROR"
            record.exc_info = record.exc_text = None
            return True
        text = record.getMessage()
        if text.strip() == "Unhandled error in Deferred:":
            return False
        for message in _MESSAGES:
            if message in text and text != message:
                record.name = logger.name
                record.msg, record.args = "%s", (message,)
                record.levelno, record.levelname = logging.ERROR, "ERROR"
                record.exc_info = record.exc_text = None
                return True
        return True


def _install_twisted_filter() -> None:
    global _TWISTED_FILTER
    if _TWISTED_FILTER is None:
        _TWISTED_FILTER = _TwistedFailureFilter()
        logging.getLogger("twisted").addFilter(_TWISTED_FILTER)


__all__ = ["is_one_line", "raise_in_one_line"]
