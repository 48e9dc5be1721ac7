"""Where a crawl's frontier lives: implementations of the
:class:`~scrapy_opic.opic.frontier.Frontier` contract that do I/O, and readers of their state.

* :mod:`~scrapy_opic._backends.sqlite`: the embedded backend, one process, checkpoints in a
  sqlite file (``OPIC_STORE = "sqlite"``);
* :mod:`~scrapy_opic._backends.redis`: one frontier shared by every process of a crawl, in a Redis
  server (``OPIC_STORE = "redis"``).

This module itself is light (no numpy, no sqlitedict, no redis): the settings and the commands
import what they need of it without loading a backend.
"""

from __future__ import annotations

import re
from typing import Any

#: The schemes of a Redis location (``redis://host:port/db#key``).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class StoreError(Exception):
    """A crawl's state is missing, unreadable, unreachable or not an OPIC state."""


class CrawlGone(StoreError):
    """The crawl's keys vanished from its Redis while it ran (the server was emptied, or
    restarted without persistence): nothing of it is left to resume."""


def is_redis_location(location: Any) -> bool:
    """Is ``location`` a crawl in Redis (``redis://host:port/db#key``) rather than a file?"""
    return isinstance(location, str) and location.startswith(REDIS_SCHEMES)


def split_location(location: str) -> tuple[str, str]:
    """``redis://host:port/db#key`` -> (server URL, crawl key). The key is required."""
    url, _, key = location.partition("#")
    if not key:
        raise StoreError(f"{location}: name the crawl's key after '#' (redis://host:6379/0#KEY)")
    return url, key


def masked_url(url: str) -> str:
    """``url`` with any password hidden, for logs, errors and the settings kept in a state."""
    return re.sub(r"^([a-z]+://)[^@/]*@", r"\1***@", url)


__all__ = [
    "REDIS_SCHEMES",
    "CrawlGone",
    "StoreError",
    "is_redis_location",
    "masked_url",
    "split_location",
]
