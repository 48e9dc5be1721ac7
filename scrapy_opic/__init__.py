"""scrapy-opic: Adaptive OPIC (On-line Page Importance Computation) for Scrapy.

Add to a project's settings ``ADDONS = {"scrapy_opic.Addon": 0}``, or::

    SCHEDULER = "scrapy_opic.OpicScheduler"
    SPIDER_MIDDLEWARES = {"scrapy_opic.OpicSpiderMiddleware": 75}
    DOWNLOADER_MIDDLEWARES = {"scrapy_opic.OpicDownloaderMiddleware": 540}
    EXTENSIONS = {"scrapy_opic.OpicLogStats": 500}

Layers, each depending only on those before it: :mod:`scrapy_opic.opic` (the paper's algorithm,
no I/O, no Scrapy), :mod:`scrapy_opic.backends` (where a frontier lives: sqlite, Redis),
:mod:`scrapy_opic.simulator` (offline experiments on link graphs), and the Scrapy adapter
(:mod:`~scrapy_opic.settings`, :mod:`~scrapy_opic.state`, :mod:`~scrapy_opic.scheduler`,
:mod:`~scrapy_opic.middlewares`, :mod:`~scrapy_opic.extensions`, :mod:`~scrapy_opic.addon`), with
:mod:`~scrapy_opic.export`, :mod:`~scrapy_opic.report` and the commands reading states.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "OpicScheduler": "scrapy_opic.scheduler",
    "OpicSpiderMiddleware": "scrapy_opic.middlewares",
    "OpicDownloaderMiddleware": "scrapy_opic.middlewares",
    "OpicLogStats": "scrapy_opic.extensions",
    "Addon": "scrapy_opic.addon",
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
    "OpicSpiderMiddleware",
    "__version__",
]
