"""The OPIC algorithm as the paper defines it: no I/O, no Scrapy.

* :mod:`~scrapy_opic.opic.engine`: cash, history, the clock G and the virtual page
  (:class:`OpicEngine`);
* :mod:`~scrapy_opic.opic.window`: the history window policies of Adaptive OPIC;
* :mod:`~scrapy_opic.opic.selection`: Greedy, Random and Cycle page selection (and Greedy across
  download slots and priorities);
* :mod:`~scrapy_opic.opic.frontier`: the :class:`Frontier` contract (a page's life in a crawl and
  the cash on every exit path) and :class:`MemoryFrontier`, its in-memory implementation;
* :mod:`~scrapy_opic.opic.constants`: the numbers shared with every backend;
* :mod:`~scrapy_opic.opic.graph` and :mod:`~scrapy_opic.opic.pagerank`: link graphs in CSR form
  and exact PageRank by power iteration (the reference OPIC converges to: the simulator's
  yardstick, and the export's ``pagerank`` column).
"""

from .constants import FETCHED, INITIAL
from .contract import Entry, Frontier, Lease, Link, Visit
from .engine import OpicEngine
from .frontier import MemoryFrontier
from .selection import (
    CycleSelection,
    GreedySelection,
    RandomSelection,
    Selection,
    TieredSelection,
    Tiers,
    make_selection,
)
from .window import (
    AdaptiveInterpolation,
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
    "AdaptiveInterpolation",
    "CycleSelection",
    "Entry",
    "FixedWindow",
    "Frontier",
    "GreedySelection",
    "ImprovedFixedWindow",
    "Interpolation",
    "Lease",
    "Link",
    "MemoryFrontier",
    "OpicEngine",
    "RandomSelection",
    "Selection",
    "TieredSelection",
    "Tiers",
    "UnboundedHistory",
    "VariableWindow",
    "Visit",
    "WindowPolicy",
    "make_selection",
    "parse_window",
]
