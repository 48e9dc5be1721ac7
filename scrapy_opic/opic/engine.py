"""The OPIC engine: cash, history and the G-clock of every page, with no Scrapy in sight.

The model (Abiteboul, Preda, Cobena, "Adaptive On-Line Page Importance Computation", WWW 2003):

* every page ``i`` holds *cash* ``C[i]``; a visit absorbs it (into the paper's history ``H[i]``);
  the clock ``G`` is the total history, so it grows by the cash every visit absorbs;
* a *visit* of ``i`` moves ``C[i]`` into ``H[i]`` (through the window policy), resets ``C[i]`` to 0
  and pays the cash out: a share ``epsilon`` to the *virtual page* (the paper's "small edges") and
  ``1 - epsilon`` split over the out-links (equally, or by link weights). A dangling page pays
  everything to the virtual page;
* the virtual page pays its cash back to the real pages (:meth:`OpicEngine.payout`, called before
  every selection): a fraction ``refresh`` to *all* known pages and the rest to the pages *not
  fetched yet* (discovery). ``refresh=1`` is the PageRank
  fixpoint below, ``refresh=0`` is pure discovery.

Fixpoint (why this is PageRank). Take ``refresh=1`` and let ``pi`` be the long-run share of the cash
flow through each node (what the normalised history converges to, Theorem 2.1). It is the
stationary law of the Markov chain on the ``n`` real pages plus the virtual page ``v`` with
``P[i, j] = (1 - eps) / d_i`` for a link ``i -> j``, ``P[i, v] = eps`` (``P[i, v] = 1`` if ``i``
is dangling) and ``P[v, j] = 1 / n``. Stationarity gives, for a real page ``j``::

    pi_j = (1 - eps) * sum_{i -> j} pi_i / d_i + pi_v / n
    pi_v = eps * (1 - pi_v - D) + D,        D = sum of pi over dangling pages

Writing ``x_j = pi_j / (1 - pi_v)`` (the importance over real pages) and dividing the second line by
``1 - pi_v``: ``pi_v / (1 - pi_v) = eps + (1 - eps) * sum_{dangling} x_i``. Substituting::

    x_j = (1 - eps) * sum_{i -> j} x_i / d_i + (1 - eps) * sum_{dangling} x_i / n + eps / n

which is exactly PageRank with damping ``alpha = 1 - eps`` and dangling mass spread uniformly, i.e.
``networkx.pagerank(G, alpha=1 - eps)``. (Giving the virtual page an equal ``1 / (d + 1)`` share
instead makes the teleport probability depend on the out-degree: that is not PageRank.)

Importance: the credit. Cash orders the crawl, but it is a poor measure of importance in a crawl
that discovers its graph: all of it starts with the seed (its first visit absorbs the whole
endowment, which the seed's children then share), and the virtual page pays it to the few pages
known early. So importance is measured on a second flow, the *credit*, that moves with the cash
but has a uniform source:

* every payout of the virtual page gives every page, known or not yet, the same *teleport
  credit* (the amount paid; the endowment is the first such payout, i.e. a uniform prior, as in
  the paper's ``C[i] = 1/n`` start): a running total ``acc_credit``, and per page the total at its
  last visit (``cb``, 0 for a new page: *back pay*, so a page discovered late holds the same
  teleport credit as one known from the start);
* a visit passes the credit the page holds (teleport credit since its last visit plus the *link
  credit* received since) over its links in the same shares as its cash, ``1 - epsilon`` of it;
  the epsilon share, a dangling page's credit and forfeits are spent (the teleport is
  given uniformly instead);
* the window policy measures each page's *link credit* (its history ``hist``; ``H`` in the
  paper's formulas), and a page's importance is PageRank's decomposition::

      x_j = a / n + (1 - a) * est_j / sum(est),    a = eps + (1 - eps) * D

  with ``D`` the share of the credit flow that passed through dangling pages. A page no one
  links to gets ``a / n``, PageRank's teleport share, whatever the crawl's start: the endowment
  is a uniform prior, never a page's importance. At a stationary crawl (each page visited at
  its rate) the link credit rates solve ``h = tau + (1 - eps) P^T h`` with a uniform ``tau``:
  ``x`` is exactly the PageRank above.

Invariants (tested):

* **cash is conserved**: ``sum(C) + virtual_cash == 1`` after every public operation (up to float
  rounding); nothing here creates or destroys cash (the credit is a measure, not money);
* ``G`` never decreases, and grows by exactly the cash absorbed by visits and virtual payouts;
* with the unbounded history, Lemma 2.3 holds for the credit: what a page received through links
  is ``sum_{i -> j} share(i, j) * K[i]``, ``K[i]`` the credit page ``i`` passed on.

Storage. Pages are dense integer ids ``0..n-1`` (an optional key map turns request fingerprints into
ids). Per page the engine keeps seven numpy arrays: stored cash (8 bytes), link-credit history (8),
teleport-credit baseline (8), link credit held (8), G-time of the last visit (8), visit count (4)
and flags (1): 45 bytes, plus what the window policy adds: 16 for the default unbounded
estimator (two moments of the received credit, see
:class:`~scrapy_opic.opic.window.UnboundedHistory`), 0 for ``unbounded:lemma`` and G-clock
interpolation, 8 for wall-clock interpolation.

The virtual page's payout is a broadcast, so it is never a loop: two running accumulators hold the
cash paid so far *per page* to all pages (``acc_all``) and to unfetched pages (``acc_unfetched``).
A page stores ``s = cash - accumulators at the time it last reset or joined``; its true cash is::

    C[i] = s[i] + acc_all + (acc_unfetched if i is not fetched yet else 0)

so a payout is O(1), and a page that joins later does not receive earlier payouts. A broadcast to a
set does not change the order of cash inside that set, which is what lets the Greedy selector keep
one heap per set and never touch it on a payout.

Rebasing. The accumulators grow for as long as the crawl runs: ``acc_credit`` and ``acc_all``
times the pages by about 0.4 (of the total cash) per pass over a fixed site, and ``acc_all``
times the pages as a crawl grows after its first payouts (the endowment is paid to the seeds
alone: a crawl from one seed holds ``acc_all = 1`` while its pages hold about ``1 / n``). A
page's cash is then a small difference of two large numbers, and the rounding of each payout's
addition to ``acc_all`` moves the cash of every live page at once: the total cash by up to
``acc_all * live`` float epsilons per payout, an error that grows with the passes (faster than
their number). Importance, a ratio of values that drift together, is not affected.

:meth:`OpicEngine.rebase` folds the accumulators into the per-page values (``s += offset``,
``cb -= acc_credit``) and restarts them at 0: no true value changes (cash bit for bit), and a
new page's back pay starts at ``-credit_base``, the teleport credit given before the last
rebase. :meth:`OpicEngine.payout` rebases by itself when ``acc_all * live + acc_unfetched *
n_unfetched`` or ``acc_credit`` passes ``rebase_at`` (default 2^10: a payout's rounding moves
the total cash by at most about 1e-13). That is every 2,500 passes or so over a fixed site, or
once a crawl knows about a thousand times as many pages as it had seeds, and never in the
short sequences of the differential test (56 at most); it costs two multiplications per payout
and, per rebase, O(n) vectorised. A lower ``rebase_at`` keeps the cash closer to what floats
storing it directly would hold, at the price of rebases in short crawls. (``tests/test_engine.py``
compares the engine with the same crawl stored in long doubles, with and without rebases.)

``G`` is not rebased: it is the clock (it never decreases) and the time of the received-credit
moments. ``G - last_g`` (what G-clock windows read) loses bits as ``G`` grows (log2 of the
passes) however the values are stored, as it would in a model storing them directly.

Two paths share that state and these formulas: :meth:`OpicEngine.visit` applies one event in pure
Python (the Scrapy scheduler), :meth:`OpicEngine.visit_batch` visits many pages at once with numpy
(the simulator). In a batch every page's cash is taken at the same instant and then paid out; a
test checks that both paths agree.
"""

