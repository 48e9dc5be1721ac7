"""Where a page lives in a crawl over partitions: the partition of its URL's host (or of its
key). The same answer in every process and every Python: a BLAKE2b hash, spread evenly for
similar names (www1, www2...)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Hashable
from urllib.parse import urlsplit


def partition_of(url: str | None, key: Hashable, parts: int, by: str = "host") -> int:
    """The partition of a page, modulo ``parts``: a hash of its URL's host (``by="host"``:
    lower case, without user or port; a URL without a host goes by its text) or of its key
    (``by="url"``: a host's pages spread over the partitions)."""
    if parts == 1:
        return 0
    if by == "host" and url is not None:
        head = url.split("/", 3)  # ("scheme:", "", "user@host:port", "path...")
        netloc = head[2] if len(head) > 2 and not head[1] else ""
        got = _netloc_partition(netloc, parts)
        return got if got is not None else _url_partition(url, parts)
    data = key if isinstance(key, bytes) else str(key).encode("utf-8", "surrogatepass")
    return _hashed(data) % parts


def _hashed(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@functools.lru_cache(maxsize=65_536)
def _netloc_partition(netloc: str, parts: int) -> int | None:
    host = netloc.rpartition("@")[2]
    if host.startswith("[") or not host:
        return None  # (an IPv6 literal, or no host: the URL parser's answer)
    return _hashed(host.partition(":")[0].lower().encode("utf-8", "surrogatepass")) % parts


def _url_partition(url: str, parts: int) -> int:
    try:
        text = urlsplit(url).hostname or url
    except ValueError:  # (a malformed URL, e.g. a bad IPv6 literal: its text)
        text = url
    return _hashed(text.encode("utf-8", "surrogatepass")) % parts
