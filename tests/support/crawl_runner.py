"""Run one crawl in this process and write its items and stats: the crawl tests and the benchmarks
start it in a subprocess of their own (a Twisted reactor starts once per process).

    python tests/support/crawl_runner.py CONFIG.json

CONFIG keys:

``start_url``, ``items``, ``stats``
    where to start, and where the items (JSON Lines) and the final stats (JSON) go;
``order``
    ``opic`` (default: the three settings lines), ``addon`` (the one-line setup), ``default``
    (Scrapy's own scheduler: LIFO, depth-first) or ``bfs`` (breadth-first: DEPTH_PRIORITY=1 with
    FIFO queues);
``spider``
    ``site`` (default: an item ``{url, title}`` per page, follows every link of the allowed hosts)
    or ``evidence`` (an item ``{url, aliases, links}`` per HTML page: the redirected URLs that led
    to it and its same-origin links, for the benchmarks to rebuild the crawled graph);
``settings``
    Scrapy settings on top of the order's;
``allowed``, ``raise_on``
    the site spider's allowed hosts (default 127.0.0.1) and URLs whose callback raises after
    yielding its links.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script

import scrapy  # noqa: E402
from scrapy.linkextractors import LinkExtractor  # noqa: E402

from scrapy_opic._scheduler import OpicScheduler  # noqa: E402

OPIC = {
    "SCHEDULER": "scrapy_opic.OpicScheduler",
    "SPIDER_MIDDLEWARES": {"scrapy_opic.OpicSpiderMiddleware": 75},
    "DOWNLOADER_MIDDLEWARES": {"scrapy_opic.OpicDownloaderMiddleware": 540},
    "EXTENSIONS": {"scrapy_opic.OpicLogStats": 500},
}
ORDERS = {
    "opic": OPIC,
    "addon": {"ADDONS": {"scrapy_opic.Addon": 0}},
    "default": {},
    "bfs": {
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
    },
}


class SlotBlindScheduler(OpicScheduler):
    """The OPIC scheduler without its politeness: every slot always has room (the politeness
    test's contrast: plain greedy)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.leases.full = _NeverFull()


class _NeverFull(set):
    """A set of full slots that stays empty: a slot-blind pop."""

    def add(self, slot) -> None:
        pass


class RewriteMiddleware:
    """A downloader middleware that answers a request for one URL of the setting
    ``TEST_REWRITE`` (``{from: to}``) with a new request built from scratch for the other URL, as
    a URL-canonicalizing middleware does: the request it was given is dropped, with no outcome
    that any middleware, errback or callback sees."""

    def __init__(self, rewrite: dict[str, str]) -> None:
        self.rewrite = rewrite

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.getdict("TEST_REWRITE"))

    def process_request(self, request, spider=None):
        target = self.rewrite.get(request.url)
        if target is not None:
            return scrapy.Request(target, callback=request.callback)
        return None


class CpuMeter:
    """An extension for the benchmarks: the CPU time of this process (all its threads) from the
    first response to the spider's close (0 without a response), in the stats as
    ``cpu/crawl_seconds`` (a crawl's cost without the start-up and shutdown of the process, and
    less sensitive than wall time to other work on the machine)."""

    def __init__(self, crawler) -> None:
        import time

        self.clock = time.process_time
        self.crawler = crawler
        self.start: float | None = None
        crawler.signals.connect(self.response_received, signal=scrapy.signals.response_received)
        crawler.signals.connect(self.spider_closed, signal=scrapy.signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def response_received(self, response, request, spider=None) -> None:
        if self.start is None:
            self.start = self.clock()

    def spider_closed(self, spider, reason) -> None:
        # (A process of a fleet may get no response at all: its crawl cost nothing, and every
        # reader of the stats finds the figure.)
        spent = 0.0 if self.start is None else self.clock() - self.start
        self.crawler.stats.set_value("cpu/crawl_seconds", spent)


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(
        self, start_url: str, allowed: list[str] | None = None, raise_on=(), start_when=None, **kw
    ) -> None:
        super().__init__(**kw)
        # (Several start URLs: a list, e.g. one site per host.)
        self.start_urls = [start_url] if isinstance(start_url, str) else list(start_url)
        self.start_when = start_when  # a file: the crawl starts once it exists
        self.allowed_domains = allowed or ["127.0.0.1"]
        self.links = LinkExtractor()
        self.raise_on = set(raise_on or ())  # URLs whose callback raises after its links

    async def start(self):
        if self.start_when:
            # (Processes started together wait for one another here: the test says when.)
            from scrapy.utils.defer import maybe_deferred_to_future
            from twisted.internet import reactor, task

            while not Path(self.start_when).exists():
                await maybe_deferred_to_future(task.deferLater(reactor, 0.05, lambda: None))
        for url in self.start_urls:
            yield scrapy.Request(url, dont_filter=True)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        for link in self.links.extract_links(response):
            yield response.follow(link.url, self.parse)
        if response.url in self.raise_on:
            raise ValueError("a callback that fails after yielding its links")


class EvidenceSpider(scrapy.Spider):
    name = "evidence"

    def __init__(self, start_url: str, **kw) -> None:
        super().__init__(**kw)
        self.start_urls = [start_url]
        self.allowed_domains = [urlparse(start_url).hostname]
        self.links = LinkExtractor()

    def parse(self, response):
        if not isinstance(response, scrapy.http.HtmlResponse):
            return
        # The site is one origin: links to the same host on another port (the Django docs
        # point at a development server on :8000) are not part of it.
        origin = urlparse(response.url).netloc
        links = [
            link.url
            for link in self.links.extract_links(response)
            if urlparse(link.url).netloc == origin
        ]
        yield {
            "url": response.url,
            "aliases": response.meta.get("redirect_urls", []),
            "links": links,
        }
        for url in links:
            yield response.follow(url, self.parse)


def main() -> None:
    from scrapy.crawler import CrawlerProcess

    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    spider_cls = EvidenceSpider if config.get("spider") == "evidence" else SiteSpider
    kwargs = {"start_url": config["start_url"]}
    if spider_cls is SiteSpider:
        kwargs.update(
            allowed=config.get("allowed"),
            raise_on=config.get("raise_on"),
            start_when=config.get("start_when"),
        )
    settings = {
        "FEEDS": {config["items"]: {"format": "jsonlines"}},
        "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
        "RETRY_TIMES": 1,
        **ORDERS[config.get("order", "opic")],
        **config.get("settings", {}),
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spider_cls)
    process.crawl(crawler, **kwargs)
    process.start()
    values = crawler.stats.get_stats().items()
    with open(config["stats"], "w") as fh:
        json.dump({k: v for k, v in values if isinstance(v, (int, float, str))}, fh)


if __name__ == "__main__":
    main()
