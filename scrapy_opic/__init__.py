"""scrapy-opic: Adaptive OPIC (On-line Page Importance Computation) for Scrapy.

Add to a project's settings ``ADDONS = {"scrapy_opic.Addon": 0}``, or::

    SCHEDULER = "scrapy_opic.OpicScheduler"
    SPIDER_MIDDLEWARES = {"scrapy_opic.OpicSpiderMiddleware": 75}
    DOWNLOADER_MIDDLEWARES = {"scrapy_opic.OpicDownloaderMiddleware": 540}
    EXTENSIONS = {"scrapy_opic.OpicLogStats": 500}

The public API is this module's ``__all__`` (the Scrapy components, the settings error),
:mod:`scrapy_opic.export` (reading a crawl's state: importance per URL, exports), the engine
of :mod:`scrapy_opic.opic` (the paper's algorithm, no I/O, no Scrapy) and
:mod:`scrapy_opic.simulator` (offline experiments on link graphs). Modules whose name starts
with ``_`` are the plugin's own (the stores, the Scrapy adapter, the commands): their names
may change in any release.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "OpicSettingsError": "scrapy_opic._settings",
    "OpicScheduler": "scrapy_opic._scheduler",
    "OpicSpiderMiddleware": "scrapy_opic._middlewares",
    "OpicDownloaderMiddleware": "scrapy_opic._middlewares",
    "OpicLogStats": "scrapy_opic._extensions",
    "Addon": "scrapy_opic._addon",
}


def __getattr__(name: str) -> Any:
    # Scrapy is imported only when a Scrapy component is asked for: the algorithm and the
    # simulator stay importable (and fast to start) without it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


__all__ = [
    "Addon",
    "OpicDownloaderMiddleware",
    "OpicLogStats",
    "OpicScheduler",
    "OpicSettingsError",
    "OpicSpiderMiddleware",
    "__version__",
]
