"""Every ``OPIC_*`` setting, its default, and how it is read: in one place.

The README's settings table mirrors :data:`DEFAULTS`. Components call
:meth:`OpicSettings.from_crawler` once (in their ``from_crawler``) and never read Scrapy settings
anywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .core.window import parse_window

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
        )


__all__ = ["DEFAULTS", "OpicSettings"]
