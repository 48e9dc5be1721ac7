"""Where a spider's OPIC state lives, and opening the frontier backend the settings ask for.

The scheduler and the export commands find a crawl's state by the same rules:

* ``OPIC_STORE = "redis"``: the crawl ``OPIC_REDIS_KEY`` on ``OPIC_REDIS_URL``
  (``redis://host:port/db#key``);
* else ``JOBDIR/opic.sqlite`` when Scrapy's ``JOBDIR`` is set (a resumable crawl);
* else ``OPIC_STATE_PATH`` (``{spider}`` replaced), or ``.scrapy/opic/<spider>.sqlite`` in the
  project's data directory: written afresh by each crawl, kept for the export commands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._backends import StoreError, masked_url
from ._settings import OpicSettings
from .opic.frontier import Frontier
from .opic.refresh import Refresher

logger = logging.getLogger(__name__)


def state_path(settings: OpicSettings, spider_name: str, create: bool = True) -> Path:
    """The state file of a spider's embedded frontier. ``create=False`` (readers) creates no
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


def open_frontier(
    settings: OpicSettings,
    spider_name: str,
    encode: Callable[[Any], bytes | None],
    meta: dict[str, Any],
    in_memory: bool = False,
) -> Frontier:
    """Open the frontier of a spider's crawl as ``settings`` say: the embedded one (resumed from
    its JOBDIR state, or started afresh) or the crawl in Redis (created or joined).
    ``encode`` turns a payload into bytes for a backend that stores it; ``meta`` is kept with
    the state for its readers. ``in_memory``: a frontier of this process's memory alone, with
    the same parameters, that reads and writes no state (a run that is not a crawl)."""
    if in_memory:
        return _open_memory(settings)
    if settings.store == "redis":
        return _open_redis(settings, spider_name, encode, meta)
    return _open_sqlite(settings, spider_name, encode, meta)


def _refresher(settings: OpicSettings) -> Refresher | None:
    """A continuous crawl's refresher, when it refetches by change."""
    return Refresher() if settings.continuous and settings.refetch == "freshness" else None


def _open_memory(settings: OpicSettings) -> Frontier:
    from .opic.engine import OpicEngine
    from .opic.frontier import MemoryFrontier
    from .opic.window import parse_window

    engine = OpicEngine(
        epsilon=settings.epsilon, refresh=settings.refresh, window=parse_window(settings.window)
    )
    engine.closed_links_virtual = settings.refused_links == "virtual"
    frontier = MemoryFrontier(
        engine,
        settings.strategy,
        settings.continuous,
        settings.seed,
        discovery=settings.discovery,
        refresher=_refresher(settings),
    )
    frontier.backoff, frontier.backoff_max = settings.backoff, settings.backoff_max
    return frontier


#: The settings a saved crawl must be resumed with: they are the formulas its numbers were
#: computed by, or (``OPIC_KEEP_LINKS``) what its state holds: the links of every page fetched
#: so far, or none (the others, such as link weights, boosts or the strategy, apply from now on).
RESUME_SETTINGS = {
    "epsilon": "OPIC_EPSILON",
    "continuous": "OPIC_CONTINUOUS",
    "refresh": "OPIC_REFRESH",
    "window": "OPIC_WINDOW",
    "keep_links": "OPIC_KEEP_LINKS",
}


def check_resume(
    settings: OpicSettings, spider_name: str, meta: dict[str, Any], where: str
) -> None:
    """Refuse (:class:`StoreError`, one line) to resume the saved crawl at ``where`` for another
    spider, or with other values of :data:`RESUME_SETTINGS` than it was made with."""
    saved_spider = meta.get("spider")
    if saved_spider is not None and saved_spider != spider_name:
        raise StoreError(
            f"{where} holds the crawl of spider {saved_spider!r}, not {spider_name!r}: give this "
            "spider its own (another JOBDIR, OPIC_STATE_PATH or OPIC_REDIS_KEY)"
        )
    saved = meta.get("settings") or {}
    mine = settings.as_dict()
    differ = [
        f"{name}={saved[field]!r} there, {mine[field]!r} here"
        for field, name in RESUME_SETTINGS.items()
        if field in saved and saved[field] != mine[field]
    ]
    if differ:
        raise StoreError(
            f"{where} holds a crawl made with other settings ({'; '.join(differ)}): resume it "
            "with its own values, or start afresh elsewhere (another JOBDIR or OPIC_REDIS_KEY, "
            "or OPIC_REDIS_RESET)"
        )


