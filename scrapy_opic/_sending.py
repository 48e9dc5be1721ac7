"""Where a Redis crawl's download handlers (:mod:`~scrapy_opic._handler`) are installed and
what they wrap: read by the add-on, the handlers and the scheduler, without importing them."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: The setting that holds the wrapped handlers: ``{scheme: handler class or its path}``.
WRAPPED = "_OPIC_WRAPPED_DOWNLOAD_HANDLERS"
#: The handlers, by scheme.
HANDLERS = {
    "http": "scrapy_opic._handler.OpicHttpHandler",
    "https": "scrapy_opic._handler.OpicHttpsHandler",
}


def _name(handler: Any) -> str | None:
    if handler is None or isinstance(handler, str):
        return handler
    return f"{handler.__module__}.{handler.__qualname__}"


def wrapped_handler(settings: Any, scheme: str) -> Any:
    """The handler (or its path) that the handler for ``scheme`` wraps: the project's, else
    Scrapy's, read when the crawl starts (Scrapy may change its own after the add-ons ran, as
    for a crawl without a Twisted reactor)."""
    return settings.getdict(WRAPPED).get(scheme) or settings["DOWNLOAD_HANDLERS_BASE"][scheme]


def installed(settings: Any) -> bool:
    """Whether the ``http`` handler of ``settings`` is the OPIC one."""
    return _name(settings.getwithbase("DOWNLOAD_HANDLERS").get("http")) == HANDLERS["http"]


def warn_unguarded(settings: Any) -> None:
    """One warning for a Redis crawl whose handlers are not the OPIC ones."""
    if not installed(settings):
        logger.warning(
            "OPIC: a Redis crawl without the add-on (ADDONS = {'scrapy_opic.Addon': 0}): a "
            "process that stalls past OPIC_REDIS_LEASE sends the requests it had queued for "
            "hosts that other processes crawl by then"
        )


def wrap_handlers(settings: Any) -> None:
    """Install the OPIC handlers for ``http`` and ``https`` in ``settings`` (at the priority
    the project gave ``DOWNLOAD_HANDLERS``, or the add-on's), keeping the project's own ones
    to wrap; a scheme the project disabled (None) stays so."""
    from scrapy.settings import SETTINGS_PRIORITIES

    current = settings.getwithbase("DOWNLOAD_HANDLERS")
    handlers = dict(settings.getdict("DOWNLOAD_HANDLERS"))  # (the project's)
    wrapped = {}
    for scheme, ours in HANDLERS.items():
        name = _name(current.get(scheme))
        if name is None or name == ours:
            continue
        if handlers.get(scheme) is not None:
            wrapped[scheme] = handlers[scheme]
        handlers[scheme] = ours
    priority = max(settings.getpriority("DOWNLOAD_HANDLERS") or 0, SETTINGS_PRIORITIES["addon"])
    settings.set(WRAPPED, wrapped, priority)
    settings.set("DOWNLOAD_HANDLERS", handlers, priority)
