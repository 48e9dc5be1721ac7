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
  fetched yet* (discovery). With ``refresh=1`` the fixpoint is PageRank with damping
  ``1 - epsilon`` and dangling mass spread uniformly (the proof: ``docs/algorithm.md``).

Importance is measured on a second flow, the *credit*, that moves with the cash but has a uniform
source: every payout gives every page, known or not yet, the same *teleport credit* (a running
total ``acc_credit``; a page discovered late is given its *back pay*), and a visit passes on the
credit the page holds in the same shares as its cash. The window policy measures each page's
*link credit*; a page's importance is PageRank's split of it (:mod:`~.importance`).

Invariants (tested):

* **cash is conserved**: ``sum(C) + virtual_cash == 1`` after every public operation (up to float
  rounding); nothing here creates or destroys cash (the credit is a measure, not money);
* ``G`` never decreases, and grows by exactly the cash absorbed by visits and virtual payouts;
* with the unbounded history, Lemma 2.3 holds for the credit: what a page received through links
  is ``sum_{i -> j} share(i, j) * K[i]``, ``K[i]`` the credit page ``i`` passed on.

Storage. Pages are dense integer ids ``0..n-1`` (a key map turns request fingerprints into ids),
each a row of the numpy arrays of :data:`COLUMNS`. The virtual page's payout is a broadcast, never a
loop: two running accumulators hold the cash paid so far *per page* to all pages (``acc_all``)
and to unfetched pages (``acc_unfetched``); a page stores ``s``, its cash less the accumulators
when it last reset or joined, and its true cash is::

    C[i] = s[i] + acc_all + (acc_unfetched if i is not fetched yet else 0)

so a payout is O(1), a page that joins later does not receive earlier payouts, and a broadcast to
a set keeps the order of cash inside it (the Greedy selector keeps one heap per set and never
touches it on a payout). As the accumulators grow, a page's cash becomes a small difference of
large numbers: :meth:`OpicEngine.rebase` folds them into the per-page values (no true value
changes), and :meth:`OpicEngine.payout` calls it when they pass ``rebase_at``. ``G`` is never
rebased: it is the clock.

