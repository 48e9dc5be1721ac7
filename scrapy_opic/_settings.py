"""Every ``OPIC_*`` setting, its default, what it accepts, and the one reader that checks them.

:data:`SETTINGS` is the one table: name, default, meaning and parser of each setting (the
README's settings table is generated from it, and a test keeps the two equal). Components get
their settings from :meth:`OpicSettings.from_crawler`, which reads and checks every value once
per crawler; nothing else reads an ``OPIC_*`` setting. A bad value raises
:class:`OpicSettingsError`, one line naming the setting, the value and what is allowed.

A name that starts with ``OPIC_`` and is no setting of the table (``OPIC_EPSILLON``) is not
ignored in silence: :func:`unknown_settings` names it with the closest setting, for a warning.

Values given on the command line (``-s NAME=VALUE``) are strings: numbers and booleans are parsed
from them, and list and dict settings accept JSON (``-s 'OPIC_BOOST_PATTERNS=["/news/"]'``), as
Scrapy does for its own dict settings.

This module imports no backend and no Scrapy: reading settings loads nothing else.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from ._backends import REDIS_SCHEMES, masked_url
from ._formats import output_format
from .opic.window import WINDOW_FORMS, parse_window

if TYPE_CHECKING:  # pragma: no cover
    from .opic.config import CrawlConfig

logger = logging.getLogger("scrapy_opic")


class OpicSettingsError(ValueError):
    """An ``OPIC_*`` setting has a value it does not accept (the message is one line)."""


# -- parsers: each returns the parsed value or raises ValueError("what is allowed") -------------
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("true or false")


def _number(low: float, high: float = math.inf, *, open_low: bool = False) -> Callable:
    bounds = f"{'(' if open_low else '['}{low:g}, {high:g}]" if high < math.inf else None
    allowed = f"a number in {bounds}" if bounds else f"a number {'>' if open_low else '>='} {low:g}"

    def parse(value: Any) -> float:
        if isinstance(value, bool):  # True is an int to Python, not a number to a reader
            raise ValueError(allowed)
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(allowed) from None
        if not math.isfinite(x) or x < low or (open_low and x == low) or x > high:
            raise ValueError(allowed)
        return x

    return parse


def _idle_time(value: Any) -> float:
    """Seconds >= 0, or ``inf`` (for ever)."""
    if value == math.inf or str(value).strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return float(_number(0.0)(value))
    except ValueError:
        raise ValueError("a number of seconds >= 0, or inf (for ever)") from None


def _integer(low: int) -> Callable:
    def parse(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            x = value if isinstance(value, int) else int(str(value).strip())
        except ValueError:
            raise ValueError(f"a whole number >= {low}") from None
        if isinstance(x, bool) or x < low:
            raise ValueError(f"a whole number >= {low}")
        return x

    return parse


def _one_of(*choices: str) -> Callable:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError("one of " + ", ".join(repr(c) for c in choices))
        return text

    return parse


def _optional(parse: Callable) -> Callable:
    def optional(value: Any) -> Any:
        return None if value is None or value == "" else parse(value)

    return optional


def _window(value: Any) -> str:
    try:
        return parse_window(str(value)).spec()
    except ValueError:
        raise ValueError(", ".join(WINDOW_FORMS.values())) from None


def _json(value: Any) -> Any:
    """A JSON list or object given as a string (the command line), else the value itself."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError("valid JSON") from None
    return value


def _patterns(value: Any) -> list[re.Pattern]:
    value = _json(value)
    if isinstance(value, (str, re.Pattern)):
        # One pattern (a comma is part of a regex: {1,3}); an empty string is none.
        value = [value] if value != "" else []
    if not isinstance(value, (list, tuple)):
        raise ValueError("a list of regular expressions (JSON on the command line)")
    out = []
    for pattern in value:
        if isinstance(pattern, re.Pattern):
            out.append(pattern)
            continue
        if not isinstance(pattern, str) or not pattern:
            raise ValueError(f"regular expressions, not {pattern!r}")
        try:
            out.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"regular expressions ({pattern!r}: {exc})") from None
    return out


EXPORT_OPTIONS = {"top": None, "fetched_only": False, "by_site": False}
_EXPORT_ALLOWED = "a path (.csv, .jsonl, .jl), a list of paths, or a dict {path: {top, "
_EXPORT_ALLOWED += "fetched_only, by_site}} (JSON on the command line)"


