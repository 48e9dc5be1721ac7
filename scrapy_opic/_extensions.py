"""``OpicLogStats``: a periodic OPIC log line, like Scrapy's LogStats and on its interval.

Enabled by the add-on, or with ``EXTENSIONS = {"scrapy_opic.OpicLogStats": 500}``; off with
``OPIC_LOGSTATS = False`` (or ``LOGSTATS_INTERVAL = 0``). Every ``LOGSTATS_INTERVAL`` seconds it
logs the scheduler's :meth:`~scrapy_opic._scheduler.OpicScheduler.status_line`: the frontier's
figures and, with the embedded store, its current top page (one numpy pass over the pages'
estimates; a process of a Redis crawl sees only its own partitions' pages, so it names none).
Nothing on the per-request path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import task

from ._scheduler import OpicScheduler, prepare

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger("scrapy_opic")


class OpicLogStats:
    """Logs the OPIC scheduler's status line every ``interval`` seconds while a spider runs."""

    def __init__(self, crawler: Crawler, interval: float) -> None:
        self.crawler = crawler
        self.interval = interval
        self._task: task.LoopingCall | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicLogStats:
        interval = prepare(crawler).logstats_interval
        if interval <= 0:
            raise NotConfigured
        ext = cls(crawler, interval)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        self._task = task.LoopingCall(self.log, spider)
        self._task.start(self.interval, now=False)

    def spider_closed(self, spider: Spider, reason: str) -> None:
        if self._task is not None and self._task.running:
            self._task.stop()
        self._task = None

    def log(self, spider: Spider) -> None:
        scheduler = OpicScheduler.of(self.crawler)
        if scheduler is not None:
            logger.info(scheduler.status_line(), extra={"spider": spider})


__all__ = ["OpicLogStats"]
