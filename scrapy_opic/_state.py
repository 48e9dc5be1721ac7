"""Where a spider's OPIC state lives, and opening its crawl: one way for every store.

The scheduler and the export commands find a crawl's state by the same rules:

* ``OPIC_STORE = "redis"``: the crawl ``OPIC_REDIS_KEY`` on ``OPIC_REDIS_URL``
  (``redis://host:port/db#key``);
* else ``JOBDIR/opic.sqlite`` when Scrapy's ``JOBDIR`` is set (a resumable crawl);
* else ``OPIC_STATE_PATH`` (``{spider}`` replaced), or ``.scrapy/opic/<spider>.sqlite`` in the
  project's data directory: written afresh by each crawl, kept for the export commands.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._backends import StoreError, masked_url
from ._backends.crawl import Crawl
from ._backends.feed import Feed, FileFeed, RedisFeed, feed_path
from ._backends.store import MemoryStore, Store
from ._settings import OpicSettings
from .opic.config import CrawlConfig

logger = logging.getLogger(__name__)


def state_path(settings: OpicSettings, spider_name: str, create: bool = True) -> Path:
    """The state file of a spider's embedded crawl. ``create=False`` (readers) creates no
    directory on the way."""
    if settings.jobdir:
        if create:
            Path(settings.jobdir).mkdir(parents=True, exist_ok=True)
        return Path(settings.jobdir) / "opic.sqlite"
    if settings.state_path:
        return Path(settings.state_path.replace("{spider}", spider_name))
    if create:
        from scrapy.utils.project import data_path

        return Path(data_path("opic", createdir=True)) / f"{spider_name}.sqlite"
    return _project_data_dir() / "opic" / f"{spider_name}.sqlite"


def state_location(settings: OpicSettings, spider_name: str) -> str:
    """Where the export commands read a spider's state: the file of :func:`state_path`, or the
    crawl in Redis (``OPIC_REDIS_URL#KEY``)."""
    if settings.store == "redis":
        return f"{settings.redis_url}#{settings.redis_crawl_key(spider_name)}"
    return str(state_path(settings, spider_name, create=False))


def _project_data_dir() -> Path:
    """Where ``data_path`` puts a project's data (``.scrapy`` beside scrapy.cfg, or the cfg's
    ``[datadir]``), without creating it as ``data_path`` would: readers create nothing."""
    from scrapy.utils.conf import closest_scrapy_cfg, get_config
    from scrapy.utils.project import inside_project

    if not inside_project():
        return Path(".scrapy")
    cfg = get_config()
    if cfg.has_option("datadir", "default"):
        return Path(cfg.get("datadir", "default"))
    scrapy_cfg = closest_scrapy_cfg()
    return Path(scrapy_cfg).parent.resolve() / ".scrapy" if scrapy_cfg else Path(".scrapy")


#: The parameters a saved crawl must be resumed with: the formulas its numbers were computed
#: by, or what its state holds (the links of every page fetched so far, or none; the change
#: rates of a crawl that refetched by change). The others (link weights, boosts, the strategy)
#: apply from now on.
RESUME_SETTINGS = {
    "epsilon": "OPIC_EPSILON",
    "continuous": "OPIC_CONTINUOUS",
    "refresh": "OPIC_REFRESH",
    "window": "OPIC_WINDOW",
    "refetch": "OPIC_REFETCH",
    "keep_links": "OPIC_KEEP_LINKS",
}


def check_resume(
    config: CrawlConfig, spider_name: str | None, meta: dict[str, Any], where: str
) -> None:
    """Refuse (:class:`StoreError`, one line) to resume the saved crawl at ``where`` for another
    spider, or with other values of :data:`RESUME_SETTINGS` than it was made with."""
    saved_spider = meta.get("spider")
    if saved_spider is not None and spider_name is not None and saved_spider != spider_name:
        raise StoreError(
            f"{where} holds the crawl of spider {saved_spider!r}, not {spider_name!r}: give this "
            "spider its own (another JOBDIR, OPIC_STATE_PATH or OPIC_REDIS_KEY)"
        )
    saved = meta.get("crawl") or {}
    mine = dataclasses.asdict(config)
    fields = [f for f in RESUME_SETTINGS if f in saved and saved[f] != mine[f]]
    if fields:
        differ = "; ".join(
            f"{RESUME_SETTINGS[f]}={saved[f]!r} there, {mine[f]!r} here" for f in fields
        )
        raise StoreError(
            f"{where} holds a crawl made with other settings ({differ}): resume it with "
            f"{' '.join(_its_values(fields, saved, mine))}, or start afresh elsewhere (another "
            "JOBDIR or OPIC_REDIS_KEY, or OPIC_REDIS_RESET)"
        )


def _its_values(fields: list[str], saved: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """The command-line settings that resume a crawl whose ``fields`` differ. (Links are kept
    here because refetches by freshness need them: a crawl made without keeps refetching by
    cash.)"""
    out = []
    for f in fields:
        if f == "keep_links" and not saved[f] and mine.get("refetch") == "freshness":
            out.append("-s OPIC_REFETCH=cash")
        else:
            out.append(f"-s {RESUME_SETTINGS[f]}={saved[f]}")
    return list(dict.fromkeys(out))


def open_frontier(
    settings: OpicSettings,
    spider_name: str,
    encode: Callable[[Any, str | None], bytes | None],
    meta: dict[str, Any],
    in_memory: bool = False,
) -> Crawl:
    """Open the crawl of a spider as ``settings`` say: in its embedded store (resumed from its
    JOBDIR state, or started afresh) or in Redis (created or joined). ``encode`` turns a
    request into bytes for a store that keeps or shares them; ``meta`` is kept with the state
    for its readers. ``in_memory``: a crawl of this process's memory alone, with the same
    parameters, that reads and writes no state (a run that is not a crawl)."""
    if in_memory:
        config = settings.crawl.replace(partitions=1)
        return open_crawl(MemoryStore(), config, meta, "", **_crawl_options(settings, encode))
    if settings.store == "redis":
        return _open_redis(settings, spider_name, encode, meta)
    return _open_sqlite(settings, spider_name, encode, meta)


def _crawl_options(
    settings: OpicSettings, encode: Callable, feed: Feed | None = None
) -> dict[str, Any]:
    return {
        "encode": encode,
        "feed": feed,
        "lease": settings.redis_lease,
        "commit_visits": settings.commit_visits,
        "commit_seconds": settings.commit_seconds,
    }


def open_crawl(
    store: Store, config: CrawlConfig, meta: dict[str, Any], where: str, **options: Any
) -> Crawl:
    """The crawl kept in ``store``, created, or resumed (or joined) after the one check of what
    it holds (:func:`check_resume`; ``where`` names the store in its error). ``meta``: what the
    crawl records for its readers (the spider's name...). ``options``: see
    :class:`~scrapy_opic._backends.crawl.Crawl`."""
    crawl = Crawl(store, config, **options)
    saved = store.saved()
    if saved is not None:
        check_resume(config, meta.get("spider"), saved, where)
    crawl.open({**meta, "crawl": dataclasses.asdict(config)})
    return crawl


def _open_sqlite(
    settings: OpicSettings, spider_name: str, encode: Callable, meta: dict[str, Any]
) -> Crawl:
    from ._backends.sqlite import SqliteStore
    from ._backends.sqlite_state import StateInUse

    path = state_path(settings, spider_name)
    resumable = settings.jobdir is not None
    where = f"JOBDIR {settings.jobdir}" if resumable else str(path)
    first, k = path, 1
    while True:
        try:
            store = SqliteStore(
                path,
                resume=resumable,
                persist_requests=resumable,
                memory_requests=settings.memory_requests,
                encode=lambda request: encode(request, None),
            )
        except StateInUse:
            if resumable:
                raise StoreError(
                    f"{where} is in use by another running crawl (a JOBDIR serves one crawl "
                    "at a time): wait for it to finish, or give this crawl another JOBDIR"
                ) from None
            # Another crawl (of this spider, in this process or another) writes that state:
            # two writers would overwrite each other's snapshots. This one takes the next name.
            k += 1
            path = first.with_name(f"{first.stem}-{k}{first.suffix}")
            continue
        break
    try:
        config = settings.crawl.replace(partitions=1)
        feed = FileFeed(feed_path(first))
        crawl = open_crawl(store, config, meta, where, **_crawl_options(settings, encode, feed))
    except BaseException:
        store.close(discard=True)
        raise
    if path != first:
        logger.warning(
            "OPIC state %s is in use by another running crawl; this crawl keeps its state "
            "in %s (set OPIC_STATE_PATH or JOBDIR per crawl to choose)",
            first,
            path,
        )
    return crawl


def _open_redis(
    settings: OpicSettings, spider_name: str, encode: Callable, meta: dict[str, Any]
) -> Crawl:
    try:
        import redis
    except ImportError:
        raise StoreError(
            "OPIC_STORE='redis' needs the redis package: pip install 'scrapy-opic[redis]'"
        ) from None
    from ._backends.redis import RedisStore

    key = settings.redis_crawl_key(spider_name)
    shown = masked_url(settings.redis_url)
    store = None
    try:
        # (Connecting asks the server whether it is a cluster node: it can fail already.)
        store = RedisStore.connect(settings.redis_url, key, lease=settings.redis_lease)
        if settings.redis_reset:
            n = store.clear()
            logger.info("OPIC_REDIS_RESET: deleted the %d keys of the crawl %r", n, key)
        where = f"the crawl {key!r} on Redis {shown}"
        feed = RedisFeed(store.client, key, store.worker)
        options = _crawl_options(settings, encode, feed)
        crawl = open_crawl(store, settings.crawl, meta, where, **options)
    except (redis.RedisError, redis.RedisClusterException) as exc:
        if store is not None:
            store.client.close()
        detail = " ".join(str(exc).split())
        raise StoreError(
            f"OPIC_STORE='redis': cannot use the Redis server OPIC_REDIS_URL={shown!r} ({detail})"
        ) from None
    except BaseException:
        if store is not None:
            store.client.close()
        raise
    f = crawl.figures()
    logger.info(
        "OPIC crawl %r on Redis %s, process %s: %d pages known, %d pending, %d processes",
        key,
        shown,
        store.worker,
        f["pages"],
        f["pending"],
        f["workers"],
    )
    return crawl


__all__ = [
    "RESUME_SETTINGS",
    "check_resume",
    "open_crawl",
    "open_frontier",
    "state_location",
    "state_path",
]
