"""What the OPIC scheduler tells Scrapy's stats and log.

The per-request counters (``opic/*``, ``scheduler/enqueued``, ``scheduler/dequeued``,
``dupefilter/filtered``) are added to Scrapy's stats collector periodically and at close, with
the crawl's figures (``opic/crawl/*`` for a crawl shared by several processes): a stats call per
event would cost more than the pop itself.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request

    from ._backends.crawl import Crawl

logger = logging.getLogger("scrapy_opic._scheduler")

#: Seconds between two scans of every page for the top page of the stats and the log line.
TOP_PAGE_SECONDS = 30.0


def log_opening(s: Any, where: str) -> None:
    """The scheduler's first lines: the crawl's parameters and where its state is."""
    mode = "continuous" if s.continuous else "one-pass"
    logger.info(
        "OPIC scheduler (%s, epsilon=%s, refresh=%s, window=%s, %s crawl), state %s",
        *(s.strategy, s.epsilon, s.refresh, s.window, mode, where),
    )
    if s.boost_patterns:
        patterns = ", ".join(repr(p.pattern) for p in s.boost_patterns)
        logger.info("OPIC boosts URLs matching %s (OPIC_BOOST=%s)", patterns, s.boost)


class CrawlStats:
    """The counters of one scheduler, and the figures of its crawl (see the module docstring).

    :param stats: Scrapy's stats collector.
    :param where: where Scrapy's stats say a request waits (``memory``, ``disk``, ``redis``).
    :param debug: ``DUPEFILTER_DEBUG``: a debug line for every duplicate, not the first only.
    """

    def __init__(self, stats: Any, where: str = "memory", debug: bool = False) -> None:
        self.stats = stats
        self.where = where
        self.debug = debug
        #: Counters of the per-request path, added to Scrapy's stats now and then.
        self.counts: defaultdict[str, int] = defaultdict(int)
        self._logged_duplicate = False
        self._top: tuple[str, float] | None = None
        self._top_at = self._top_cost = 0.0

    def enqueued(self, where: str | None = None) -> None:
        self.counts["scheduler/enqueued"] += 1
        self.counts[f"scheduler/enqueued/{where or self.where}"] += 1

    def dequeued(self, where: str | None = None) -> None:
        self.counts["scheduler/dequeued"] += 1
        self.counts[f"scheduler/dequeued/{where or self.where}"] += 1

    def duplicate(self, request: Request, spider: Any) -> None:
        """What Scrapy's RFPDupeFilter says of a duplicate: the ``dupefilter/filtered`` stat and
        a debug line (the first only, or all with DUPEFILTER_DEBUG). The frontier refused it,
        not a project's own dupefilter: that one's ``log()`` is for the duplicates it saw."""
        self.counts["opic/duplicates"] += 1
        self.counts["dupefilter/filtered"] += 1
        if self.debug or not self._logged_duplicate:
            self._logged_duplicate = True
            logger.debug(
                "Filtered duplicate request: %(request)s"
                + ("" if self.debug else " - no more duplicates will be shown"),
                {"request": request},
                extra={"spider": spider},
            )

    def update(self, crawl: Crawl, closing: bool = False) -> dict[str, float]:
        """Add the counters to Scrapy's stats and set the crawl's figures, which it returns.
        O(pages) for the embedded store (its top page): called periodically and at close,
        never per request."""
        for name, n in self.counts.items():
            self.stats.inc_value(name, n)
        self.counts.clear()
        prefix = "opic/crawl/" if crawl.shared else "opic/"
        figures = crawl.figures()
        for name, value in figures.items():
            self.stats.set_value(prefix + name, value)
        if crawl.shared:
            self.stats.set_value("opic/round_trips", crawl.round_trips)
            self.stats.set_value("opic/late_outcomes", crawl.fleet.late_outcomes)
            self.stats.set_value("opic/doubts_ended", crawl.fleet.doubts_ended)
            return figures
        top = self.top_page(crawl, fresh=closing)
        if top is not None:
            self.stats.set_value("opic/top_page", top[0])
            self.stats.set_value("opic/top_importance", top[1])
        if closing:
            self.stats.set_value("opic/total_cash", crawl.total_cash())
        return figures

    def top_page(self, crawl: Crawl, fresh: bool = False) -> tuple[str, float] | None:
        """The crawl's top page, found again (a scan of every page) at most every
        :data:`TOP_PAGE_SECONDS`, and no more often than 50 times the last scan took: its stats
        and log line cost a few percent of a crawl of tens of millions of pages at most.
        ``fresh``: found now (at close)."""
        now = time.monotonic()
        due = self._top_at + max(TOP_PAGE_SECONDS, 50 * self._top_cost)
        if fresh or self._top_at == 0.0 or now >= due:
            self._top = crawl.top_page()
            self._top_at = time.monotonic()
            self._top_cost = self._top_at - now
        return self._top

    def status_line(self, crawl: Crawl, in_flight: int) -> str:
        """The periodic OPIC log line (:class:`~scrapy_opic._extensions.OpicLogStats`);
        ``in_flight``: this process's pages in flight."""
        f = crawl.figures()
        line = "OPIC" + (f" (Redis, {f['workers']} processes)" if crawl.shared else "")
        failed = f.get("failed_visits")
        line += (
            f": {f['fetched']} pages fetched ({f['visits']} visits"
            + (f", {failed} of them failed" if failed else "")
            + f"), {f['pages']} known, {f['pending']} pending"
        )
        if crawl.shared:
            line += f", {f['leases']} in flight in the crawl"
        line += (
            f"; G={f['G']:.4f}, error factor 1/G={f['error_factor']:.4f}, virtual cash "
            f"{f['virtual_cash']:.4f}"
        )
        if crawl.shared:  # (no top page: this process sees only its partitions')
            return line + f"; this process: {in_flight} in flight, {crawl.round_trips} round trips"
        top = self.top_page(crawl)
        if top is not None:
            line += f"; top page: {top[0]} ({top[1]:.4f})"
        return line
