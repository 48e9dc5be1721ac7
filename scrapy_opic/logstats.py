"""A periodic OPIC log line, like Scrapy's LogStats and on the same interval (LOGSTATS_INTERVAL)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from twisted.internet import task

if TYPE_CHECKING:  # pragma: no cover
    from .scheduler import SchedulerBase

logger = logging.getLogger("scrapy_opic")


class OpicLogStats:
    """Logs, every ``interval`` seconds, the scheduler's :meth:`status_line` (the frontier's
    figures; with the embedded store also its current top page, one numpy pass over the pages'
    estimates, ~10 ms per million pages): nothing on the per-request path."""

    def __init__(self, scheduler: SchedulerBase, interval: float) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self._task: task.LoopingCall | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = task.LoopingCall(self.log)
            self._task.start(self.interval, now=False)

    def stop(self) -> None:
        if self._task is not None and self._task.running:
            self._task.stop()
        self._task = None

    def line(self) -> str:
        return self.scheduler.status_line()

    def log(self) -> None:
        logger.info(self.line(), extra={"spider": self.scheduler.spider})