Votes (``votes=True``: what the *web order* ranks pages never fetched by; see
:class:`~.selection.TieredSelection`). A second flow beside the cash, with none of its rules
of conservation: a page's *votes* are what its visited in-links passed it, and its *depth* the
fewest links between it and a seed over visited pages (:data:`~.constants.UNREACHED` before
any). A visit passes :data:`~.constants.VOTE_DAMPING` of (the page's votes plus its own vote,
:data:`~.constants.VISIT_VOTE`) over its links, in the shares of its cash, and ``depth + 1``;
the page's votes start again from 0 (what reaches a page already visited waits for its next
visit). A seed (:meth:`OpicEngine.seed`: a start request) has depth 0 and
:data:`~.constants.SEED_VOTES`, the votes of many pages: it comes before the pages links
found, and its links before theirs (a crawl starts from a site's home page, whose links are
worth more than any other page's: every page of the site links back to it, over links a
one-pass crawl follows only after it). Why
not cash: in one pass, the cash that reaches a visited page never moves on, and what moves on
shrinks at every link from the seed, so the order drifts to breadth-first; every visited page
casts the same vote, and a page many visited pages link to comes first. The depth discount
(:data:`~.constants.DEPTH_DISCOUNT` per link) bounds how far votes lead a crawl into a site's
endless calendar, which gets deeper at every visit in it (undiscounted, a calendar's days,
each linked from several others, would outvote the site: no less a PageRank sink for votes
than for PageRank). A page stores its votes discounted,
``order = votes * DEPTH_DISCOUNT ** depth`` (the key a heap reads), and that key never
falls between two visits of the page: votes only come in and depth only goes down.
"""

from __future__ import annotations

import math
import mmap
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .constants import (
    CLOSED,
    DEPTH_DISCOUNT,
    FETCHED,
    INITIAL,
    RATE_DECAY,
    SEED_VOTES,
    UNREACHED,
    VISIT_DECAY,
    VISIT_VOTE,
    VOTE_DAMPING,
)
from .importance import SCAN, CrawlView, importance_of_parts, teleport_share
from .index import DictKeys, PageKeys
from .window import WindowPolicy, parse_window


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


def _split(
    rest: float,
    k_rest: float,
    v_rest: float,
    d: int,
    weights: Sequence[float] | None,
    virtual_weight: float,
) -> tuple[list[float], list[float], list[float], float] | None:
    """The shares of cash ``rest``, credit ``k_rest`` and votes ``v_rest`` over ``d`` links by
    ``weights`` (None: equal), beside links of total weight ``virtual_weight`` whose cash share
    goes to the virtual page: ``(cash shares, credit shares, vote shares, the virtual page's
    cash)``; None when no weight is positive."""
    if weights is None and not virtual_weight:
        return [rest / d] * d, [k_rest / d] * d, [v_rest / d] * d, 0.0
    if weights is None:
        weights = [1.0] * d
    total_w = float(sum(weights)) + virtual_weight
    if not total_w > 0:
        return None
    return (
        [rest * w / total_w for w in weights],
        [k_rest * w / total_w for w in weights],
        [v_rest * w / total_w for w in weights],
        rest * virtual_weight / total_w,
    )


class Share(NamedTuple):
    """What a page of another engine (a partition's) is paid: cash and link credit, and, for
    the web order, votes and the depth they come with (see "Votes" above)."""

    cash: float
    credit: float
    votes: float = 0.0
    depth: int = UNREACHED


#: Beyond this depth a page's votes are discounted as at this depth: the discount and its
#: inverse stay far inside a float's range (about 1e-200 and 1e200).
DEPTH_CAP = min(UNREACHED - 1, int(200 * math.log(10) / -math.log(DEPTH_DISCOUNT)))


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


#: From this capacity on, the per-page arrays grow by a quarter, not double.
GROW_SLOWER = 1 << 20
#: Arrays of at least this many bytes are anonymous mappings of their own (see zeros).
MAPPED_BYTES = 1 << 20
#: The per-page arrays (row ``i``: page ``i``): attribute, name in a saved state, type. Each
#: has a memoryview ``<attribute>_mv`` for the per-event path.
COLUMNS = (
    ("stored", "s", np.float64),  # stored cash (see "Storage" above)
    ("hist", "hist", np.float64),  # link-credit history, through the window policy
    ("baseline", "cb", np.float64),  # teleport credit given at the last visit
    ("held_credit", "lc", np.float64),  # link credit received since the last visit
    ("last_g", "last_g", np.float64),  # G at the last visit
    ("visits", "visits", np.uint32),
    ("flags", "flags", np.uint8),
)
#: Kept for a window on the wall clock: the wall time of the last visit.
WALL_COLUMNS = (("last_t", "last_t", np.float64),)
#: Kept for an estimator that reads them: the G-moments of the link credit received.
MOMENT_COLUMNS = (("moment1", "b", np.float64), ("moment2", "d", np.float64))
#: Kept for the web order (see "Votes" above): votes discounted by depth, and depth.
VOTE_COLUMNS = (("order", "o", np.float64), ("depth", "depth", np.uint16))


#: The scalars of an engine a store saves with its per-page arrays (:mod:`~.snapshot`).
SCALARS = (  # noqa: SIM905  (a list literal would take a line per name)
    "n G g_real virtual_cash virtual_history acc_all acc_unfetched n_unfetched n_closed"
    " n_initial c0 visit_count cash_at_visit_ema acc_credit credit_base rebases credit_total"
    " credit_passed credit_dangling b_total d_total default_rate g_others pool_all"
    " pool_unfetched pool_credit"
).split()


def zeros(n: int, dtype: np.dtype | type) -> np.ndarray:
    """A zeroed array of ``n`` items whose pages take no memory until written, whatever the
    allocator did before: a large one is a fresh anonymous mapping (``np.zeros`` may reuse
    freed heap memory, which it must then clear, touching it all)."""
    dtype = np.dtype(dtype)
    size = n * dtype.itemsize
    if size < MAPPED_BYTES:
        return np.zeros(n, dtype)
    return np.frombuffer(mmap.mmap(-1, size), dtype, count=n)


class OpicEngine:
    """On-line Page Importance Computation over pages with dense integer ids.

    :param epsilon: share of every visit's cash paid to the virtual page (0 < epsilon <= 1). The
        fixpoint is PageRank with damping ``1 - epsilon``.
    :param refresh: share of the virtual page's payout that goes to all known pages; the rest goes
        to pages not fetched yet (discovery). ``1.0`` = PageRank fixpoint, ``0.0`` = discovery.
    :param window: a :class:`~scrapy_opic.opic.window.WindowPolicy` or a spec such as
        ``"interpolation:8"``; default unbounded history (static OPIC).
    :param self_links: keep links from a page to itself (off: a self-link is no endorsement,
        and would let a page feed its own cash back).
    :param default_history: rate of cash per time unit assumed for a page just discovered (the
        paper's "default history", for windowed policies); ``None`` learns it from first visits.
    :param capacity: initial number of page slots (grows by doubling).
    :param time_fn: wall clock for ``clock="wall"`` windows (injectable for tests).
    :param keys: how page keys map to ids (:class:`PageKeys`); default :class:`DictKeys`.
    :param rebase_at: :meth:`payout` calls :meth:`rebase` when an accumulator, against the scale
        of the values it is added to, passes this (``None`` or 0: never).
    :param votes: keep the web order's votes and depths (see "Votes" in the module docstring).
    """

    #: Default ``rebase_at``: at most about 10 of a float's 53 bits lost to the accumulators.
    REBASE_AT = 1024.0

    # The per-page arrays (:data:`COLUMNS`) and their memoryviews, which give the per-event
    # path Python floats and ints without numpy's scalar overhead.
    stored: np.ndarray
    hist: np.ndarray
    baseline: np.ndarray
    held_credit: np.ndarray
    last_g: np.ndarray
    visits: np.ndarray
    flags: np.ndarray
    last_t: np.ndarray
    moment1: np.ndarray
    moment2: np.ndarray
    order: np.ndarray
    depth: np.ndarray
    stored_mv: Any
    hist_mv: Any
    baseline_mv: Any
    held_credit_mv: Any
    last_g_mv: Any
    visits_mv: Any
    flags_mv: Any
    last_t_mv: Any
    moment1_mv: Any
    moment2_mv: Any
    order_mv: Any
    depth_mv: Any

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
        votes: bool = False,
    ) -> None:
        if not 0.0 < epsilon <= 1.0:
            raise ValueError("epsilon must be in (0, 1]")
        if not 0.0 <= refresh <= 1.0:
            raise ValueError("refresh must be in [0, 1]")
        self.epsilon = float(epsilon)
        self.refresh = float(refresh)
        self.self_links = bool(self_links)
        #: A link to a closed page pays its share to the virtual page, instead of being left
        #: out of the out-degree (``OPIC_REFUSED_LINKS = "virtual"``).
        self.closed_links_virtual = False
        #: A partition of a crawl: the virtual page pays the crawl's pool too (:meth:`payout`).
        self.pooled = False
        #: A pooled engine's view of the rest of its crawl, as its pool last told it.
        self.view: CrawlView | None = None
        self.time_fn = time_fn
        self.rebase_at = float(rebase_at or 0.0)  #: a setting, not state (0: never rebase)
        self.window: WindowPolicy = parse_window(window)
        #: The default history is learnt from first visits (a windowed policy, none given).
        self.learns_default = default_history is None and self.window.windowed
        self.default_rate = 0.0 if default_history is None else float(default_history)

        self.n = 0
        self.G = 0.0  #: the clock: total history (real pages + virtual page payouts)
        #: A pooled engine: the part of G the rest of the crawl made, and the virtual page's
        #: cash that waits for the pool.
        self.g_others = self.pool_all = self.pool_unfetched = self.pool_credit = 0.0
        self.g_real = 0.0  #: cash absorbed by real pages' visits
        self.virtual_cash = 1.0  #: all cash starts in the virtual page
        self.virtual_history = 0.0  #: cash the virtual page has paid out
        self.acc_all = self.acc_unfetched = 0.0  # see "Storage" above
        self.n_unfetched = 0  #: live pages never fetched
        self.n_closed = 0  #: pages closed for good (see close_page)
        self.n_initial = 0
        self.c0 = 0.0  #: initial cash of pages flagged INITIAL
        self.visit_count = 0
        self.cash_at_visit_ema = 0.0  # see stats()
        # Credit (see "Importance" above): the teleport credit every page has been given (since
        # the last rebase; before it: credit_base), the link credit received by all pages, and
        # the credit passed on by visits (all of them, dangling ones).
        self.acc_credit = self.credit_base = 0.0
        self.rebases = 0
        self.credit_total = self.credit_passed = self.credit_dangling = 0.0
        # The G-moments of the link credit received (the regression estimator): their sums.
        self.tracks_moments = getattr(self.window, "needs_moments", False)
        self.b_total = self.d_total = 0.0

        self.wall = self.window.clock == "wall"
        #: Votes and depths are kept (see "Votes" in the module docstring).
        self.votes = bool(votes)
        #: The per-page arrays this engine keeps (see :data:`COLUMNS`).
        self.columns = (
            COLUMNS
            + WALL_COLUMNS * self.wall
            + MOMENT_COLUMNS * self.tracks_moments
            + VOTE_COLUMNS * self.votes
        )
        self.capacity = 0
        for name, _saved, dtype in COLUMNS + WALL_COLUMNS + MOMENT_COLUMNS + VOTE_COLUMNS:
            setattr(self, name, np.zeros(0, dtype))
            setattr(self, name + "_mv", None)
        self._windowed = self.window.windowed
        self.observers: list[CashObserver] = []
        #: The page keys (see :class:`PageKeys`): any hashable keys in a dict by default.
        self.keys: PageKeys = DictKeys() if keys is None else keys
        #: The sum of the window's estimates as :func:`~.importance.normaliser` last scanned it.
        self.norm_cache: tuple[float, int, float] | None = None
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
        for name, _saved, _dtype in self.columns:
            setattr(self, name + "_mv", None)
        for name, _saved, dtype in self.columns:
            a = zeros(cap, dtype)
            a[: self.n] = getattr(self, name)[: self.n]
            setattr(self, name, a)
            setattr(self, name + "_mv", _view(a))
        if self.votes:  # (rows past n: pages no link has reached)
            self.depth[self.n :] = UNREACHED
        self.capacity = cap
        if self.window.engine is self:
            self.window.grow(cap)
        for obs in self.observers:
            obs.grow(cap)

    def reserve(self, n: int) -> None:
        """Room for ``n`` pages (a store about to fill the rows of ``n`` saved pages)."""
        self._grow(n)

    def is_closed(self, i: int) -> bool:
        return bool(self.flags_mv[i] & CLOSED)

    def add_observer(self, obs: CashObserver) -> None:
        obs.grow(self.capacity)
        self.observers.append(obs)

    def nbytes(self) -> int:
        """Bytes held by the per-page arrays (engine + window policy), at current capacity."""
        own = sum(getattr(self, name).nbytes for name, _saved, _dtype in self.columns)
        return own + self.window.nbytes()

    # ------------------------------------------------------------------ pages
    def now(self) -> float:
        return self.time_fn() if self.wall else self.G

    def add_pages(self, count: int) -> np.ndarray:
        """Add ``count`` new pages (cash 0, not fetched); returns their ids."""
        start = self.n
        self._grow(start + count)
        ids = np.arange(start, start + count)
        # (Rows past n are zero: allocated so, and only rows of pages are ever written.)
        self.stored[ids] = -(self.acc_all + self.acc_unfetched)
        self.baseline[ids] = -self.credit_base  # back pay: the teleport credit given before
        self.last_g[ids] = self.G
        now = self.now()
        if self.wall:
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
        self.stored_mv[i] = -(self.acc_all + self.acc_unfetched)  # (see add_pages)
        self.baseline_mv[i] = -self.credit_base
        self.last_g_mv[i] = self.G
        self.n = i + 1
        self.n_unfetched += 1
        if self._windowed:
            now = self.now()
            if self.wall:
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

    def teleport_share(self) -> float:
        """PageRank's uniform share ``a``: a page with no in-link has importance ``a / n``
        (:func:`~.importance.teleport_share`)."""
        return teleport_share(self)

    def total_cash(self) -> float:
        """Sum of all cash including the virtual page: 1 up to rounding. O(n) time, for checks;
        memory bounded (:data:`SCAN`) pages at a time."""
        total = 0.0
        for lo in range(0, self.n, SCAN):
            total += float(self.cash(np.arange(lo, min(self.n, lo + SCAN))).sum())
        return total + self.virtual_cash + self.pool_all + self.pool_unfetched

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
        # (A page that received nothing may read a rounding below 0: paid on, it would lower
        # the cash of the pages it links to, where every heap expects an increase.)
        return c if c > 0.0 else 0.0

    def visit(
        self,
        i: int,
        children: Sequence[int] = (),
        weights: Sequence[float] | None = None,
        virtual_weight: float = 0.0,
    ) -> float:
        """Visit page ``i`` whose out-links are ``children``; returns the cash it absorbed.
        ``weights`` (aligned with ``children``; None: equal) split the links' share;
        ``virtual_weight`` is the total weight of links not followed (offsite), whose share
        goes to the virtual page. A page with no links is dangling: all its cash goes to the
        virtual page, which pays out later (:meth:`payout`, before every pop)."""
        return self.visit_out(i, children, weights, virtual_weight, ())[0]

    def visit_out(
        self,
        i: int,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
        outside: Sequence[float],
    ) -> tuple[float, list[Share]]:
        """:meth:`visit` of a page whose links also lead to pages this engine does not hold (a
        partition's page linking into other partitions): ``outside`` gives each such link's
        weight. They count in the out-degree like any link; their shares are not credited here
        but returned, a :class:`Share` per outside link in order, for the caller to pay where
        those pages live. Returns the cash absorbed and those shares; the cash absorbed equals
        what stays here plus their cash."""
        first = not (self.flags_mv[i] & FETCHED)
        c = self._take(i)
        for obs in self.observers:
            obs.taken((i,))
        now = self.now()
        last = self.last_g_mv[i] if not self.wall else float(self.last_t[i])
        received, k = self._take_credit(i)  # the window absorbs what the links brought
        self.window.absorb_one(self.hist_mv, i, received, now, last)
        self.last_g_mv[i] = self.G
        if self.wall:
            self.last_t[i] = now
        self.visits_mv[i] += 1
        self.G += c
        self.g_real += c
        self.record_visits(c, 1)
        if first and self.learns_default:
            self.learn_rate(self.window.estimate_one(i, 0.0, now), 1)
        return c, self._distribute(i, c, k, children, weights, virtual_weight, outside)

    def _take_credit(self, i: int) -> tuple[float, float]:
        """Take all of page ``i``'s credit: returns the link credit it received since its last
        visit and the credit it holds (that, plus its teleport credit since its last visit, or
        since the start for a new page: back pay)."""
        received = self.held_credit_mv[i]
        k = self.acc_credit - self.baseline_mv[i] + received
        self.baseline_mv[i] = self.acc_credit
        self.held_credit_mv[i] = 0.0
        return received, k

    def _distribute(
        self,
        i: int,
        c: float,
        k: float,
        children: Sequence[int],
        weights: Sequence[float] | None,
        virtual_weight: float,
        outside: Sequence[float] = (),
    ) -> list[Share]:
        """Pay cash ``c`` and credit ``k`` of page ``i`` over its links, in the same shares, and
        its votes (see "Votes" above): the local ``children`` are credited here, the
        ``outside`` links' shares are returned (see :meth:`visit_out`)."""
        children, weights, virtual_weight = _live_links(self, i, children, weights, virtual_weight)
        local = len(children)
        d = local + len(outside)
        self.credit_passed += k
        votes, depth = self._votes_out(i) if self.votes else (0.0, UNREACHED)
        if d == 0:  # dangling: the cash goes to the virtual page, the credit is spent
            self.virtual_cash += c
            self.credit_dangling += k
            return []
        if outside:
            weights = _with_outside(local, weights, virtual_weight, outside)
        got = _split(c - self.epsilon * c, k - self.epsilon * k, votes, d, weights, virtual_weight)
        if got is None:  # no usable weight: as a dangling page
            self.virtual_cash += c
            self.credit_dangling += k
            return [Share(0.0, 0.0)] * len(outside)
        shares, credits, vote_shares, to_virtual = got
        to_virtual += self.epsilon * c
        self._credit(
            children, shares[:local], credits[:local], vote_shares if self.votes else None, depth
        )
        self.virtual_cash += to_virtual
        if not outside:
            return []
        return [
            Share(x, y, v, depth)
            for x, y, v in zip(shares[local:], credits[local:], vote_shares[local:])
        ]

    def _votes_out(self, i: int) -> tuple[float, int]:
        """Take page ``i``'s votes for a visit: what it passes on over its links (its votes and
        its own vote, damped) and the depth its links get."""
        votes = VISIT_VOTE + self._take_votes(i)
        d = self.depth_mv[i]
        if d == UNREACHED:
            d = 0  # (filed with no link to it and not as a seed: as a seed's links)
        return VOTE_DAMPING * votes, d + 1 if d < UNREACHED - 1 else d

    def _take_votes(self, i: int) -> float:
        """Take page ``i``'s votes (undiscounted; 0 for a page no link has reached)."""
        votes = self.order_mv[i] * DEPTH_DISCOUNT ** -min(self.depth_mv[i], DEPTH_CAP)
        self.order_mv[i] = 0.0
        return votes

    def _vote(self, j: int, v: float, depth: int) -> None:
        """Page ``j`` receives votes ``v`` (undiscounted) that come ``depth`` links from a seed
        (``depth < UNREACHED``)."""
        dj = self.depth_mv[j]
        if depth < dj:  # nearer a seed: the votes it had are discounted less from now on
            at = DEPTH_DISCOUNT ** min(depth, DEPTH_CAP)
            if dj == UNREACHED:
                self.order_mv[j] = v * at
            else:
                lift = DEPTH_DISCOUNT ** (min(depth, DEPTH_CAP) - min(dj, DEPTH_CAP))
                self.order_mv[j] = self.order_mv[j] * lift + v * at
            self.depth_mv[j] = depth
        else:
            self.order_mv[j] += v * DEPTH_DISCOUNT ** min(dj, DEPTH_CAP)

    def seed(self, i: int) -> None:
        """Page ``i`` is a seed (a start request: see "Votes" above): depth 0 and
        :data:`~.constants.SEED_VOTES` more votes. Nothing without votes."""
        if self.votes:
            self._vote(i, SEED_VOTES, 0)
            for obs in self.observers:
                obs.raised(i)

    def _credit(
        self,
        ids: Sequence[int],
        amounts: Sequence[float],
        credits: Sequence[float],
        votes: Sequence[float] | None = None,
        depth: int = UNREACHED,
    ) -> None:
        """Add cash and link credit taken from elsewhere (the caller books the debit), and
        ``votes`` (undiscounted, extra items unread) that come ``depth`` links from a seed
        (:meth:`_vote`); each credit is told to the observers at once, so a heap sifts one
        changed key at a time (its key, cash or votes, has moved by then)."""
        s, lc, observers = self.stored_mv, self.held_credit_mv, self.observers
        moments, b, d = self.tracks_moments, self.moment1_mv, self.moment2_mv
        t = self.G
        tt = t * t
        total = 0.0
        vs = votes if depth < UNREACHED else None
        for n, (j, x, y) in enumerate(zip(ids, amounts, credits)):
            s[j] += x
            lc[j] += y
            total += y
            if moments:
                b[j] += y * t
                d[j] += y * tt
            if vs is not None:
                self._vote(j, vs[n], depth)
            for obs in observers:
                obs.raised(j)
        self.credit_total += total
        if moments:
            self.b_total += total * t
            self.d_total += total * tt

    def forfeit(self, i: int) -> float:
        """Send page ``i``'s cash to the virtual page without a visit (no history, no clock):
        a page given up before it could be fetched. Returns the amount."""
        off = self._offset(self.flags_mv[i])
        c = self.stored_mv[i] + off
        self.stored_mv[i] = -off
        self.virtual_cash += c
        for obs in self.observers:
            obs.taken((i,))
        return c

    def close_page(self, i: int) -> float:
        """Close page ``i`` for good (404, robots.txt...): its cash goes to the virtual page,
        and it receives nothing more, from links (it leaves their out-degree) or payouts. Its
        history and credit stay. Returns the cash moved."""
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
        """A page visited again had ``share`` of its links (0 to 1; 1: the page is gone) new or
        gone since its last parsed visit: told to the window policy, which may adapt."""
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
        """Move all of ``src``'s cash to ``dst`` (a redirect: same money, new page); ``src``
        counts as fetched (its answer was the redirect)."""
        if src == dst:
            return 0.0
        moved = self.take_out(src)
        self.receive(dst, moved)
        return moved.cash

    def take_out(self, src: int) -> Share:
        """Take all of page ``src``'s cash and credit, and its votes and depth, for another page
        to :meth:`receive` (in this engine or another partition's); ``src`` counts as
        fetched."""
        c = self._take(src)
        for obs in self.observers:
            obs.taken((src,))
        # The credit goes with the cash: the target receives all that the source held. So do
        # the votes: the links to the source were links to the target.
        held, k = self._take_credit(src)
        self.credit_total -= held
        if not self.votes or self.depth_mv[src] == UNREACHED:
            return Share(c, k)
        return Share(c, k, self._take_votes(src), self.depth_mv[src])

    def receive(self, i: int, share: Share) -> None:
        """Page ``i`` receives a :class:`Share` taken elsewhere (:meth:`take_out`,
        :meth:`visit_out`); a closed page's cash goes to the virtual page."""
        if self.flags_mv[i] & CLOSED:
            self.virtual_cash += share.cash
            return
        votes = (share.votes,) if self.votes else None
        self._credit((i,), (share.cash,), (share.credit,), votes, share.depth)

    def payout(self) -> float:
        """Pay the virtual page's cash out: ``refresh`` of it to all pages, the rest to unfetched
        pages (all to all pages when none is unfetched). O(1). Returns the amount paid here.
        A :attr:`pooled` engine pays only its partition's share, by its pages against the
        others' (:attr:`view`); the rest waits for the crawl's pool (:meth:`take_pooled`)."""
        v = self.virtual_cash
        live = self.n - self.n_closed  # closed pages receive nothing
        if v <= 0.0 or live == 0:
            return 0.0
        view = self.view if self.pooled else None
        others_live, others_unf = (0, 0) if view is None else view[:2]  # (live, never fetched)
        to_unfetched = (1.0 - self.refresh) * v if self.n_unfetched or others_unf else 0.0
        to_all = v - to_unfetched
        self.virtual_cash = 0.0
        if self.pooled:
            self.pool_credit += v  # (every page of the crawl is owed this teleport credit)
        paid = v
        if others_live:
            # (The shares of the other partitions' pages go to the pool; without others, all
            # of it is paid here, with no rounding: the engine of a crawl of one partition.)
            own_all = to_all * live / (live + others_live)
            unf = self.n_unfetched
            own_unf = to_unfetched * unf / (unf + others_unf) if unf else 0.0
            self.pool_all += to_all - own_all
            self.pool_unfetched += to_unfetched - own_unf
            to_all, to_unfetched = own_all, own_unf
            paid = to_all + to_unfetched
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
        """Take what :meth:`payout` left for the pool: ``(to all pages, to pages never
        fetched, the teleport credit given)``."""
        out = (self.pool_all, self.pool_unfetched, self.pool_credit)
        self.pool_all = self.pool_unfetched = self.pool_credit = 0.0
        return out

    def receive_pool(
        self, others: float, to_all: float, to_unfetched: float, teleport: float
    ) -> None:
        """A pooled engine's share of the other partitions' virtual cash, from the crawl's
        pool: its clock becomes its own plus ``others`` (never decreasing); ``to_all`` and
        ``to_unfetched`` are paid as :meth:`payout` pays (with no live page, they wait); and
        its pages get what they miss of ``teleport``, all the teleport credit given so far."""
        if others > self.g_others:
            self.G += others - self.g_others
            self.g_others = others
        if self.n - self.n_closed == 0:
            self.virtual_cash += to_all + to_unfetched
        else:
            self.virtual_history += to_all + to_unfetched
            self._pay(to_all, to_unfetched, 0.0)
        given = self.acc_credit + self.credit_base
        if teleport > given:
            self.acc_credit += teleport - given
            if self.rebase_at and self.acc_credit > self.rebase_at:
                self.rebase()

    def rebase(self) -> None:
        """Fold the accumulators into the per-page values and restart them at 0 (see "Rebasing"
        above): no true value changes, each page's cash is the float :meth:`cash` gave before.
        O(n), vectorised; :meth:`payout` calls it. Observers hear :meth:`CashObserver.rebased`."""
        n = self.n
        if n:
            self.stored[:n] += self._offsets(np.arange(n))
            self.baseline[:n] -= self.acc_credit
        self.credit_base += self.acc_credit
        self.acc_all = self.acc_unfetched = self.acc_credit = 0.0
        self.rebases += 1
        for obs in self.observers:
            obs.rebased()

    # ------------------------------------------------------------------ statistics
    def record_visits(self, mean_cash: float, count: int) -> None:
        self.visit_count += count
        # Running mean over roughly the last 1000 visits of (cash at visit) * n; Greedy -> 2.
        w = 1.0 - VISIT_DECAY**count
        self.cash_at_visit_ema += w * (mean_cash * self.n - self.cash_at_visit_ema)

    def learn_rate(self, rate: float, count: int) -> None:
        w = 1.0 - RATE_DECAY**count
        self.default_rate += w * (rate - self.default_rate)

    def importance(self, ids: np.ndarray | Sequence[int] | None = None) -> np.ndarray:
        """Importance of ``ids`` (all pages if ``None``), normalised to sum 1 over all pages
        (:func:`~.importance.mix`: closed pages hold no link credit, pages gone hold nothing)."""
        if not self.n:
            return np.zeros(0)
        out = importance_of_parts([self])[0]
        return out if ids is None else out[np.asarray(ids, dtype=np.int64)]

    def stats(self) -> dict[str, float]:
        """Scalars worth watching (the Scrapy layer copies them into its stats collector)."""
        gathered = 1.0 - VISIT_DECAY**self.visit_count
        return {
            "pages": self.n,
            "fetched": self.n - self.n_unfetched - self.n_closed,
            "unfetched": self.n_unfetched,
            "closed": self.n_closed,
            "visits": self.visit_count,
            "G": self.G,
            # The paper's error factor 1 / G, an upper bound on the estimate's error.
            "error_factor": 1.0 / self.G if self.G > 0 else float("inf"),
            "virtual_cash": self.virtual_cash,
            # Mean cash taken per visit times the pages over roughly the last 1,000 visits (the
            # paper: 2 under Greedy); the running mean starts at 0, hence the weight gathered.
            "cash_at_visit_x_n": self.cash_at_visit_ema / gathered if gathered > 0 else 0.0,
        }


def _live_links(
    e: OpicEngine,
    i: int,
    children: Sequence[int],
    weights: Sequence[float] | None,
    virtual_weight: float,
) -> tuple[Sequence[int], Sequence[float] | None, float]:
    """The links of page ``i`` of ``e`` that count: a self-link and a link to a closed page are
    no links (a closed page is no page), unless ``closed_links_virtual``, where a link to a
    closed page gives its share to the virtual page instead, as a refused link does."""
    fl = e.flags_mv
    if (e.self_links or i not in children) and not (
        e.n_closed and any(fl[j] & CLOSED for j in children)
    ):
        return children, weights, virtual_weight
    return _drop_links(e, i, children, weights, virtual_weight)


def _drop_links(
    e: OpicEngine,
    i: int,
    children: Sequence[int],
    weights: Sequence[float] | None,
    virtual_weight: float,
) -> tuple[list[int], list[float] | None, float]:
    """:func:`_live_links` of a page that has a self-link or a link to a closed page."""
    own = -1 if e.self_links else i
    kept, kept_weights = [], []
    for m, j in enumerate(children):
        if j == own:
            continue
        w = 1.0 if weights is None else weights[m]
        if not e.flags_mv[j] & CLOSED:
            kept.append(j)
            kept_weights.append(w)
        elif e.closed_links_virtual:
            virtual_weight += w
    return kept, None if weights is None else kept_weights, virtual_weight
