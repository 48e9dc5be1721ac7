"""scrapy-opic: Adaptive OPIC (On-line Page Importance Computation) for Scrapy.

Add to a project's settings::

    SCHEDULER = "scrapy_opic.OpicScheduler"
    SPIDER_MIDDLEWARES = {"scrapy_opic.OpicSpiderMiddleware": 75}
    DOWNLOADER_MIDDLEWARES = {"scrapy_opic.OpicDownloaderMiddleware": 540}

or, with Scrapy's add-ons, ``ADDONS = {"scrapy_opic.Addon": 0}``. The Scrapy-free engine is
in :mod:`scrapy_opic.core`.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "OpicScheduler": "scrapy_opic.scheduler",
    "OpicSpiderMiddleware": "scrapy_opic.middlewares",
    "OpicDownloaderMiddleware": "scrapy_opic.middlewares",
    "Addon": "scrapy_opic.addon",
}


def __getattr__(name: str) -> Any:
    # Scrapy is imported only when a Scrapy component is asked for: the core and the simulator
    # stay importable (and fast to start) without it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


__all__ = [
    "Addon",
    "OpicDownloaderMiddleware",
    "OpicScheduler",
    "OpicSpiderMiddleware",
    "__version__",
]
