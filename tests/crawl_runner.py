"""Run one crawl in this process and write its items and stats (used by the crawl tests).

    python tests/crawl_runner.py CONFIG.json

CONFIG: {"start_url": ..., "settings": {...}, "items": path, "stats": path}
"""

from __future__ import annotations

import json
import sys

import scrapy
from scrapy.linkextractors import LinkExtractor

from scrapy_opic.localsite import crawl_to_files
from scrapy_opic.scheduler import OpicScheduler


class SlotBlindScheduler(OpicScheduler):
    """The OPIC scheduler without its politeness: every slot always has room (the politeness
    test's contrast: plain greedy)."""

    def _has_room(self, slot) -> bool:
        return True


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str, allowed: list[str] | None = None, raise_on=(), **kw) -> None:
        super().__init__(**kw)
        self.start_urls = [start_url]
        self.allowed_domains = allowed or ["127.0.0.1"]
        self.links = LinkExtractor()
        self.raise_on = set(raise_on or ())  # URLs whose callback raises after its links

    def parse(self, response):
        yield {"url": response.url, "title": response.css("title::text").get()}
        for link in self.links.extract_links(response):
            yield response.follow(link.url, self.parse)
        if response.url in self.raise_on:
            raise ValueError("a callback that fails after yielding its links")


def main() -> None:
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    settings = {
        "SCHEDULER": "scrapy_opic.OpicScheduler",
        "SPIDER_MIDDLEWARES": {"scrapy_opic.OpicSpiderMiddleware": 75},
        "DOWNLOADER_MIDDLEWARES": {"scrapy_opic.OpicDownloaderMiddleware": 540},
        "LOG_LEVEL": "INFO",
        "RETRY_TIMES": 1,
    }
    if config.get("addon"):  # the one-line setup instead of the three settings
        for name in ("SCHEDULER", "SPIDER_MIDDLEWARES", "DOWNLOADER_MIDDLEWARES"):
            settings.pop(name)
        settings["ADDONS"] = {"scrapy_opic.Addon": 0}
    settings.update(config.get("settings", {}))
    crawl_to_files(
        SiteSpider,
        settings,
        config["items"],
        config["stats"],
        start_url=config["start_url"],
        allowed=config.get("allowed"),
        raise_on=config.get("raise_on"),
    )


if __name__ == "__main__":
    main()
