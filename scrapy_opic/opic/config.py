"""The parameters of one crawl, read once from the settings and handed to every part of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .backoff import Backoff
from .engine import OpicEngine
from .frontier import MemoryFrontier, PageRows
from .refresh import Refresher


@dataclass(frozen=True)
class CrawlConfig:
    """The algorithm's parameters of a crawl (see the settings of the same names)."""

    epsilon: float = 0.15
    refresh: float = 0.0
    #: The history window's spec (see :func:`~.window.parse_window`).
    window: str = "unbounded"
    continuous: bool = False
    strategy: str = "greedy"
    #: A greedy crawl's order of first fetches: ``"web"`` (download slots take turns, in a
    #: slot the most link votes; a continuous crawl's discovery pops only, its other pops
    #: weigh first fetches and refetches by cash) or ``"cash"`` (see
    #: :class:`~.selection.TieredSelection`).
    order: str = "web"
    seed: int | None = None
    #: A continuous crawl's share of pops owed to pages never fetched.
    discovery: float = 0.0
    #: What orders a continuous crawl's refetches: ``"cash"`` or ``"freshness"``.
    refetch: str = "cash"
    backoff: float = 0.0
    backoff_max: float = 600.0
    #: A link to a closed page gives its share to the virtual page (else it is no link).
    closed_links_virtual: bool = False
    keep_links: bool = False
    #: The crawl's partitions, and what puts a page in one: its URL's ``"host"``, or its
    #: request (``"url"``, hashed by key).
    partitions: int = 1
    by: str = "host"

    def __post_init__(self) -> None:
        if not 0.0 < self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in (0, 1], not {self.epsilon!r}")
        if not 0.0 <= self.refresh <= 1.0:
            raise ValueError(f"refresh must be in [0, 1], not {self.refresh!r}")
        if self.order not in ("web", "cash"):
            raise ValueError(f"order must be 'web' or 'cash', not {self.order!r}")
        if self.partitions < 1:
            raise ValueError(f"a crawl has at least one partition, not {self.partitions}")
        if not self.continuous:
            object.__setattr__(self, "refetch", "cash")

    def replace(self, **changes: Any) -> CrawlConfig:
        return dataclasses.replace(self, **changes)

    @property
    def refetches_by_change(self) -> bool:
        return self.continuous and self.refetch == "freshness"

    def new_engine(self, **kw: Any) -> OpicEngine:
        # (Votes order the pages never fetched in the web order: see TieredSelection.)
        votes = self.order == "web" and self.strategy == "greedy"
        return OpicEngine(
            epsilon=self.epsilon, refresh=self.refresh, window=self.window, votes=votes, **kw
        )

    def new_frontier(
        self, engine: OpicEngine, rows: PageRows | None = None, refresher: Refresher | None = None
    ) -> MemoryFrontier:
        """A frontier for ``engine``'s pages, as this crawl's frontiers are (a refresher of its
        own unless ``refresher`` is given, when the crawl refetches by change)."""
        if refresher is None and self.refetches_by_change:
            refresher = Refresher()
        engine.closed_links_virtual = self.closed_links_virtual
        return MemoryFrontier(
            engine,
            self.strategy,
            self.continuous,
            self.seed,
            keep_links=self.keep_links,
            refresher=refresher,
            web_order=self.order == "web",
            rows=rows,
            backoff=Backoff(self.backoff, self.backoff_max),
        )
