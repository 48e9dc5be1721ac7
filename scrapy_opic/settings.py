"""Every ``OPIC_*`` setting, its default, and how it is read: in one place.

The README's settings table mirrors :data:`DEFAULTS`. Components call
:meth:`OpicSettings.from_crawler` once (in their ``from_crawler``) and never read Scrapy settings
anywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .export import output_format
from .opic.window import parse_window

#: setting name -> (default, one-line meaning). The README table is generated from the same text.
DEFAULTS: dict[str, tuple[Any, str]] = {
    "OPIC_STRATEGY": ("greedy", "page selection: greedy (most cash first), random or cycle"),
    "OPIC_EPSILON": (0.15, "share of each visit's cash paid to the virtual page (damping 1 - eps)"),
    "OPIC_CONTINUOUS": (False, "refetch pages when their cash makes them the best choice again"),
    "OPIC_REFRESH": (
        None,
        "share of the virtual page's payout to all pages (rest: unfetched pages); "
        "None = 0 for one-pass crawls, 1 for continuous ones",
    ),
    "OPIC_WINDOW": (
        None,
        "history window spec; None = 'unbounded' (one-pass) or 'interpolation:30' (continuous)",
    ),
    "OPIC_REFUSED_LINKS": (
        "ignore",
        "links Scrapy will not follow (offsite): 'ignore' leaves them out of the out-degree, "
        "'virtual' gives their share to the virtual page",
    ),
    "OPIC_INTERNAL_WEIGHT": (1.0, "weight of a link to the same host"),
    "OPIC_EXTERNAL_WEIGHT": (1.0, "weight of a link to another host"),
    "OPIC_BOOST_PATTERNS": ([], "regexes of URLs that get extra cash from the virtual page"),
    "OPIC_BOOST": (1.0, "extra cash for a boosted link, as a multiple of its normal share"),
    "OPIC_SEED": (None, "random seed of the random strategy"),
    "OPIC_STATE_PATH": (
        None,
        "state file when no JOBDIR is set ({spider} is replaced); default "
        ".scrapy/opic/<spider>.sqlite; with JOBDIR: JOBDIR/opic.sqlite",
    ),
    "OPIC_COMMIT_VISITS": (500, "commit a snapshot of the state every N visits..."),
    "OPIC_COMMIT_SECONDS": (10.0, "...or every T seconds, whichever comes first (and at close)"),
    "OPIC_MEMORY_REQUESTS": (
        50000,
        "with a JOBDIR, pending requests kept in memory besides their sqlite row (faster pops); "
        "the rest live on disk only",
    ),
    "OPIC_EXPORT": (
        None,
        "export importance when the crawl closes: a path (.csv, .jsonl) or a dict "
        "{path: {top, fetched_only, by_site}} like FEEDS",
    ),
    "OPIC_ITEM_FIELD": (
        None,
        "add the page's current importance to each item its callback yields, in this field",
    ),
    "OPIC_LOGSTATS": (True, "log an OPIC line every LOGSTATS_INTERVAL seconds"),
    "OPIC_STORE": (
        "sqlite",
        "where the frontier lives: 'sqlite' (embedded, one process), 'redis' (shared by "
        "every process of a crawl) or the path of a SchedulerBase subclass",
    ),
    "OPIC_REDIS_URL": ("redis://127.0.0.1:6379/0", "the Redis server of OPIC_STORE = 'redis'"),
    "OPIC_REDIS_KEY": (
        "opic:{spider}",
        "the crawl's name in Redis ({spider} is replaced): processes with the same key share "
        "one frontier; several crawls share a server under different keys",
    ),
    "OPIC_REDIS_LEASE": (
        60.0,
        "seconds before a page popped by a process that stopped renewing its leases (killed) "
        "goes back to the frontier",
    ),
    "OPIC_REDIS_RESET": (
        False,
        "delete the crawl's keys when this process opens (start afresh; never set it on "
        "processes that join a running crawl)",
    ),
}


@dataclass
class OpicSettings:
    """Validated ``OPIC_*`` settings."""

    strategy: str = "greedy"
    epsilon: float = 0.15
    continuous: bool = False
    refresh: float = 0.0
    window: str = "unbounded"
    refused_links: str = "ignore"
    internal_weight: float = 1.0
    external_weight: float = 1.0
    boost_patterns: list[re.Pattern] = field(default_factory=list)
    boost: float = 1.0
    seed: int | None = None
    commit_visits: int = 500
    commit_seconds: float = 10.0
    memory_requests: int = 50000
    export: dict[str, dict[str, Any]] = field(default_factory=dict)
    item_field: str | None = None
    logstats_interval: float = 60.0  # 0: no OPIC log line
    store: str = "sqlite"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_key: str = "opic:{spider}"
    redis_lease: float = 60.0
    redis_reset: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain values (kept in the state, shown in reports)."""
        from .backends.redis import masked_url

        out = {k: v for k, v in self.__dict__.items() if k != "boost_patterns"}
        out["boost_patterns"] = [p.pattern for p in self.boost_patterns]
        out["redis_url"] = masked_url(self.redis_url)  # never a password in a state or report
        return out

    @classmethod
    def from_settings(cls, settings: Any) -> OpicSettings:
        """Read and check the ``OPIC_*`` values of a Scrapy ``Settings`` (or a plain dict)."""

        def get(name: str) -> Any:
            value = settings.get(name)
            return DEFAULTS[name][0] if value is None else value

        def getbool(name: str) -> bool:
            value = get(name)
            if isinstance(value, str):
                return value.strip().lower() in ("1", "true", "yes", "on")
            return bool(value)

        continuous = getbool("OPIC_CONTINUOUS")
        refresh = get("OPIC_REFRESH")
        refresh = (1.0 if continuous else 0.0) if refresh is None else float(refresh)
        window = get("OPIC_WINDOW") or ("interpolation:30" if continuous else "unbounded")
        parse_window(window)  # raises ValueError on a bad spec
        strategy = str(get("OPIC_STRATEGY")).lower()
        if strategy not in ("greedy", "random", "cycle"):
            raise ValueError(f"OPIC_STRATEGY must be greedy, random or cycle, not {strategy!r}")
        refused = str(get("OPIC_REFUSED_LINKS")).lower()
        if refused not in ("ignore", "virtual"):
            raise ValueError(f"OPIC_REFUSED_LINKS must be 'ignore' or 'virtual', not {refused!r}")
        patterns = get("OPIC_BOOST_PATTERNS")
        if isinstance(patterns, str):
            patterns = [p for p in patterns.split(",") if p.strip()]
        seed = get("OPIC_SEED")
        lease = float(get("OPIC_REDIS_LEASE"))
        if not lease > 0:
            raise ValueError(f"OPIC_REDIS_LEASE must be > 0 seconds, not {lease!r}")
        item_field = settings.get("OPIC_ITEM_FIELD") or None
        return cls(
            strategy=strategy,
            epsilon=float(get("OPIC_EPSILON")),
            continuous=continuous,
            refresh=refresh,
            window=window,
            refused_links=refused,
            internal_weight=float(get("OPIC_INTERNAL_WEIGHT")),
            external_weight=float(get("OPIC_EXTERNAL_WEIGHT")),
            boost_patterns=[re.compile(p) for p in patterns],
            boost=float(get("OPIC_BOOST")),
            seed=None if seed is None else int(seed),
            commit_visits=max(1, int(get("OPIC_COMMIT_VISITS"))),
            commit_seconds=float(get("OPIC_COMMIT_SECONDS")),
            memory_requests=max(0, int(get("OPIC_MEMORY_REQUESTS"))),
            export=_export_targets(settings.get("OPIC_EXPORT")),
            item_field=None if item_field is None else str(item_field),
            logstats_interval=(
                float(settings.get("LOGSTATS_INTERVAL") or 0) if getbool("OPIC_LOGSTATS") else 0.0
            ),
            store=str(get("OPIC_STORE")),
            redis_url=str(get("OPIC_REDIS_URL")),
            redis_key=str(get("OPIC_REDIS_KEY")),
            redis_lease=lease,
            redis_reset=getbool("OPIC_REDIS_RESET"),
        )


EXPORT_OPTIONS = {"top": None, "fetched_only": False, "by_site": False}


def _export_targets(value: Any) -> dict[str, dict[str, Any]]:
    """``OPIC_EXPORT`` as ``{path: options}``: a path, a list of paths, or a FEEDS-like dict."""
    if not value:
        return {}
    if isinstance(value, str):
        value = {value: {}}
    elif isinstance(value, (list, tuple)):
        value = {v: {} for v in value}
    if not isinstance(value, dict):
        raise ValueError(f"OPIC_EXPORT must be a path or a dict of paths, not {value!r}")
    out = {}
    for path, options in value.items():
        options = dict(options or {})
        unknown = set(options) - set(EXPORT_OPTIONS)
        if unknown:
            raise ValueError(f"OPIC_EXPORT[{path!r}]: unknown options {sorted(unknown)}")
        output_format(str(path))  # a typo in the extension fails now, not after the crawl
        out[str(path)] = {**EXPORT_OPTIONS, **options}
    return out


__all__ = ["DEFAULTS", "OpicSettings"]
