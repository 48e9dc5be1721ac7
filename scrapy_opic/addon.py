"""One-line setup through Scrapy's add-on mechanism: ``ADDONS = {"scrapy_opic.Addon": 0}``."""

from __future__ import annotations

from typing import Any


class Addon:
    """Installs the OPIC scheduler and both middlewares at their documented positions."""

    def update_settings(self, settings: Any) -> None:
        settings.set("SCHEDULER", "scrapy_opic.OpicScheduler", "addon")
        settings["SPIDER_MIDDLEWARES"]["scrapy_opic.OpicSpiderMiddleware"] = 75
        settings["DOWNLOADER_MIDDLEWARES"]["scrapy_opic.OpicDownloaderMiddleware"] = 540