from __future__ import annotations

import mmap
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .constants import CLOSED, FETCHED, INITIAL, RATE_DECAY, SLOPE_NOISE, VISIT_DECAY
from .window import WindowPolicy, parse_window


def mix(est: np.ndarray, flags: np.ndarray, a: float, total: float, kept: int) -> np.ndarray:
    """Importance from the window's estimates ``est`` of pages with ``flags``: PageRank's split,
    the teleport share ``a / kept`` plus ``1 - a`` by share of the link credit (``total``: the
    sum of the estimates of the open pages). A closed page is no page to link to: its credit
    counts for nothing, so a page never fetched for good (robots.txt, offsite) holds the
    teleport share, what PageRank gives a page no link leads to; a page *gone* (fetched, then
    closed: 404, 410, a permanent redirect) holds nothing, and ``kept`` counts the pages that
    are not gone. Sums to 1 over all pages."""
    closed = (flags & CLOSED) != 0
    if total > 0:
        out = a / kept + (1.0 - a) / total * np.where(closed, 0.0, est)
    else:
        out = np.full(len(est), 1.0 / kept)
    out[closed & ((flags & FETCHED) != 0)] = 0.0
    return out


def importance_of_parts(engines: Sequence[OpicEngine]) -> list[np.ndarray]:
    """The importance of every page of ``engines``, the parts of one crawl (one engine, or the
    partitions of a crawl a process owns: their clocks are one), per engine: :func:`mix` over
    all their pages together, the teleport share and the crawl's page count (its view's, if
    any) the first engine's."""
    ests = [e.estimates() for e in engines]
    flags = [e.flags[: e.n] for e in engines]
    total = sum(float(est[(f & CLOSED) == 0].sum()) for est, f in zip(ests, flags))
    gone = sum(int((((f & CLOSED) != 0) & ((f & FETCHED) != 0)).sum()) for f in flags)
    first = engines[0]
    n_all = first.view.n if first.view is not None else sum(e.n for e in engines)
    a = first.teleport_share()
    return [mix(est, f, a, total, max(1, n_all - gone)) for est, f in zip(ests, flags)]


def _view(a: np.ndarray) -> Any:
    """A memoryview of ``a``: item access as Python numbers, without numpy's scalar overhead
    (the per-event path). Typed loosely: typeshed's memoryview knows no float items."""
    return memoryview(a)  # type: ignore[arg-type]


def _with_outside(
    local: int,
    weights: Sequence[float] | None,
    virtual_weight: float,
    outside: Sequence[float],
) -> Sequence[float] | None:
    """The weights of a visit's ``local`` links followed by its ``outside`` ones (``None``: all
    1)."""
    if weights is None and not virtual_weight and all(w == 1.0 for w in outside):
        return None
    return [*([1.0] * local if weights is None else weights), *outside]


class CashObserver(Protocol):
    """Something (a selection strategy) that must hear when pages gain cash or the engine grows."""

    def raised(self, i: int) -> None:
        """Page ``i`` just gained cash (called once per credit, so a heap can sift at once)."""

    def changed(self, ids: Iterable[int]) -> None:
        """Many pages gained cash at once (the batch path): rebuild rather than sift."""

    def taken(self, ids: Iterable[int]) -> None:
        """Pages were visited or lost their cash."""

    def grow(self, capacity: int) -> None: ...

    def rebased(self) -> None:
        """The engine rebased (:meth:`OpicEngine.rebase`): every page's stored cash moved, by one
        amount for the pages fetched and another for those never fetched (none for closed
        pages); no true cash changed. Anything keyed by stored cash, or holding a copy of it,
        must re-read it."""


#: Pages a whole-frontier scan (total cash, the best page) handles at a time: its memory.
SCAN = 1 << 18
#: From this capacity on, the per-page arrays grow by a quarter, not double.
GROW_SLOWER = 1 << 20
#: Arrays of at least this many bytes are anonymous mappings of their own (see zeros).
MAPPED_BYTES = 1 << 20


def zeros(n: int, dtype: np.dtype | type) -> np.ndarray:
    """A zeroed array of ``n`` items whose pages take no memory until written, whatever the
    allocator did before: a large one is a fresh anonymous mapping (``np.zeros`` may reuse
    freed heap memory, which it must then clear, touching it all)."""
    dtype = np.dtype(dtype)
    size = n * dtype.itemsize
    if size < MAPPED_BYTES:
        return np.zeros(n, dtype)
    return np.frombuffer(mmap.mmap(-1, size), dtype, count=n)


class PageKeys(Protocol):
    """How page keys map to dense page ids (the engine's :meth:`OpicEngine.page`)."""

    def get(self, key: Hashable) -> int | None:
        """The id of ``key``, or None."""

    def add(self, key: Hashable, i: int) -> None:
        """``key`` (not known yet) is page ``i``, the page just added."""

    def key_of(self, i: int) -> Hashable | None:
        """The key of page ``i`` (None if it has none, or if this map cannot tell)."""

    def nbytes(self) -> int: ...


class DictKeys:
    """Any hashable keys, in a dict and a list (about 100 bytes per page beyond the keys
    themselves: the in-memory frontier's and the simulator's map; the embedded store uses a
    compact index of key hashes instead)."""

    def __init__(self, keys: Sequence[Hashable | None] = ()) -> None:
        self._keys: list[Hashable | None] = list(keys)
        self._ids: dict[Hashable, int] = {k: i for i, k in enumerate(self._keys) if k is not None}

    def get(self, key: Hashable) -> int | None:
        return self._ids.get(key)

    def add(self, key: Hashable, i: int) -> None:
        keys = self._keys
        if len(keys) < i:  # pages added without keys before this one
            keys.extend([None] * (i - len(keys)))
        self._ids[key] = i
        keys.append(key)

    def key_of(self, i: int) -> Hashable | None:
        return self._keys[i] if i < len(self._keys) else None

    def listing(self, n: int) -> list[Hashable | None]:
        """The keys of pages ``0..n-1``."""
        return self._keys[:n] + [None] * max(0, n - len(self._keys))

    def nbytes(self) -> int:
        return sys.getsizeof(self._ids) + sys.getsizeof(self._keys)


class CrawlView(NamedTuple):
    """What one partition's engine knows of the rest of its crawl (a pooled engine: see
    :mod:`~scrapy_opic.opic.partition`), as the crawl's pool last told it: the live pages and
    the pages never fetched in the *other* partitions (how the virtual page's cash is split),
    and the crawl's sums that tell a page's importance (:meth:`OpicEngine.importance_of`)."""

    live_others: int  #: live pages of the other partitions
    unfetched_others: int  #: of which never fetched
    n: int  #: pages known in the crawl
    credit_total: float  #: link credit received by all pages
    b_total: float  #: the received-credit moments' sums (the regression estimator)
    d_total: float
    credit_passed: float  #: credit passed on by visits, and by dangling pages' visits
    credit_dangling: float
    normaliser: float  #: the sum of the window's estimates (windowed policies)
    teleport: float = 0.0  #: the teleport credit every page of the crawl was given


