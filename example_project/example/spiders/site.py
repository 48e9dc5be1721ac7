"""A generic spider: ``scrapy crawl site -a start_url=URL`` follows every in-domain link of its
HTML pages and yields one item (url, title) per page, in fetch order (a page that is not HTML, such
as JSON or an image, has no title and no links)."""

from __future__ import annotations

from urllib.parse import urlparse

import scrapy
from scrapy.linkextractors import LinkExtractor


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start_url: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if not start_url:
            raise ValueError("use: scrapy crawl site -a start_url=URL")
        self.start_urls = [start_url]
        self.allowed_domains = [urlparse(start_url).hostname]
        self.links = LinkExtractor()

    def parse(self, response):
        if not isinstance(response, scrapy.http.HtmlResponse):
            # JSON, an image, a PDF...: a page all the same, with no title and no links to read.
            yield {"url": response.url, "title": None}
            return
        yield {"url": response.url, "title": response.css("title::text").get()}
        for link in self.links.extract_links(response):
            yield response.follow(link.url, self.parse)