def _open_sqlite(
    settings: OpicSettings, spider_name: str, encode: Callable, meta: dict[str, Any]
) -> Frontier:
    from ._backends.sqlite import SqliteFrontier, StateInUse

    path = state_path(settings, spider_name)
    resumable = settings.jobdir is not None
    where = f"JOBDIR {settings.jobdir}" if resumable else str(path)

    def accept(saved_meta: dict[str, Any]) -> None:
        check_resume(settings, spider_name, saved_meta, where)

    first, k = path, 1
    while True:
        try:
            frontier = SqliteFrontier.open(
                path,
                resume=resumable,
                epsilon=settings.epsilon,
                refresh=settings.refresh,
                window=settings.window,
                accept=accept,
                strategy=settings.strategy,
                continuous=settings.continuous,
                seed=settings.seed,
                persist_requests=resumable,
                memory_requests=settings.memory_requests,
                encode=encode,
                commit_visits=settings.commit_visits,
                commit_seconds=settings.commit_seconds,
                meta=meta,
                keep_links=settings.keep_links,
                refresher=_refresher(settings),
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
        frontier.discovery = settings.discovery
        frontier.backoff, frontier.backoff_max = settings.backoff, settings.backoff_max
        frontier.engine.closed_links_virtual = settings.refused_links == "virtual"
        if path != first:
            logger.warning(
                "OPIC state %s is in use by another running crawl; this crawl keeps its state "
                "in %s (set OPIC_STATE_PATH or JOBDIR per crawl to choose)",
                first,
                path,
            )
        return frontier


def _open_redis(
    settings: OpicSettings, spider_name: str, encode: Callable, meta: dict[str, Any]
) -> Frontier:
    try:
        import redis
    except ImportError:
        raise StoreError(
            "OPIC_STORE='redis' needs the redis package: pip install 'scrapy-opic[redis]'"
        ) from None
    from ._backends.redis import RedisFrontier

    key = settings.redis_crawl_key(spider_name)
    shown = masked_url(settings.redis_url)
    frontier = None
    try:
        # (Connecting asks the server whether it is a cluster node: it can fail already.)
        frontier = RedisFrontier.connect(
            settings.redis_url,
            key,
            lease=settings.redis_lease,
            encode=encode,
            series_seconds=settings.commit_seconds,
        )
        if settings.redis_reset:
            n = frontier.clear()
            logger.info("OPIC_REDIS_RESET: deleted the %d keys of the crawl %r", n, key)
        if frontier.exists():
            check_resume(
                settings, spider_name, frontier.meta(), f"the crawl {key!r} on Redis {shown}"
            )
        frontier.discovery = settings.discovery
        frontier.backoff, frontier.backoff_max = settings.backoff, settings.backoff_max
        frontier.closed_links_virtual = settings.refused_links == "virtual"
        created = frontier.open(
            epsilon=settings.epsilon,
            refresh=settings.refresh,
            continuous=settings.continuous,
            window=settings.window,
            partitions=settings.redis_partitions,
            by="key" if settings.redis_partition == "url" else "host",
            meta=meta,
            refetch=settings.refetch,
        )
    except (redis.RedisError, redis.RedisClusterException) as exc:
        if frontier is not None:
            frontier.client.close()
        detail = " ".join(str(exc).split())
        raise StoreError(
            f"OPIC_STORE='redis': cannot use the Redis server OPIC_REDIS_URL={shown!r} ({detail})"
        ) from None
    except ValueError as exc:
        if frontier is not None:
            frontier.client.close()
        raise StoreError(str(exc)) from None
    except BaseException:
        if frontier is not None:
            frontier.client.close()
        raise
    f = frontier.figures()
    logger.info(
        "OPIC crawl %r on Redis %s, process %s: %s; %d pages known, %d pending, %d processes",
        key,
        shown,
        frontier.worker,
        "started the crawl" if created else "joined the crawl",
        f["pages"],
        f["pending"],
        f["workers"],
    )
    return frontier


__all__ = ["RESUME_SETTINGS", "check_resume", "open_frontier", "state_location", "state_path"]