def _export(value: Any) -> dict[str, dict[str, Any]]:
    """``OPIC_EXPORT`` as ``{path: options}``: a path, a list of paths, or a FEEDS-like dict."""
    value = _json(value)
    if not value:
        return {}
    if isinstance(value, (str, os.PathLike)):
        value = {value: {}}
    elif isinstance(value, (list, tuple)):
        value = {v: {} for v in value}
    if not isinstance(value, Mapping):
        raise ValueError(_EXPORT_ALLOWED)
    out = {}
    for path, options in value.items():
        if not isinstance(path, (str, os.PathLike)) or not isinstance(
            options, (Mapping, type(None))
        ):
            raise ValueError(_EXPORT_ALLOWED)
        path = str(os.fspath(path))
        out[path] = _export_options(path, options)
    return out


def _export_options(path: str, options: Mapping | None) -> dict[str, Any]:
    """The options of the ``OPIC_EXPORT`` target ``path``, checked, with their defaults."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(EXPORT_OPTIONS))
    if unknown:
        raise ValueError(f"{_EXPORT_ALLOWED}; unknown options {unknown}")
    try:
        output_format(path)  # a typo in the extension fails now, not after the crawl
        top = options.get("top")
        if top is not None:
            options["top"] = _integer(0)(top)
        for flag in ("fetched_only", "by_site"):
            if flag in options:
                options[flag] = _bool(options[flag])
    except ValueError as exc:
        raise ValueError(f"{_EXPORT_ALLOWED} ({exc})") from None
    return {**EXPORT_OPTIONS, **options}


def _redis_url(value: Any) -> str:
    text = str(value).strip()
    if not text.startswith(REDIS_SCHEMES):
        raise ValueError("a URL redis://[:password@]host:port/db (or rediss://, unix://)")
    return text


def _text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("a non-empty string")
    return text


@dataclass(frozen=True)
class Setting:
    """One ``OPIC_*`` setting: its default, its meaning (one line), and its parser (which
    raises :class:`ValueError` with what is allowed)."""

    name: str
    default: Any
    meaning: str
    parse: Callable[[Any], Any]

    @property
    def field(self) -> str:
        return self.name.removeprefix("OPIC_").lower()


#: The one table of settings (the README's table mirrors it, in this order).
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "OPIC_STRATEGY",
        "greedy",
        "page selection: greedy (most cash first), random or cycle",
        _one_of("greedy", "random", "cycle"),
    ),
    Setting(
        "OPIC_ORDER",
        "web",
        "a greedy crawl's order of first fetches: 'web' (download slots, i.e. hosts, take "
        "turns: the one with the fewest first fetches next, its page with the most link votes "
        "discounted by depth; in a continuous crawl, its discovery turns) or 'cash' (the most "
        "cash whatever the slot, the paper's Greedy)",
        _one_of("web", "cash"),
    ),
    Setting(
        "OPIC_EPSILON",
        0.15,
        "share of each visit's cash paid to the virtual page (damping 1 - eps)",
        _number(0.0, 1.0, open_low=True),
    ),
    Setting(
        "OPIC_CONTINUOUS",
        False,
        "refetch pages when their cash makes them the best choice again",
        _bool,
    ),
    Setting(
        "OPIC_REFRESH",
        None,
        "share of the virtual page's payout to all pages (rest: unfetched pages); "
        "None = 0 for one-pass crawls, 1 for continuous ones",
        _optional(_number(0.0, 1.0)),
    ),
    Setting(
        "OPIC_DISCOVERY",
        0.5,
        "continuous crawls: the share of fetches owed to pages never fetched while there are any",
        _number(0.0, 1.0),
    ),
    Setting(
        "OPIC_REFETCH",
        "freshness",
        "continuous crawls: what orders refetches: 'freshness' (each page's importance and "
        "learned change rate: the most importance-weighted freshness for the fetches spent) or "
        "'cash' (cash alone, blind to change)",
        _one_of("freshness", "cash"),
    ),
    Setting(
        "OPIC_CONDITIONAL",
        True,
        "refetches by freshness send the page's last ETag and Last-Modified (If-None-Match, "
        "If-Modified-Since; a request's own headers win); a 304 is a visit of the unchanged "
        "page",
        _bool,
    ),
    Setting(
        "OPIC_SIGNATURE",
        "text",
        "refetches by freshness: what tells a changed 200 from an unchanged one: 'text' (the "
        "visible text: markup, scripts, styles and comments left out), 'body' (the bytes) or "
        "'off' (every 200 is a change)",
        _one_of("text", "body", "off"),
    ),
    Setting(
        "OPIC_UNCHANGED_CALLBACK",
        False,
        "refetches by freshness: call the callback for an unchanged page too (a 200 with the "
        "same signature; a 304 if the spider handles that status); by default it is not called "
        "and yields nothing again",
        _bool,
    ),
    Setting(
        "OPIC_BACKOFF",
        5.0,
        "continuous crawls: seconds a page waits after a failed fetch before it may be fetched "
        "again, doubled at each failure in a row (a host whose fetches keep failing waits as "
        "long); 0 turns it off",
        _number(0.0),
    ),
    Setting(
        "OPIC_BACKOFF_MAX",
        600.0,
        "continuous crawls: the longest such wait, in seconds",
        _number(0.0, open_low=True),
    ),
    Setting(
        "OPIC_WINDOW",
        None,
        "history window spec; None = 'unbounded' (one-pass) or 'adaptive:30' (continuous)",
        _optional(_window),
    ),
    Setting(
        "OPIC_REFUSED_LINKS",
        "ignore",
        "links Scrapy will not follow (offsite) and links to closed pages: 'ignore' leaves "
        "them out of the out-degree, 'virtual' gives their share to the virtual page",
        _one_of("ignore", "virtual"),
    ),
    Setting("OPIC_INTERNAL_WEIGHT", 1.0, "weight of a link to the same host", _number(0.0)),
    Setting("OPIC_EXTERNAL_WEIGHT", 1.0, "weight of a link to another host", _number(0.0)),
    Setting(
        "OPIC_BOOST_PATTERNS",
        [],
        "regexes of URLs the crawl focuses on: links to them weigh more (OPIC_BOOST)",
        _patterns,
    ),
    Setting(
        "OPIC_BOOST",
        1.0,
        "a link matching OPIC_BOOST_PATTERNS weighs 1 + OPIC_BOOST times a plain link in its "
        "page's split of cash (and of importance)",
        _number(0.0),
    ),
    Setting("OPIC_SEED", None, "random seed of the random strategy", _optional(_integer(0))),
    Setting(
        "OPIC_STATE_PATH",
        None,
        "state file when no JOBDIR is set ({spider} is replaced); default "
        ".scrapy/opic/<spider>.sqlite; with JOBDIR: JOBDIR/opic.sqlite",
        _optional(_text),
    ),
    Setting(
        "OPIC_COMMIT_VISITS",
        500,
        "commit a snapshot of the state every N visits...",
        _integer(1),
    ),
    Setting(
        "OPIC_COMMIT_SECONDS",
        10.0,
        "...or every T seconds, whichever comes first (and at close)",
        _number(0.0, open_low=True),
    ),
    Setting(
        "OPIC_MEMORY_REQUESTS",
        1000,
        "with a JOBDIR, pending requests kept in memory besides their sqlite row (faster pops); "
        "the rest live on disk only",
        _integer(0),
    ),
    Setting(
        "OPIC_EXPORT",
        None,
        "export importance when the crawl closes: a path (.csv, .jsonl) or a dict "
        "{path: {top, fetched_only, by_site}} like FEEDS",
        _export,
    ),
    Setting(
        "OPIC_KEEP_LINKS",
        False,
        "also keep each fetched page's out-links in the state (page ids, compressed), so that "
        "the export gains a pagerank column: the exact PageRank of the crawled graph "
        "(embedded store only)",
        _bool,
    ),
    Setting(
        "OPIC_ITEM_FIELD",
        None,
        "add the page's current importance to each item its callback yields, in this field",
        _optional(_text),
    ),
    Setting(
        "OPIC_MAX_IDLE_TIME",
        0.0,
        "seconds a crawl with nothing to do stays open, waiting for start URLs pushed into "
        "it (scrapy opic-feed), before it closes (reason idle_timeout); 0 closes at once, inf "
        "never (scrapy-redis: MAX_IDLE_TIME_BEFORE_CLOSE, where 0 is never)",
        _idle_time,
    ),
    Setting(
        "OPIC_LOGSTATS",
        True,
        "log an OPIC line every LOGSTATS_INTERVAL seconds (the OpicLogStats extension)",
        _bool,
    ),
    Setting(
        "OPIC_STORE",
        "sqlite",
        "where the frontier lives: 'sqlite' (embedded, one process) or 'redis' (shared by "
        "every process of a crawl)",
        _one_of("sqlite", "redis"),
    ),
    Setting(
        "OPIC_REDIS_URL",
        "redis://127.0.0.1:6379/0",
        "the Redis server of OPIC_STORE = 'redis', or any node of a Redis Cluster",
        _redis_url,
    ),
    Setting(
        "OPIC_REDIS_KEY",
        "opic:{spider}",
        "the crawl's name in Redis ({spider} is replaced): processes with the same key share "
        "one frontier; several crawls share a server under different keys",
        _text,
    ),
    Setting(
        "OPIC_REDIS_LEASE",
        30.0,
        "seconds a partition stays owned by a process that stopped renewing it (killed) before "
        "another process takes it over",
        _number(0.0, open_low=True),
    ),
    Setting(
        "OPIC_REDIS_PARTITIONS",
        256,
        "partitions of a Redis crawl, each owned by one process at a time (set when the crawl "
        "starts; every process of the crawl sets the same number); on a Redis Cluster they "
        "spread over its shards",
        _integer(1),
    ),
    Setting(
        "OPIC_REDIS_PARTITION",
        "host",
        "what puts a page in a partition: 'host' (its URL's host: one process crawls a host, "
        "with Scrapy's own politeness) or 'url' (its request: a host's pages spread over "
        "processes, each keeping its own politeness)",
        _one_of("host", "url"),
    ),
    Setting(
        "OPIC_REDIS_RESET",
        False,
        "delete the crawl's keys when this process opens (start afresh; never set it on "
        "processes that join a running crawl)",
        _bool,
    ),
)

#: name -> (default, meaning): the README table's columns.
DEFAULTS: dict[str, tuple[Any, str]] = {s.name: (s.default, s.meaning) for s in SETTINGS}


@dataclass(frozen=True)
class OpicSettings:
    """The checked ``OPIC_*`` settings of a crawl (build it with :meth:`from_settings` or
    :meth:`from_crawler`; a field per :data:`SETTINGS` entry, with the crawl-mode defaults of
    ``refresh`` and ``window`` resolved), plus what they need of Scrapy's own settings."""

    strategy: str
    order: str
    epsilon: float
    continuous: bool
    refresh: float
    discovery: float
    refetch: str
    conditional: bool
    signature: str
    unchanged_callback: bool
    backoff: float
    backoff_max: float
    window: str
    refused_links: str
    internal_weight: float
    external_weight: float
    boost_patterns: list[re.Pattern]
    boost: float
    seed: int | None
    state_path: str | None
    commit_visits: int
    commit_seconds: float
    memory_requests: int
    export: dict[str, dict[str, Any]]
    keep_links: bool
    item_field: str | None
    max_idle_time: float
    logstats: bool
    store: str
    redis_url: str
    redis_key: str
    redis_lease: float
    redis_partitions: int
    redis_partition: str
    redis_reset: bool
    #: Scrapy's JOBDIR (a resumable crawl), or None.
    jobdir: str | None
    #: Scrapy's LOGSTATS_INTERVAL, or 0 when ``OPIC_LOGSTATS`` is off.
    logstats_interval: float

    @classmethod
    def from_settings(cls, settings: Any) -> OpicSettings:
        """Read and check every ``OPIC_*`` value of a Scrapy ``Settings`` (or a plain dict).
        :class:`OpicSettingsError` names the first bad one."""
        values = _parsed(settings)
        _resolve(values)
        jobdir = settings.get("JOBDIR")
        values["jobdir"] = str(jobdir) if jobdir else None
        interval = settings.get("LOGSTATS_INTERVAL")
        try:
            interval = float(60.0 if interval is None else interval)
        except (TypeError, ValueError):
            interval = 60.0
        values["logstats_interval"] = interval if values["logstats"] else 0.0
        return cls(**values)

    @classmethod
    def from_crawler(cls, crawler: Any) -> OpicSettings:
        """The crawler's settings, read and checked once (every component gets the same
        object)."""
        cached = _BY_CRAWLER.get(crawler)
        if cached is None:
            cached = _BY_CRAWLER[crawler] = cls.from_settings(crawler.settings)
            for line in unknown_settings(crawler.settings):
                logger.warning("%s", line)
        return cached

    @functools.cached_property
    def crawl(self) -> CrawlConfig:
        """The crawl's parameters (:class:`~scrapy_opic.opic.config.CrawlConfig`)."""
        from .opic.config import CrawlConfig

        redis = self.store == "redis"
        return CrawlConfig(
            epsilon=self.epsilon,
            refresh=self.refresh,
            window=self.window,
            continuous=self.continuous,
            strategy=self.strategy,
            order=self.order,
            seed=self.seed,
            discovery=self.discovery,
            refetch=self.refetch,
            backoff=self.backoff,
            backoff_max=self.backoff_max,
            closed_links_virtual=self.refused_links == "virtual",
            keep_links=self.keep_links,
            partitions=self.redis_partitions if redis else 1,
            by=self.redis_partition if redis else "host",
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain values (kept in the state, shown in reports); never a password."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["boost_patterns"] = [p.pattern for p in self.boost_patterns]
        out["redis_url"] = masked_url(self.redis_url)
        return out

    def redis_crawl_key(self, spider_name: str) -> str:
        """``OPIC_REDIS_KEY`` for this spider."""
        return self.redis_key.replace("{spider}", spider_name)


_BY_CRAWLER: WeakKeyDictionary[Any, OpicSettings] = WeakKeyDictionary()


def _parsed(settings: Any) -> dict[str, Any]:
    """Every setting's value by field, parsed (its default if unset); :class:`OpicSettingsError`
    names the first bad one."""
    values: dict[str, Any] = {}
    for s in SETTINGS:
        raw = settings.get(s.name)
        if raw is None:
            values[s.field] = s.parse(s.default)
            continue
        try:
            values[s.field] = s.parse(raw)
        except ValueError as exc:
            shown = masked_url(raw) if isinstance(raw, str) else raw  # never a password
            message = f"{s.name}={shown!r} is not valid: expected {exc}"
            raise OpicSettingsError(message) from None
    return values


def _resolve(values: dict[str, Any]) -> None:
    """The defaults that depend on the crawl mode, and the checks of values together."""
    continuous = values["continuous"]
    for name, defaults in (("refresh", (0.0, 1.0)), ("window", ("unbounded", "adaptive:30"))):
        if values[name] is None:
            values[name] = defaults[continuous]  # (one-pass, continuous)
    if not continuous:
        values["refetch"] = "cash"  # (a one-pass crawl refetches nothing)
    elif values["refetch"] == "freshness" and values["store"] != "redis":
        # The kept links are what a 304 pays (and a resumed crawl finds them there; a
        # Redis crawl's partitions keep theirs in their checkpoints).
        values["keep_links"] = True
    if not (values["internal_weight"] or values["external_weight"]):
        raise OpicSettingsError(
            "OPIC_INTERNAL_WEIGHT and OPIC_EXTERNAL_WEIGHT are both 0: at least one must be "
            "> 0, or every page would give all its cash to the virtual page"
        )
    if values["store"] == "redis":
        _check_redis(values)


def _check_redis(values: dict[str, Any]) -> None:
    """A Redis crawl's checks: what only the embedded store does is refused."""
    if values["strategy"] != "greedy":
        raise OpicSettingsError(
            f"OPIC_STRATEGY={values['strategy']!r} is not valid with OPIC_STORE='redis': "
            "expected 'greedy' (random and cycle are embedded-store only)"
        )
    if values["keep_links"]:
        raise OpicSettingsError(
            "OPIC_KEEP_LINKS=True is not valid with OPIC_STORE='redis': expected False "
            "(kept links and the pagerank column are embedded-store only)"
        )


def unknown_settings(settings: Any) -> list[str]:
    """One line per name of ``settings`` (a Scrapy ``Settings``, with what ``-s`` and a
    spider's ``custom_settings`` set, or a dict) that starts with ``OPIC_`` but is no OPIC
    setting: a misspelling would otherwise be ignored without a word while every correct name
    is checked. Each line names the closest setting, if one is close."""
    known = [s.name for s in SETTINGS]
    out = []
    for name in sorted(str(n) for n in settings):
        if not name.upper().startswith("OPIC_") or name in known:
            continue
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "no OPIC setting is close to it"
        out.append(
            f"{name} is not an OPIC setting and is ignored: {hint} (the OPIC_* settings are "
            "listed in the README)"
        )
    return out


__all__ = [
    "DEFAULTS",
    "EXPORT_OPTIONS",
    "SETTINGS",
    "OpicSettings",
    "OpicSettingsError",
    "Setting",
    "unknown_settings",
]
