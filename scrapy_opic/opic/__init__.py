"""The OPIC algorithm as the paper defines it: no I/O, no Scrapy.

The public API of the algorithm is this package's ``__all__``:

* :class:`OpicEngine`: cash, history, the clock G and the virtual page, with a page's importance
  (and the web order's link votes); :class:`Share`, what it pays a page it does not hold;
* the selection strategies of the paper (:class:`GreedySelection`, :class:`RandomSelection`,
  :class:`CycleSelection`, by name :func:`make_selection`);
* the history window policies of Adaptive OPIC (:func:`parse_window` builds one from a spec);
* the :class:`Frontier` contract of a crawl (a page's life and the cash on every exit path) with
  the data that crosses it (:class:`Entry`, :class:`Link`, :class:`Lease`, :class:`Visit`), and
  :class:`MemoryFrontier`, the pages of one partition in memory.

The other names of its modules (the partitions of a crawl, their messages and journals, the
refetch planner, the key index...) are the plugin's own: they may change in any release.
"""

from .contract import Entry, Frontier, Lease, Link, Visit
from .engine import OpicEngine, Share
from .frontier import MemoryFrontier
from .selection import CycleSelection, GreedySelection, RandomSelection, make_selection
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
    "Share",
    "UnboundedHistory",
    "VariableWindow",
    "Visit",
    "WindowPolicy",
    "make_selection",
    "parse_window",
]
