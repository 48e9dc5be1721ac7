"""One benchmark crawl: ``python benchmarks/crawl_runner.py CONFIG.json``.

CONFIG: {"start_url", "order": "opic" | "default" | "bfs", "settings": {...}, "items", "stats"}.
Items carry the page's URL, the URLs that redirected to it, and its out-links, in fetch order.
"""

from __future__ import annotations

import json
import sys
from urllib.parse import urlparse

import scrapy
from scrapy.linkextractors import LinkExtractor

from scrapy_opic.localsite import crawl_to_files

ORDERS = {
    "opic": {
        "SCHEDULER": "scrapy_opic.OpicScheduler",
        "SPIDER_MIDDLEWARES": {"scrapy_opic.OpicSpiderMiddleware": 75},
        "DOWNLOADER_MIDDLEWARES": {"scrapy_opic.OpicDownloaderMiddleware": 540},
    },
    "default": {},  # Scrapy's scheduler: LIFO queues, depth-first
    "bfs": {
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
    },
}


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
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    settings = {"LOG_LEVEL": "WARNING", **ORDERS[config["order"]], **config.get("settings", {})}
    crawl_to_files(
        EvidenceSpider, settings, config["items"], config["stats"], start_url=config["start_url"]
    )


if __name__ == "__main__":
    main()
