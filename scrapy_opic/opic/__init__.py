"""The pure OPIC core: engine, window policies, selection strategies, graphs and PageRank.

Nothing in this package imports Scrapy; the Scrapy adapters translate requests and responses into
calls on :class:`OpicEngine`.
"""

from .engine import FETCHED, INITIAL, OpicEngine
from .frontier import Frontier
from .selection import (
    CycleSelection,
    GreedySelection,
    RandomSelection,
    Selection,
    SlottedGreedySelection,
    TieredSelection,
    make_selection,
)
from .window import (
    FixedWindow,
    ImprovedFixedWindow,
    Interpolation,
    UnboundedHistory,
    VariableWindow,
    WindowPolicy,
    parse_window,
)

__all__ = [
    "FETCHED",
    "INITIAL",
    "CycleSelection",
    "FixedWindow",
    "Frontier",
    "GreedySelection",
    "ImprovedFixedWindow",
    "Interpolation",
    "OpicEngine",
    "RandomSelection",
    "Selection",
    "SlottedGreedySelection",
    "TieredSelection",
    "UnboundedHistory",
    "VariableWindow",
    "WindowPolicy",
    "make_selection",
    "parse_window",
]