class OpicEngine:
    """On-line Page Importance Computation over pages with dense integer ids.

    :param epsilon: share of every visit's cash paid to the virtual page (0 < epsilon <= 1). The
        fixpoint is PageRank with damping ``1 - epsilon``.
    :param refresh: share of the virtual page's payout that goes to all known pages; the rest goes
        to pages not fetched yet (discovery). ``1.0`` = PageRank fixpoint, ``0.0`` = discovery.
    :param window: a :class:`~scrapy_opic.opic.window.WindowPolicy` or a spec such as
        ``"interpolation:8"``; default unbounded history (static OPIC).
    :param self_links: keep links from a page to itself. Off by default: a self-link is not an
        endorsement (navigation bars link every page to itself), and keeping it lets a page feed
        its own cash back. The simulator drops them from the graph too, so the reference PageRank
        is computed on the same graph.
    :param default_history: rate of cash per time unit assumed for a page just discovered (the
        paper's "default history"); ``None`` learns it as a running mean over the pages' first
        visits. Used by the windowed policies; the unbounded history needs no prior.
    :param capacity: initial number of page slots (grows by doubling).
    :param time_fn: wall clock for ``clock="wall"`` windows (injectable for tests).
    :param keys: how page keys map to ids (:class:`PageKeys`); default :class:`DictKeys`.
    :param rebase_at: :meth:`payout` calls :meth:`rebase` when an accumulator, against the scale
        of the values it is added to, passes this (see "Rebasing" in the module docstring);
        ``None`` or 0: never.
    """

    #: Default ``rebase_at``: 2^10, at most about 10 of a float's 53 bits lost to the
    #: accumulators before a rebase; reached after thousands of passes (or once a crawl started
    #: from a few seeds knows a thousand times as many pages), never in a short test sequence.
    REBASE_AT = 1024.0

    def __init__(
        self,
        *,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        window: WindowPolicy | str | None = None,
        self_links: bool = False,
        default_history: float | None = None,
        capacity: int = 1024,
        time_fn: Callable[[], float] = time.time,
        keys: PageKeys | None = None,
        rebase_at: float | None = REBASE_AT,
    ) -> None:
        if not 0.0 < epsilon <= 1.0:
            raise ValueError("epsilon must be in (0, 1]")
        if not 0.0 <= refresh <= 1.0:
            raise ValueError("refresh must be in [0, 1]")
        self.epsilon = float(epsilon)
        self.refresh = float(refresh)
        self.self_links = bool(self_links)
        #: A link to a closed page pays the virtual page its share (``OPIC_REFUSED_LINKS =
        #: "virtual"``), instead of being left out of the out-degree. A setting, not state.
        self.closed_links_virtual = False
        #: A partition of a crawl over several engines: the virtual page's cash goes to the
        #: crawl's pool instead of being paid out here (see :meth:`payout`). A setting.
        self.pooled = False
        #: The crawl's totals as its pool last told them (a pooled engine), for the importance
        #: of one page (:meth:`importance_of`); ``None``: this engine's own.
        self.view: CrawlView | None = None
        self.time_fn = time_fn
        self.rebase_at = float(rebase_at or 0.0)  #: a setting, not state (0: never rebase)
        self.window: WindowPolicy = parse_window(window)
        self._learn_default = default_history is None
        self.default_rate = 0.0 if default_history is None else float(default_history)

        # Global scalars.
        self.n = 0
        self.G = 0.0  #: the clock: total history (real pages + virtual page payouts)
        #: A pooled engine: the part of G that the rest of the crawl made (see set_clock), and
        #: the virtual page's cash that waits for the pool (see payout).
        self.g_others = 0.0
        self.pool_all = self.pool_unfetched = self.pool_credit = 0.0
        self.g_real = 0.0  #: cash absorbed by real pages' visits
        self.virtual_cash = 1.0  #: all cash starts in the virtual page
        self.virtual_history = 0.0  #: cash the virtual page has paid out
        self.acc_all = 0.0
        self.acc_unfetched = 0.0
        self.n_unfetched = 0  #: live pages never fetched
        self.n_closed = 0  #: pages closed for good (see close_page)
        self.n_initial = 0
        self.c0 = 0.0  #: initial cash of pages flagged INITIAL
        self.visit_count = 0
        self._cash_at_visit_ema = 0.0  # see cash_at_visit_x_n
        # Credit (see "Importance" in the module docstring): the teleport credit every page has
        # been given so far, the link credit received by all pages, and the credit that passed
        # through visits (all of them / dangling ones: the flow share of dangling pages).
        self.acc_credit = 0.0
        #: Teleport credit every page was given before the last rebase (a new page's back pay
        #: starts there: its baseline is ``-credit_base``), and the number of rebases.
        self.credit_base = 0.0
        self.rebases = 0
        self.credit_total = 0.0
        self.credit_passed = 0.0
        self.credit_dangling = 0.0
        # First and second G-moments of the link credit every page received (for the regression
        # estimator), per page and in total.
        self._moments = getattr(self.window, "needs_moments", False)
        self.b_total = self.d_total = 0.0

        self.capacity = 0
        self.stored = np.zeros(0)
        self.hist = np.zeros(0)
        self.baseline = np.zeros(0)
        self.held_credit = np.zeros(0)
        self.last_g = np.zeros(0)
        self.visits = np.zeros(0, dtype=np.uint32)
        self.flags = np.zeros(0, dtype=np.uint8)
        self.last_t = np.zeros(0)
        self._b = np.zeros(0)
        self._d = np.zeros(0)
        self._wall = self.window.clock == "wall"
        self._windowed = self.window.windowed
        self._observers: list[CashObserver] = []
        #: The page keys (see :class:`PageKeys`): any hashable keys in a dict by default.
        self.keys: PageKeys = DictKeys() if keys is None else keys
        self._norm_cache: tuple[float, int, float] | None = None
        self._grow(max(1, int(capacity)))
        self.window.bind(self)

    # ------------------------------------------------------------------ storage
    def _grow(self, need: int) -> None:
        if need <= self.capacity:
            return
        # Doubling while small; by a quarter from GROW_SLOWER pages on, so that the arrays that
        # cannot leave their spare capacity untouched (the frontier's, the selection's) waste
        # at most a quarter of a page's bytes.
        step = self.capacity * 2 if self.capacity < GROW_SLOWER else self.capacity * 5 // 4
        cap = max(need, step)
        # The views go first: each old array is then freed as soon as its copy is made (the
        # memory a growth takes beyond the arrays is one array's, not all of them).
        self.stored_mv: Any = None
        self._hist_mv: Any = None
        self.baseline_mv: Any = None
        self.held_mv: Any = None
        self._last_g_mv: Any = None
        self._visits_mv: Any = None
        self.flags_mv: Any = None
        self._b_mv: Any = None
        self._d_mv: Any = None

        def grown(a: np.ndarray) -> np.ndarray:
            b = zeros(cap, a.dtype)
            b[: self.n] = a[: self.n]
            return b

        self.stored = grown(self.stored)
        self.hist = grown(self.hist)
        self.baseline = grown(self.baseline)
        self.held_credit = grown(self.held_credit)
        self.last_g = grown(self.last_g)
        self.visits = grown(self.visits)
        self.flags = grown(self.flags)
        if self._wall:
            self.last_t = grown(self.last_t)
        if self._moments:
            self._b = grown(self._b)
            self._d = grown(self._d)
            self._b_mv = _view(self._b)
            self._d_mv = _view(self._d)
        self.capacity = cap
        # memoryviews give the per-event path Python floats/ints without numpy scalar overhead.
        self.stored_mv = _view(self.stored)
        self._hist_mv = _view(self.hist)
        self.baseline_mv = _view(self.baseline)
        self.held_mv = _view(self.held_credit)
        self._last_g_mv = _view(self.last_g)
        self._visits_mv = _view(self.visits)
        self.flags_mv = _view(self.flags)
        if self.window.engine is self:
            self.window.grow(cap)
        for obs in self._observers:
            obs.grow(cap)

    def reserve(self, n: int) -> None:
        """Room for ``n`` pages (a store about to fill the rows of ``n`` saved pages)."""
        self._grow(n)

    def is_closed(self, i: int) -> bool:
        return bool(self.flags_mv[i] & CLOSED)

    def add_observer(self, obs: CashObserver) -> None:
        obs.grow(self.capacity)
        self._observers.append(obs)

    def nbytes(self) -> int:
        """Bytes held by the per-page arrays (engine + window policy), at current capacity."""
        own = sum(
            a.nbytes
            for a in (
                self.stored,
                self.hist,
                self.baseline,
                self.held_credit,
                self.last_g,
                self.visits,
                self.flags,
            )
        )
        own += self._b.nbytes + self._d.nbytes
        return own + (self.last_t.nbytes if self._wall else 0) + self.window.nbytes()

    # ------------------------------------------------------------------ pages
    def now(self) -> float:
        return self.time_fn() if self._wall else self.G

    def add_pages(self, count: int) -> np.ndarray:
        """Add ``count`` new pages (cash 0, not fetched); returns their ids."""
        start = self.n
        self._grow(start + count)
        ids = np.arange(start, start + count)
        self.stored[ids] = -(self.acc_all + self.acc_unfetched)
        if self._moments:
            self._b[ids] = 0.0
            self._d[ids] = 0.0
        self.hist[ids] = 0.0
        self.baseline[
            ids
        ] = -self.credit_base  # back pay: the teleport credit given before it joined
        self.held_credit[ids] = 0.0
        self.last_g[ids] = self.G
        self.visits[ids] = 0
        self.flags[ids] = 0
        now = self.now()
        if self._wall:
            self.last_t[ids] = now
        self.n += count
        self.n_unfetched += count
        self.window.on_new(self.hist, ids, now, self.default_rate)
        return ids

    def add_page(self) -> int:
        """Add one page (scalar fast path of :meth:`add_pages`)."""
        i = self.n
        if i >= self.capacity:
            self._grow(i + 1)
        self.stored_mv[i] = -(self.acc_all + self.acc_unfetched)
        if self._moments:
            self._b_mv[i] = 0.0
            self._d_mv[i] = 0.0
        self._hist_mv[i] = 0.0
        self.baseline_mv[i] = -self.credit_base  # back pay: all teleport credit given before
        self.held_mv[i] = 0.0
        self._last_g_mv[i] = self.G
        self._visits_mv[i] = 0
        self.flags_mv[i] = 0
        self.n = i + 1
        self.n_unfetched += 1
        if self._windowed:
            now = self.now()
            if self._wall:
                self.last_t[i] = now
            self.window.on_new(self.hist, np.array([i]), now, self.default_rate)
        return i

    # Keyed access: the Scrapy layer keys pages by request fingerprint.
    def page(self, key: Hashable) -> int:
        """Id of the page with this key, creating it (cash 0) if unknown."""
        i = self.keys.get(key)
        if i is None:
            i = self.add_page()
            self.keys.add(key, i)
        return i

    def id_of(self, key: Hashable) -> int | None:
        return self.keys.get(key)

    def key_of(self, i: int) -> Hashable | None:
        return self.keys.key_of(i)

    def __len__(self) -> int:
        return self.n

    def __contains__(self, key: Hashable) -> bool:
        return self.keys.get(key) is not None

    def init_uniform(self) -> None:
        """The paper's initialisation ``C[i] = 1/n``: spread the virtual page's cash over all
        current pages as their initial cash ``C0`` (flag ``INITIAL``). Call once, before visits."""
        if self.n_initial or self.n == 0:
            raise RuntimeError("init_uniform() needs pages and can only be called once")
        n = self.n
        self.c0 = self.virtual_cash / n
        self.stored[:n] += self.c0
        self.flags[:n] |= INITIAL
        self.n_initial = n
        self.acc_credit += self.virtual_cash  # the endowment as every page's prior credit
        self.virtual_cash = 0.0

    # ------------------------------------------------------------------ reading cash
    def _offsets(self, ids: np.ndarray) -> np.ndarray:
        fl = self.flags[ids]
        off = self.acc_all + self.acc_unfetched * ((fl & FETCHED) == 0)
        return np.where(fl & CLOSED, 0.0, off) if self.n_closed else off

    def cash(self, ids: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """True cash of ``ids`` (all pages if ``None``)."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        return self.stored[ids] + self._offsets(ids)

    def _offset(self, fl: int) -> float:
        """What the accumulators add to the stored cash of a page with flags ``fl``."""
        if fl & CLOSED:
            return 0.0
        return self.acc_all if fl & FETCHED else self.acc_all + self.acc_unfetched

    def cash_of(self, i: int) -> float:
        return self.stored_mv[i] + self._offset(self.flags_mv[i])

    def initial_cash(self, ids: np.ndarray) -> np.ndarray:
        """``C0`` of each page (the uniform initial cash, or 0)."""
        return self.c0 * ((self.flags[ids] & INITIAL) != 0)

    def received_moments(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sum a*t, sum a*t^2)`` over the cash ``a`` each page received at G-time ``t``
        (needs an estimator that tracks them, e.g. ``unbounded:regression``)."""
        if not self._moments:
            raise RuntimeError("this engine does not track received-credit moments")
        return self._b[ids], self._d[ids]

    def received_total(self) -> float:
        """Link credit received by all pages so far (``sum(hist + link credit held)`` for the
        unbounded history), in O(1): the crawl's, for a partition that has its :attr:`view`."""
        return self.view.credit_total if self.view is not None else self.credit_total

    def link_credit(self, ids: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """Link credit each page received since its last visit (what the window policy will
        absorb at the next one)."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        return self.held_credit[ids]

    def teleport_share(self) -> float:
        """PageRank's uniform share ``a = eps + (1 - eps) * D`` (``D``: the share of the credit
        flow that passed through dangling pages): a page with no in-link has importance
        ``a / n``."""
        view = self.view
        passed = self.credit_passed if view is None else view.credit_passed
        spent = self.credit_dangling if view is None else view.credit_dangling
        dangling = spent / passed if passed > 0 else 0.0
        return self.epsilon + (1.0 - self.epsilon) * dangling

    def slope_total(self) -> float:
        """Sum over pages of the regression slope of their received cash, in O(1)."""
        G = self.G
        view = self.view
        b, d = (self.b_total, self.d_total) if view is None else (view.b_total, view.d_total)
        spread = G * b - d
        return 6.0 * spread / G**3 if G > 0 and spread > SLOPE_NOISE * G * b else 0.0

    def total_cash(self) -> float:
        """Sum of all cash including the virtual page: 1 up to rounding. O(n) time, for checks;
        memory bounded (:data:`SCAN`) pages at a time."""
        total = 0.0
        for lo in range(0, self.n, SCAN):
            total += float(self.cash(np.arange(lo, min(self.n, lo + SCAN))).sum())
        return total + self.virtual_cash + self.pool_all + self.pool_unfetched

    def fetched(self, ids: np.ndarray | None = None) -> np.ndarray:
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        return (self.flags[ids] & FETCHED) != 0

    # ------------------------------------------------------------------ cash movements
    def _take(self, i: int) -> float:
        """Take all of page ``i``'s cash (resetting it to 0) and mark it fetched."""
        fl = self.flags_mv[i]
        if fl & CLOSED:  # fetched all the same (a dont_filter request): open again first
            self.reopen_page(i)
            fl = self.flags_mv[i]
        if fl & FETCHED:
            c = self.stored_mv[i] + self.acc_all
        else:
            c = self.stored_mv[i] + self.acc_all + self.acc_unfetched
            self.flags_mv[i] = fl | FETCHED
            self.n_unfetched -= 1
        self.stored_mv[i] = -self.acc_all
        return c

    def visit(
        self,
        i: int,
        children: Sequence[int] = (),
        weights: Sequence[float] | None = None,
        virtual_weight: float = 0.0,
    ) -> float:
        """Visit page ``i`` whose out-links are ``children``; returns the cash it absorbed.

        ``weights`` (aligned with ``children``) split the non-virtual share unequally, e.g. to
        weigh external links above internal ones. ``virtual_weight`` is the total weight of
        links that will not be followed (offsite): their share goes to the virtual page.
        A page with no children is dangling: all its
        cash goes to the virtual page.

        The virtual page pays out later, in :meth:`payout`, which the selection strategies call
        before every pop: so consecutive visits see the same virtual page a batch would.
        """
        return self._visit(i, children, weights, virtual_weight, ())[0]

    def visit_out(
        self,
        i: int,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
        outside: Sequence[float],
    ) -> tuple[float, list[tuple[float, float]]]:
        """:meth:`visit` of a page whose links also lead to pages this engine does not hold (a
        partition's page linking into other partitions): ``outside`` gives each such link's
        weight. They count in the out-degree like any link; their shares are not credited here
        but returned, ``(cash, credit)`` per outside link in order, for the caller to pay where
        those pages live. Returns the cash absorbed and those shares; the cash absorbed equals
        what stays here plus their sum."""
        return self._visit(i, children, weights, virtual_weight, outside)

    def _visit(
        self,
        i: int,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
        outside: Sequence[float],
    ) -> tuple[float, list[tuple[float, float]]]:
        first = not (self.flags_mv[i] & FETCHED)
        c = self._take(i)
        for obs in self._observers:
            obs.taken((i,))
        now = self.now()
        last = self._last_g_mv[i] if not self._wall else float(self.last_t[i])
        received, k = self._take_credit(i)  # the window absorbs what the links brought
        self.window.absorb_one(self._hist_mv, i, received, now, last)
        self._last_g_mv[i] = self.G
        if self._wall:
            self.last_t[i] = now
        self._visits_mv[i] += 1
        self.G += c
        self.g_real += c
        self._record_visit(c, 1)
        if first and self._learn_default and self._windowed:
            self._learn_rate(self.window.estimate_one(i, 0.0, now), 1)
        return c, self._distribute(i, c, k, children, weights, virtual_weight, outside)

    def _take_credit(self, i: int) -> tuple[float, float]:
        """Take all of page ``i``'s credit: returns the link credit it received since its last
        visit and the credit it holds (that, plus its teleport credit since its last visit, or
        since the start for a new page: back pay)."""
        received = self.held_mv[i]
        k = self.acc_credit - self.baseline_mv[i] + received
        self.baseline_mv[i] = self.acc_credit
        self.held_mv[i] = 0.0
        return received, k

    def _live_links(
        self,
        i: int,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
    ) -> tuple[Sequence[int], Sequence[float] | None, float]:
        """The links of page ``i`` that count: a self-link and a link to a closed page are no
        links (a closed page is no page), unless ``closed_links_virtual``, where a link to a
        closed page gives its share to the virtual page instead, as a refused link does."""
        if (self.self_links or i not in children) and not (
            self.n_closed and any(self.flags_mv[j] & CLOSED for j in children)
        ):
            return children, weights, virtual_weight
        fl, own = self.flags_mv, -1 if self.self_links else i
        keep = [m for m, j in enumerate(children) if j != own and not fl[j] & CLOSED]
        if self.closed_links_virtual:
            for m, j in enumerate(children):
                if j != own and fl[j] & CLOSED:
                    virtual_weight += 1.0 if weights is None else weights[m]
        return (
            [children[m] for m in keep],
            None if weights is None else [weights[m] for m in keep],
            virtual_weight,
        )

    def _distribute(
        self,
        i: int,
        c: float,
        k: float,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
        outside: Sequence[float] = (),
    ) -> list[tuple[float, float]]:
        """Pay cash ``c`` and credit ``k`` of page ``i`` over its links, in the same shares: the
        local ``children`` are credited here, the ``outside`` links' shares are returned (see
        :meth:`visit_out`)."""
        children, weights, virtual_weight = self._live_links(i, children, weights, virtual_weight)
        local = len(children)
        d = local + len(outside)
        self.credit_passed += k
        if d == 0:  # dangling: the cash goes to the virtual page, the credit is spent
            self.virtual_cash += c
            self.credit_dangling += k
            return []
        to_virtual = self.epsilon * c
        rest = c - to_virtual
        k_rest = k - self.epsilon * k
        if outside:
            weights = _with_outside(local, weights, virtual_weight, outside)
        if weights is None and not virtual_weight:
            shares = [rest / d] * d
            credits = [k_rest / d] * d
        else:
            if weights is None:
                weights = [1.0] * d
            total_w = float(sum(weights)) + virtual_weight
            if not total_w > 0:  # no usable weight: behave as a dangling page
                self.virtual_cash += c
                self.credit_dangling += k
                return [(0.0, 0.0)] * len(outside)
            shares = [rest * w / total_w for w in weights]
            credits = [k_rest * w / total_w for w in weights]
            to_virtual += rest * virtual_weight / total_w
        self._credit(children, shares[:local], credits[:local])
        self.virtual_cash += to_virtual
        return list(zip(shares[local:], credits[local:]))

    def _credit(
        self, ids: Sequence[int], amounts: Sequence[float], credits: Sequence[float]
    ) -> None:
        """Add cash and link credit taken from elsewhere (the caller books the debit).
        Observers hear about each credit right after it, so a heap sifts one changed key at a
        time. One pass per link: the per-visit hot path."""
        s, observers = self.stored_mv, self._observers
        lc = self.held_mv
        total = 0.0
        if not self._moments:
            for j, x, y in zip(ids, amounts, credits):
                s[j] += x
                lc[j] += y
                total += y
                for obs in observers:
                    obs.raised(j)
            self.credit_total += total
            return
        t = self.G
        tt = t * t
        b, d = self._b_mv, self._d_mv
        for j, x, y in zip(ids, amounts, credits):
            s[j] += x
            lc[j] += y
            b[j] += y * t
            d[j] += y * tt
            total += y
            for obs in observers:
                obs.raised(j)
        self.credit_total += total
        self.b_total += total * t
        self.d_total += total * tt

    def visit_batch(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        children: np.ndarray,
        weights: np.ndarray | None = None,
    ) -> float:
        """Visit the distinct pages ``ids`` at once; returns the total cash absorbed.

        The out-links of ``ids[k]`` are ``children[offsets[k]:offsets[k + 1]]`` (CSR layout, with
        optional per-link ``weights``). Every page's cash is taken at the same instant (the batch's
        G-time), then all of it is paid out, so a page of the batch linked from another page of the
        batch keeps what it receives for its next visit.
        """
        ids = np.asarray(ids, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        children = np.asarray(children, dtype=np.int64)
        if ids.size == 0:
            return 0.0
        c, k, total = self._absorb_batch(ids)
        children, row, w = self._batch_links(ids, offsets, children, weights)
        if w is None:
            wsum = np.bincount(row, minlength=ids.size).astype(float)
        else:
            wsum = np.bincount(row, weights=w, minlength=ids.size)
        live = wsum > 0
        to_virtual = float(c[~live].sum()) + self.epsilon * float(c[live].sum())
        self.credit_passed += float(k.sum())
        self.credit_dangling += float(k[~live].sum())
        if children.size:
            per_weight = np.zeros(ids.size)
            per_weight[live] = (1.0 - self.epsilon) * c[live] / wsum[live]
            share = per_weight[row] if w is None else per_weight[row] * w
            per_weight[live] = (1.0 - self.epsilon) * k[live] / wsum[live]
            got = per_weight[row] if w is None else per_weight[row] * w
            self._credit_batch(children, share, got)
        self.virtual_cash += to_virtual
        return total

    def _absorb_batch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The first half of :meth:`visit_batch`: every page of ``ids`` gives up its cash and
        link credit at the batch's instant, into its history; returns the cash and credit
        taken per page, and the total cash (the clock moved by it)."""
        for obs in self._observers:
            obs.taken(ids.tolist())
        if self.n_closed:
            for i in ids[(self.flags[ids] & CLOSED) != 0].tolist():
                self.reopen_page(i)
        flags = self.flags[ids]
        first = (flags & FETCHED) == 0
        c = self.stored[ids] + self.acc_all + self.acc_unfetched * first
        self.flags[ids] = flags | FETCHED
        self.n_unfetched -= int(first.sum())
        self.stored[ids] = -self.acc_all
        received = self.held_credit[ids]
        k = self.acc_credit - self.baseline[ids] + received
        self.baseline[ids] = self.acc_credit
        self.held_credit[ids] = 0.0
        now = self.now()
        last = (self.last_t if self._wall else self.last_g)[ids]
        self.window.absorb(self.hist, ids, received, now, last)
        self.last_g[ids] = self.G
        if self._wall:
            self.last_t[ids] = now
        self.visits[ids] += 1
        total = float(c.sum())
        self.G += total
        self.g_real += total
        self._record_visit(total / ids.size, ids.size)
        if self._learn_default and first.any() and self._windowed:
            new = ids[first]
            rates = self.window.estimate(new, np.zeros(new.size), now)
            self._learn_rate(float(rates.mean()), new.size)
        return c, k, total

    def _batch_links(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        children: np.ndarray,
        weights: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The links of :meth:`visit_batch` that count: ``(children, the batch row of each,
        their weights)``, less self-links (unless kept) and links to closed pages."""
        deg = np.diff(offsets)
        row = np.repeat(np.arange(ids.size), deg)
        w = None if weights is None else np.asarray(weights, dtype=float)
        if children.size and (not self.self_links or self.n_closed):
            keep = np.ones(children.size, dtype=bool)
            if not self.self_links:
                keep &= children != ids[row]
            if self.n_closed:  # links to closed pages are no links
                keep &= (self.flags[children] & CLOSED) == 0
            if not keep.all():
                children, row = children[keep], row[keep]
                w = None if w is None else w[keep]
        return children, row, w

    def _credit_batch(self, children: np.ndarray, share: np.ndarray, got: np.ndarray) -> None:
        """Credit cash ``share`` and link credit ``got`` to ``children`` (repeats summed)."""
        if children.size * 8 < self.n:
            np.add.at(self.stored, children, share)
            np.add.at(self.held_credit, children, got)
        else:
            self.stored[: self.n] += np.bincount(children, weights=share, minlength=self.n)
            self.held_credit[: self.n] += np.bincount(children, weights=got, minlength=self.n)
        paid = float(got.sum())
        self.credit_total += paid
        if self._moments:
            t = self.G
            np.add.at(self._b, children, got * t)
            np.add.at(self._d, children, got * (t * t))
            self.b_total += paid * t
            self.d_total += paid * t * t
        if self._observers:
            raised = np.unique(children).tolist()
            for obs in self._observers:
                obs.changed(raised)

    def forfeit(self, i: int) -> float:
        """Send page ``i``'s cash to the virtual page without a visit (no history, no clock):
        a page given up before it could be fetched. Returns the amount."""
        off = self._offset(self.flags_mv[i])
        c = self.stored_mv[i] + off
        self.stored_mv[i] = -off
        self.virtual_cash += c
        for obs in self._observers:
            obs.taken((i,))
        return c

    def close_page(self, i: int) -> float:
        """Close page ``i`` for good (it answered 404, robots.txt forbids it...): its cash goes
        to the virtual page, and from now on it receives nothing, neither from links (a visit
        leaves it out of its out-degree, as a link to no page) nor from the virtual page's
        payouts (which go to the live pages only): a closed page never piles up cash. Its
        history and credit stay (what it earned before). Returns the cash moved."""
        fl = self.flags_mv[i]
        if fl & CLOSED:
            return 0.0
        c = self.forfeit(i)
        self.stored_mv[i] = 0.0  # a closed page's stored cash is its cash: no accumulator applies
        self.flags_mv[i] = fl | CLOSED
        self.n_closed += 1
        if not fl & FETCHED:
            self.n_unfetched -= 1
        return c

    def links_changed(self, share: float) -> None:
        """A page was visited again and ``share`` of its links (0 to 1: new or gone, of all its
        links then and now) changed since its last parsed visit (1: the page is gone): told to
        the window policy, which may adapt to the site's change
        (:class:`~.window.AdaptiveInterpolation`)."""
        self.window.observe_change(share, self.now())

    def reopen_page(self, i: int) -> None:
        """Open a closed page again (asked for once more), with no cash."""
        fl = self.flags_mv[i]
        if not fl & CLOSED:
            return
        fl &= ~CLOSED
        self.flags_mv[i] = fl
        self.n_closed -= 1
        if not fl & FETCHED:
            self.n_unfetched += 1
        self.stored_mv[i] = -self._offset(fl)

    def transfer(self, src: int, dst: int) -> float:
        """Move all of ``src``'s cash to ``dst`` (a redirect: same money, new page). ``src`` was
        fetched (its answer was the redirect): it is marked fetched, so that a continuous
        crawl's discovery share never takes it for a page it has yet to fetch."""
        if src == dst:
            return 0.0
        c, k = self.take_out(src)
        self.receive(dst, c, k)
        return c

    def take_out(self, src: int) -> tuple[float, float]:
        """Take all of page ``src``'s cash and the credit it holds, to be received by another
        page (:meth:`transfer`, or :meth:`receive` in the partition that holds it): returns
        ``(cash, credit)``. ``src`` counts as fetched, as in :meth:`transfer`."""
        c = self._take(src)
        for obs in self._observers:
            obs.taken((src,))
        # The credit goes with the cash: the target receives all that the source held.
        held, k = self._take_credit(src)
        self.credit_total -= held
        return c, k

    def receive(self, i: int, cash: float, credit: float) -> None:
        """Page ``i`` receives ``cash`` and link ``credit`` taken elsewhere (:meth:`take_out`,
        or a share of a page of another partition: see :meth:`visit_out`). A closed page is no
        page: the cash goes to the virtual page, the credit is spent."""
        if self.flags_mv[i] & CLOSED:
            self.virtual_cash += cash
            return
        self._credit((i,), (cash,), (credit,))

    def payout(self) -> float:
        """Pay the virtual page's cash out: ``refresh`` of it to all pages, the rest to unfetched
        pages (all to all pages when none is unfetched). O(1). Returns the amount paid here.

        A pooled engine (:attr:`pooled`: a partition of a crawl over several engines) pays here
        only its partition's share, by its live pages (and its pages never fetched) against the
        others' (:attr:`view`); the rest waits in :attr:`pool_all` and :attr:`pool_unfetched`,
        with the whole amount as teleport credit in :attr:`pool_credit`, for the crawl's pool,
        which pays the other partitions (:meth:`take_pooled`, :meth:`receive_payout`)."""
        v = self.virtual_cash
        live = self.n - self.n_closed  # closed pages receive nothing
        if v <= 0.0 or live == 0:
            return 0.0
        view = self.view if self.pooled else None
        others_live = view.live_others if view is not None else 0
        others_unf = view.unfetched_others if view is not None else 0
        to_unfetched = (1.0 - self.refresh) * v if self.n_unfetched or others_unf else 0.0
        to_all = v - to_unfetched
        self.virtual_cash = 0.0
        if self.pooled:
            self.pool_credit += v  # (every page of the crawl is owed this teleport credit)
        if others_live:
            # (The shares of the other partitions' pages go to the pool; without others, all
            # of it is paid here, with no rounding: the engine of a crawl of one partition.)
            own_all = to_all * live / (live + others_live)
            unf = self.n_unfetched
            own_unf = to_unfetched * unf / (unf + others_unf) if unf else 0.0
            self.pool_all += to_all - own_all
            self.pool_unfetched += to_unfetched - own_unf
            to_all, to_unfetched = own_all, own_unf
        paid = to_all + to_unfetched if others_live else v
        self.virtual_history += paid
        self.G += paid
        self._pay(to_all, to_unfetched, v)
        return paid

    def _pay(self, to_all: float, to_unfetched: float, credit: float) -> None:
        """The payout rule: ``to_all`` equally to every live page, ``to_unfetched`` equally to
        the live pages never fetched (to every live page when there is none), and ``credit`` of
        teleport credit to every page, known or not yet (see "Importance" in the module
        docstring). O(1): the accumulators. The caller has debited the cash."""
        live = self.n - self.n_closed
        if to_unfetched and not self.n_unfetched:
            to_all, to_unfetched = to_all + to_unfetched, 0.0
        self.acc_all += to_all / live
        if to_unfetched:
            self.acc_unfetched += to_unfetched / self.n_unfetched
        self.acc_credit += credit
        # One rounding of acc_all moves the cash of every live page at once: the total cash by
        # up to acc_all * live float epsilons (acc_unfetched: times the pages it pays).
        at, drift = self.rebase_at, self.acc_all * live + self.acc_unfetched * self.n_unfetched
        if at and (drift > at or self.acc_credit > at):
            self.rebase()

    # -- a partition of a crawl (see scrapy_opic.opic.partition) ------------------------------
    def take_pooled(self) -> tuple[float, float, float]:
        """The virtual page's cash that :meth:`payout` left for the pool, ``(to all pages, to
        pages never fetched)``, and the teleport credit it gave (owed to the pages of the
        other partitions too), taken (a pooled engine)."""
        out = (self.pool_all, self.pool_unfetched, self.pool_credit)
        self.pool_all = self.pool_unfetched = self.pool_credit = 0.0
        return out

    def receive_payout(self, to_all: float, to_unfetched: float, credit: float) -> None:
        """This partition's share of the other partitions' virtual cash, from the crawl's pool:
        paid as :meth:`payout` pays (its clock moves by the pool's: :meth:`set_clock`). With no
        live page to pay, the cash waits in the virtual page."""
        if self.n - self.n_closed == 0:
            self.virtual_cash += to_all + to_unfetched
            self.acc_credit += credit
            return
        self.virtual_history += to_all + to_unfetched
        self._pay(to_all, to_unfetched, credit)

    def teleport_to(self, total: float) -> None:
        """A pooled engine: every page has been given ``total`` teleport credit in the whole
        crawl (the pool's sum of every partition's payouts): what this engine's pages miss of
        it (payouts of other partitions, those before this partition existed) is given now."""
        given = self.acc_credit + self.credit_base
        if total > given:
            self.acc_credit += total - given
            if self.rebase_at and self.acc_credit > self.rebase_at:
                self.rebase()

    def shift_clock(self, delta: float) -> None:
        """Move this engine's G-clock ``delta`` ahead, every time it recorded with it (the last
        visits, the window's measures, the received-credit moments) with it: what a partition
        whose clock lags the crawl's does to be read with the crawl's clock (an export). Wall
        clocks need no shift."""
        if delta <= 0 or self._wall:
            return
        n = self.n
        self.G += delta
        self.g_others += delta
        self.last_g[:n] += delta
        if self._moments:
            received = self.hist[:n] + self.held_credit[:n]  # (what each page received: sum a)
            self._d[:n] += 2.0 * delta * self._b[:n] + delta * delta * received
            self._b[:n] += delta * received
            self.d_total += 2.0 * delta * self.b_total + delta * delta * self.credit_total
            self.b_total += delta * self.credit_total
        self.window.shift(delta, n)

    def set_clock(self, others: float) -> None:
        """A pooled engine's clock is the crawl's: what it absorbed and paid itself plus
        ``others``, the rest of the crawl's clock as the pool last told it (never decreasing)."""
        if others > self.g_others:
            self.G += others - self.g_others
            self.g_others = others

    def rebase(self) -> None:
        """Fold the accumulators into the per-page values and restart them at 0 (see "Rebasing"
        in the module docstring): every live page's stored cash becomes its true cash, its
        teleport baseline moves by ``-acc_credit``; no true value changes (each page's cash
        is the same float :meth:`cash` returned before, its teleport credit held too). O(n),
        vectorised; :meth:`payout` calls it when an accumulator grows too large. Observers hear
        :meth:`CashObserver.rebased`."""
        n = self.n
        if n:
            fl = self.flags[:n]
            # The offsets cash() adds (closed pages: none), so that s becomes exactly cash().
            off = np.where(fl & FETCHED, self.acc_all, self.acc_all + self.acc_unfetched)
            if self.n_closed:
                off[(fl & CLOSED) != 0] = 0.0
            self.stored[:n] += off
            self.baseline[:n] -= self.acc_credit
        self.credit_base += self.acc_credit
        self.acc_all = self.acc_unfetched = self.acc_credit = 0.0
        self.rebases += 1
        for obs in self._observers:
            obs.rebased()

    # ------------------------------------------------------------------ persistence
    _SCALARS = (
        "n",
        "G",
        "g_real",
        "virtual_cash",
        "virtual_history",
        "acc_all",
        "acc_unfetched",
        "n_unfetched",
        "n_closed",
        "n_initial",
        "c0",
        "visit_count",
        "_cash_at_visit_ema",
        "acc_credit",
        "credit_base",
        "rebases",
        "credit_total",
        "credit_passed",
        "credit_dangling",
        "b_total",
        "d_total",
        "default_rate",
        "g_others",
        "pool_all",
        "pool_unfetched",
        "pool_credit",
    )

    def _arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {
            "s": self.stored,
            "hist": self.hist,
            "cb": self.baseline,
            "lc": self.held_credit,
            "last_g": self.last_g,
            "visits": self.visits,
            "flags": self.flags,
        }
        if self._wall:
            out["last_t"] = self.last_t
        if self._moments:
            out["b"], out["d"] = self._b, self._d
        return out

    def state_dict(self, keys: bool = True) -> dict:
        """Everything needed to rebuild this engine (parameters, scalars, per-page arrays cut to
        ``n`` rows, window state and, unless ``keys`` is false, the page keys): plain Python and
        numpy values, for a store."""
        n = self.n
        head = self.header()
        return {
            "params": head["params"],
            "scalars": head["scalars"],
            "arrays": {k: a[:n].copy() for k, a in self._arrays().items()},
            "window": self.window.state_dict(n),
            "keys": self.keys.listing(n) if keys and isinstance(self.keys, DictKeys) else [],
        }

    @classmethod
    def from_state(cls, state: dict, **kw: Any) -> OpicEngine:
        """Rebuild an engine saved by :meth:`state_dict` (``kw``: e.g. ``time_fn``)."""
        params = dict(state["params"])
        params.update(kw)
        engine = cls(capacity=max(1, state["scalars"]["n"]), **params)
        engine._grow(state["scalars"]["n"])
        for k in cls._SCALARS:
            setattr(engine, k, type(getattr(engine, k))(state["scalars"][k]))
        n = engine.n
        saved = state["arrays"]
        for k, a in engine._arrays().items():
            a[:n] = saved[k]
        engine.window.load_state(state["window"], n)
        keys = state["keys"]
        if keys:
            engine.keys = DictKeys(keys)
        return engine

    def page_arrays(self) -> dict[str, np.ndarray]:
        """Every per-page array, the engine's and then the window policy's (named ``w.<name>``),
        at capacity: row ``i`` is page ``i``. With :meth:`header`, all a store must save; the
        arrays are the engine's own (a store reads rows of them, never keeps them)."""
        out = dict(self._arrays())
        out.update({f"w.{k}": a for k, a in self.window.page_arrays().items()})
        return out

    def header(self) -> dict:
        """The engine's parameters and scalars (the window policy's included): with the rows of
        :meth:`page_arrays` for ``n`` pages, what :meth:`from_header` rebuilds it from. O(1)."""
        return {
            "params": {
                "epsilon": self.epsilon,
                "refresh": self.refresh,
                "window": self.window.spec(),
                "self_links": self.self_links,
            },
            "scalars": {k: getattr(self, k) for k in self._SCALARS},
            "window": self.window.scalars(),
            "view": None if self.view is None else tuple(self.view),
        }

    @classmethod
    def from_header(cls, header: dict, **kw: Any) -> OpicEngine:
        """An engine with the parameters and scalars of ``header`` (:meth:`header`) and room for
        its pages, whose per-page rows are still zero: the caller fills the first ``n`` rows of
        each of :meth:`page_arrays`. ``kw``: e.g. ``keys``, ``time_fn``."""
        params = dict(header["params"])
        params.update(kw)
        n = int(header["scalars"]["n"])
        engine = cls(capacity=max(1, n), **params)
        # (A scalar the header does not give keeps its initial value: a state merged from
        # several engines gives only the sums it knows.)
        for k, v in header["scalars"].items():
            if k in cls._SCALARS:
                setattr(engine, k, type(getattr(engine, k))(v))
        engine.window.load_scalars(header["window"])
        view = header.get("view")
        engine.view = None if view is None else CrawlView(*view)
        return engine

    # ------------------------------------------------------------------ statistics
    def _record_visit(self, mean_cash: float, count: int) -> None:
        self.visit_count += count
        # Running mean over roughly the last 1000 visits of (cash at visit) * n; Greedy -> 2.
        w = 1.0 - VISIT_DECAY**count
        self._cash_at_visit_ema += w * (mean_cash * self.n - self._cash_at_visit_ema)

    def _learn_rate(self, rate: float, count: int) -> None:
        w = 1.0 - RATE_DECAY**count
        self.default_rate += w * (rate - self.default_rate)

    @property
    def cash_at_visit_x_n(self) -> float:
        """Mean cash taken per visit times the number of pages, over roughly the last 1,000
        visits (the paper: it converges to 2 under Greedy). The running mean starts at 0, so it
        is divided by the weight it has gathered so far (bias correction)."""
        gathered = 1.0 - VISIT_DECAY**self.visit_count
        return self._cash_at_visit_ema / gathered if gathered > 0 else 0.0

    @property
    def error_factor(self) -> float:
        """The paper's error factor ``1 / G`` (an upper bound on the estimate's error)."""
        return 1.0 / self.G if self.G > 0 else float("inf")

    def importance(self, ids: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """Importance of ``ids`` (all pages if ``None``), normalised to sum 1 over all pages
        (:func:`mix`: closed pages hold no link credit, pages gone hold nothing)."""
        if not self.n:
            return np.zeros(0)
        out = importance_of_parts([self])[0]
        return out if ids is None else out[np.asarray(ids, dtype=np.int64)]

    def estimates(self) -> np.ndarray:
        """The window's estimate of every page's share of the history (not normalised: the
        link credit part of :meth:`importance`; comparable between the engines of one crawl's
        partitions, whose clocks are one)."""
        return self.window.estimate(np.arange(self.n), self.held_credit[: self.n], self.now())

    def estimate_total(self) -> float:
        """The sum of the window's estimates over all pages (the normaliser of
        :meth:`importance`): O(1) when the policy knows it, else a scan of :data:`SCAN` pages
        at a time."""
        total = self.window.normaliser()
        if total is not None:
            return float(total)
        now = self.now()
        total = 0.0
        for lo in range(0, self.n, SCAN):
            hi = min(self.n, lo + SCAN)
            total += float(
                self.window.estimate(np.arange(lo, hi), self.held_credit[lo:hi], now).sum()
            )
        return total

    def best_page(self) -> tuple[int, float] | None:
        """The most important page and its importance (None without pages): O(n) time,
        :data:`SCAN` pages at a time in memory."""
        n = self.n
        if not n:
            return None
        now = self.now()
        best, best_est, total = 0, -np.inf, 0.0
        for lo in range(0, n, SCAN):
            hi = min(n, lo + SCAN)
            est = self.window.estimate(np.arange(lo, hi), self.held_credit[lo:hi], now)
            est[(self.flags[lo:hi] & CLOSED) != 0] = 0.0  # (closed: no importance of its own)
            total += float(est.sum())
            k = int(est.argmax())
            if est[k] > best_est:
                best, best_est = lo + k, float(est[k])
        norm = self.window.normaliser()
        total = float(norm) if norm is not None else total
        return best, (self._mix(best_est, total) if total > 0 else 1.0 / n)

    def importance_of(self, i: int) -> float:
        """Importance of one page. O(1) for the unbounded history; windowed policies reuse a
        normaliser that is refreshed whenever the clock or the page count moved by 1%."""
        now = self.now()
        est = self.window.estimate_one(i, self.held_mv[i], now)
        total = self.normaliser()
        n = self.n if self.view is None else self.view.n
        return self._mix(est, total) if total > 0 else 1.0 / n

    def _mix(self, est: Any, total: float) -> Any:
        """PageRank's split: the teleport share ``a / n`` plus ``1 - a`` by share of the link
        credit (``est / total``; arrays or floats)."""
        a = self.teleport_share()
        return a / (self.n if self.view is None else self.view.n) + (1.0 - a) / total * est

    def normaliser(self) -> float:
        """The sum of the window's estimates (the normaliser of importance): the window's,
        the crawl's as its :attr:`view` tells, or this engine's, cached until the clock or the
        page count moves by 1%."""
        w = self.window
        total = w.normaliser()
        if total is not None:
            return total
        if self.view is not None:
            return self.view.normaliser
        cached = self._norm_cache
        if (
            cached is None
            or abs(self.G - cached[0]) > 0.01 * max(self.G, 1e-300)
            or abs(self.n - cached[1]) > 0.01 * self.n
        ):
            total = self.estimate_total()
            self._norm_cache = cached = (self.G, self.n, total)
        return cached[2]

    def stats(self) -> dict[str, float]:
        """Scalars worth watching (the Scrapy layer copies them into its stats collector)."""
        return {
            "pages": self.n,
            "fetched": self.n - self.n_unfetched - self.n_closed,
            "unfetched": self.n_unfetched,
            "closed": self.n_closed,
            "visits": self.visit_count,
            "G": self.G,
            "error_factor": self.error_factor,
            "virtual_cash": self.virtual_cash,
            "cash_at_visit_x_n": self.cash_at_visit_x_n,
        }


__all__ = ["FETCHED", "INITIAL", "CashObserver", "CrawlView", "OpicEngine"]
