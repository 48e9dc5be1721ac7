"""The numbers and names the algorithm shares with every frontier backend: one source.

Every store runs the one engine of :mod:`~.engine`: a number here means the same in all of
them.
"""

from __future__ import annotations

#: Page flags (``OpicEngine.flags``): visited at least once / received the initial cash C0 /
#: closed for good (``OpicEngine.close_page``: receives no cash any more).
FETCHED = 1
INITIAL = 2
CLOSED = 4

#: The web order's link votes (see "Votes" in :mod:`~.engine`): the share of a visited page's
#: votes (its own vote included) passed over its links, the vote every visit casts, the votes of
#: a seed (as many as two hundred visits cast), the discount of votes per link between a page and
#: the nearest seed, and the depth of a page no link has reached yet (the largest ``uint16``).
VOTE_DAMPING = 0.5
VISIT_VOTE = 1.0 - VOTE_DAMPING
SEED_VOTES = 100.0
DEPTH_DISCOUNT = 0.8
UNREACHED = 0xFFFF

#: Page statuses in the crawl (see :mod:`scrapy_opic.opic.frontier`), by their stored code.
STATUSES = ("discovered", "pending", "in_flight", "visited")
DISCOVERED, PENDING, IN_FLIGHT, VISITED = range(len(STATUSES))

#: What a frontier answers for each page it is asked to schedule.
DUPLICATE = 0  #: pending or in flight already, or (one-pass) visited: not scheduled again
SCHEDULED = 1  #: pending from now on, with the payload given
NEEDS_PAYLOAD = 2  #: schedulable, but no payload came with it: schedule it with one
LOCAL = 3  #: (a shared frontier) its payload cannot be encoded for other processes
FORWARDED = 4  #: (a partitioned frontier) sent to the partition that holds the page: it files it
CODES = ("duplicate", "scheduled", "needs_payload", "local", "forwarded")

#: How a page's last fetch ended (the export's ``status``): a code below 100 names an outcome;
#: 100 to 599 is the HTTP status of an error response (``http_<code>``). 0: never settled.
OUTCOMES = (
    "", "ok", "forbidden", "filtered", "offsite", "ignored", "dns", "timeout", "error",
    "spider_error", "redirected", "lost", "damaged",
)  # fmt: skip
(
    NO_OUTCOME, OK, FORBIDDEN, FILTERED, OFFSITE, IGNORED, DNS, TIMEOUT, ERROR, SPIDER_ERROR,
    REDIRECTED, LOST, DAMAGED,
) = range(len(OUTCOMES))  # fmt: skip
#: Outcomes that close a page for good, in a continuous crawl too: the page is refused
#: (robots.txt, a dupefilter, offsite, another IgnoreRequest), gone (404, 410), lost (its
#: request vanished in Scrapy's engine with no outcome: whatever dropped it would again) or
#: damaged (the stored row of its request fails its checksum: nothing to fetch it with). The
#: others (download errors, other HTTP errors) are fetched again in a continuous crawl when the
#: page's cash says so.
FINAL_OUTCOMES = frozenset((FORBIDDEN, FILTERED, OFFSITE, IGNORED, LOST, DAMAGED, 404, 410))


def outcome_name(code: int) -> str:
    """The export's name of an outcome code: ``ok``, ``forbidden``... or ``http_<code>``."""
    return f"http_{code}" if code >= 100 else OUTCOMES[code]


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

#: The adaptive window's watch on the site's link structure: decay per observed visit of the
#: running mean of the share of a page's links that changed since its last parsed visit (about
#: the last 64 visits, so that one page that rotates its links is noise, not a change) ...
CHANGE_DECAY = 1.0 - 1.0 / 64
#: ... and the mean above which the site is changing: the window then reaches back no further.
CHANGE_LEVEL = 0.05
