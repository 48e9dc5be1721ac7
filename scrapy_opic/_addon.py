"""One-line setup through Scrapy's add-on mechanism: ``ADDONS = {"scrapy_opic.Addon": 0}``."""

from __future__ import annotations

from typing import Any


class Addon:
    """Installs the OPIC scheduler, both middlewares and the log-line extension at their
    documented positions, and for a Redis crawl the download handlers that look last before a
    request goes out (:mod:`~scrapy_opic._handler`). A position the project already gave one
    of them is kept, and a ``SCHEDULER`` set by the project (an OpicScheduler subclass...)
    wins over the add-on's."""

    def update_settings(self, settings: Any) -> None:
        from ._extensions import OpicLogStats
        from ._middlewares import OpicDownloaderMiddleware, OpicSpiderMiddleware

        settings.set("SCHEDULER", "scrapy_opic.OpicScheduler", "addon")
        for name, component, position in (
            ("SPIDER_MIDDLEWARES", OpicSpiderMiddleware, 75),
            ("DOWNLOADER_MIDDLEWARES", OpicDownloaderMiddleware, 540),
            ("EXTENSIONS", OpicLogStats, 500),
        ):
            settings.setdefault_in_component_priority_dict(name, component, position)
        if str(settings.get("OPIC_STORE", "")).strip().lower() == "redis":
            from ._sending import wrap_handlers

            wrap_handlers(settings)
