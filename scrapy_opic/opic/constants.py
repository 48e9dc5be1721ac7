"""The numbers and names the algorithm shares with every frontier backend: one source.

The Redis backend runs the engine's formulas in a Lua script; the script's constants are
generated from this module (see :func:`scrapy_opic.backends.redis.lua_constants`), never copied
by hand. A change here changes both engines at once; a change to a formula on one side only is
caught by the differential test (``tests/test_differential.py``), which replays one random
sequence of every operation on both frontiers and compares every number after every step.
"""

from __future__ import annotations

#: Page flags (``OpicEngine.flags``): visited at least once / received the initial cash C0.
FETCHED = 1
INITIAL = 2

#: Page statuses in the crawl (see :mod:`scrapy_opic.opic.frontier`), by their stored code.
STATUSES = ("discovered", "pending", "in_flight", "visited")
DISCOVERED, PENDING, IN_FLIGHT, VISITED = range(len(STATUSES))

#: What a frontier answers for each page it is asked to schedule.
DUPLICATE = 0  #: pending or in flight already, or (one-pass) visited: not scheduled again
SCHEDULED = 1  #: pending from now on, with the payload given
NEEDS_PAYLOAD = 2  #: schedulable, but no payload came with it: schedule it with one
LOCAL = 3  #: (a shared frontier) its payload cannot be encoded for other processes
CODES = ("duplicate", "scheduled", "needs_payload", "local")

#: Estimators of the unbounded history, by id (position): see
#: :class:`scrapy_opic.opic.window.UnboundedHistory`.
ESTIMATORS = ("blend", "lemma", "paper", "regression")
#: The blend estimator's weight of the (normalised) lemma estimate; the regression slope has
#: the rest.
BLEND_LEMMA = 0.5
#: Below this share of ``G * sum(a t)``, a page's spread of received cash over time is float
#: rounding, not a slope: the regression estimate calls it 0.
SLOPE_NOISE = 1e-9

#: Decay per visit of the running mean of (cash taken at a visit) x (pages known): the paper's
#: statistic, which converges to 2 under Greedy; about the last 1,000 visits.
VISIT_DECAY = 0.999
#: Decay per first visit of the learned default history (cash rate of newly visited pages).
RATE_DECAY = 0.99

__all__ = [
    "BLEND_LEMMA",
    "CODES",
    "DISCOVERED",
    "DUPLICATE",
    "ESTIMATORS",
    "FETCHED",
    "INITIAL",
    "IN_FLIGHT",
    "LOCAL",
    "NEEDS_PAYLOAD",
    "PENDING",
    "RATE_DECAY",
    "SCHEDULED",
    "SLOPE_NOISE",
    "STATUSES",
    "VISITED",
    "VISIT_DECAY",
]
