"""The pages of one partition of a crawl, in memory: :class:`MemoryFrontier`.

A frontier is an OPIC engine (cash, history, the clock G, the virtual page) plus every page's
place in the crawl and what to fetch it with; it keeps the :class:`~.contract.Frontier`
contract (the life cycle of a page, the money on every path, the leases) for one partition.
The crawl's frontier over its partitions is :class:`~scrapy_opic.opic.fleet.Fleet`'s, and
:class:`~scrapy_opic._backends.crawl.Crawl` drives it over a store.

Selection --------- A pop pays the virtual page's cash out first (O(1): accumulators, see
:class:`~scrapy_opic.opic.engine.OpicEngine`), then hands out the pending page with the most cash
(Greedy) among those of the highest priority whose download slot is not full
(:meth:`MemoryFrontier.peek` and :meth:`MemoryFrontier.take`; the crawl's pop over its partitions is
:class:`~scrapy_opic.opic.fleet.Fleet`'s). In a continuous crawl with a *discovery share* the pages
never fetched get at least that share of the pops while there are any
(:func:`~.contract.discovery_step`); a crawl that refetches by change takes the refetch due first
with the other pops (:meth:`MemoryFrontier.due_page`), each followed by a *relay visit* of the
richest waiting page over its kept links (see :mod:`~scrapy_opic.opic.refresh`).

In a continuous crawl a priority orders a page's first fetch only: a page fetched once waits for
its refetches at priority 0, by cash alone. (Every fetched page is pending again at once, so a
tier of refetches above 0 would never empty: its pages would be fetched in a loop, and those
below 0 never.)

Kept links
----------
With ``keep_links`` a frontier also records, for each page, the ids of the pages its last
parsed visit linked to (:attr:`MemoryFrontier.link_changes`, taken by a store that saves them:
the export computes the crawl graph's exact PageRank from them, see
:mod:`~scrapy_opic.opic.links`). A later visit replaces the list; a page that is closed has none;
a page that redirected is recorded as its target's alias.

Nothing here knows Scrapy or does I/O: payloads are opaque objects, download slots opaque keys,
and a store decides where URLs and payloads live (:class:`PageRows`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from .backoff import Backoff
from .constants import (
    CLOSED,
    DAMAGED,
    DISCOVERED,
    DUPLICATE,
    ERROR,
    FETCHED,
    FILTERED,
    FINAL_OUTCOMES,
    FORBIDDEN,
    IN_FLIGHT,
    NEEDS_PAYLOAD,
    OK,
    PENDING,
    REDIRECTED,
    SCHEDULED,
    SPIDER_ERROR,
    STATUSES,
    VISITED,
)
from .contract import Entry, Lease, Link, Visit, require_payload
from .engine import OpicEngine, Share
from .importance import best_page, importance_of
from .refresh import Refresher
from .selection import Pick, Selection, TieredSelection, Tiers, make_selection

#: The payload a store hands out for a page whose request is lost (a restart without stored
#: requests, a row gone) or damaged (a row that fails its checksum): the page is given up.
LOST = "opic:lost"
DAMAGED_PAYLOAD = "opic:damaged"


class PageRows(Protocol):
    """Where a frontier keeps its pages' URLs and the payloads of the pages that wait (in
    memory, or rows of a store's file). Page ids are the engine's."""

    def added(self, i: int, url: str | None) -> None:
        """Page ``i`` is new, with ``url``."""

    def url_of(self, i: int) -> str | None:
        """The URL of page ``i`` (None if never given)."""

    def keep(self, i: int, key: Hashable, payload: Any, new: bool) -> None:
        """Page ``i`` waits with ``payload`` (``new``: it had none)."""

    def lease(
        self, i: int, kept: bool, key_of: Callable[[int], Hashable]
    ) -> tuple[Hashable, Any, str | None]:
        """The key, payload and URL of page ``i``, handed out (``kept``: the frontier keeps it
        for a later fetch, else it is the caller's; ``key_of``: the engine's, if the rows do
        not keep the key). The payload is :data:`LOST` or :data:`DAMAGED_PAYLOAD` if gone; the
        URL may be None where the payload holds it."""

    def give_back(self, i: int, key: Hashable, payload: Any) -> None:
        """Page ``i`` waits again with the payload it was handed out with (a release)."""

    def forget(self, i: int) -> None:
        """Page ``i`` will not be fetched again: its payload can go."""

    def clear(self) -> None:
        """The frontier is closed: the payloads can go at once."""


class MemoryRows:
    """:class:`PageRows` in this process's memory: a list of URLs, a dict of payloads."""

    def __init__(self) -> None:
        #: The URL of each page, and the payload of each pending or in-flight page, by id.
        self.urls: list[str | None] = []
        self.payloads: dict[int, Any] = {}

    def added(self, i: int, url: str | None) -> None:
        urls = self.urls
        if len(urls) < i:
            urls.extend([None] * (i - len(urls)))
        urls.append(url)

    def url_of(self, i: int) -> str | None:
        return self.urls[i] if i < len(self.urls) else None

    def keep(self, i: int, key: Hashable, payload: Any, new: bool) -> None:
        self.payloads[i] = payload

    def lease(
        self, i: int, kept: bool, key_of: Callable[[int], Hashable]
    ) -> tuple[Hashable, Any, str | None]:
        return key_of(i), self.payloads.get(i, LOST), self.url_of(i)

    def give_back(self, i: int, key: Hashable, payload: Any) -> None:
        if payload is not None:
            self.payloads.setdefault(i, payload)

    def forget(self, i: int) -> None:
        self.payloads.pop(i, None)

    def clear(self) -> None:
        self.payloads.clear()


class PageObserver(Protocol):
    """Something that must hear when a page's place in the crawl changes (a store that writes
    the pages changed since its last checkpoint)."""

    def touched(self, i: int) -> None: ...


class MemoryFrontier:
    """The pages of one partition in this process's memory, as numpy arrays and arrays of the
    standard library (see the module docstring).

    :param engine: the OPIC engine holding cash and history (keys: the pages' keys).
    :param strategy: ``greedy`` (the page with the most cash among slots with room, by
        priority), ``random`` or ``cycle`` (those two ignore priorities and slots).
    :param continuous: re-pend every visited page (a refresh crawl).
    :param keep_links: record each page's out-links in :attr:`link_changes`.
    :param rows: where URLs and payloads live (:class:`MemoryRows` by default).
    :param web_order: greedy: pages never fetched in the web order (download slots take
        turns; in a continuous crawl, in its discovery pops; see
        :class:`~.selection.TieredSelection`), else by cash.
    """

    def __init__(
        self,
        engine: OpicEngine,
        strategy: str = "greedy",
        continuous: bool = False,
        seed: int | None = None,
        keep_links: bool = False,
        refresher: Refresher | None = None,
        rows: PageRows | None = None,
        backoff: Backoff | None = None,
        web_order: bool = True,
    ) -> None:
        self.engine = engine
        #: A continuous crawl that refetches by change (:mod:`~scrapy_opic.opic.refresh`):
        #: its change rates, refetch schedule and kept links (None: refetches by cash).
        self.refresher = refresher if continuous else None
        self.continuous = continuous
        self.keep_links = keep_links
        self.rows: PageRows = MemoryRows() if rows is None else rows
        self.backoff = Backoff() if backoff is None else backoff
        self.observers: list[PageObserver] = []
        #: With ``keep_links``: the pages whose links changed since a store last took them
        #: (:meth:`take_link_changes`), by id: the target ids of the page's last parsed visit
        #: (a list, as the visit got it: self-links and repeats are the encoder's to drop), the
        #: id of the page it redirected to (an int), or None (closed: no links).
        self.link_changes: dict[int, list[int] | int | None] = {}
        self.status = bytearray()
        #: How each page's last fetch ended (an outcome code of :mod:`.constants`), by id.
        self.outcome = array("H")
        #: The ``(priority, download slot)`` pairs in use, interned to small codes, and the
        #: code of each pending or in-flight page, by id (0: none: no payload).
        self.tiers = Tiers()
        self.tier = array("I")
        #: page -> the page it permanently redirects to (see :meth:`redirect`), by id.
        self.alias: dict[int, int] = {}
        self._tokens: dict[int, int] = {}  # in-flight page -> its lease token
        self._seq = 0
        self.grow(engine.capacity)  # (the tiered selection reads self.tier)
        self.selection: Selection = (
            TieredSelection(engine, self.tiers, self.tier, web_order, continuous)
            if strategy == "greedy"
            else make_selection(strategy, engine, seed)
        )
        self._tiered = isinstance(self.selection, TieredSelection)
        self.counts = [0, 0, 0, 0]  # pages per status
        #: Pages whose last fetch was parsed (outcome ``ok``): the figure ``fetched``.
        self.n_ok = 0
        #: Visits whose fetch failed (:meth:`fail`, or a parse that failed part-way).
        self.failed_visits = 0
        engine.add_observer(self)
        self.counts[DISCOVERED] = engine.n

    # -- engine observer: only growth matters here ----------------------------------------
    def grow(self, capacity: int) -> None:
        if capacity > len(self.status):
            self.status.extend(bytes(capacity - len(self.status)))
        if capacity > len(self.outcome):
            self.outcome.frombytes(bytes(2 * (capacity - len(self.outcome))))
        if capacity > len(self.tier):
            self.tier.frombytes(bytes(4 * (capacity - len(self.tier))))

    def raised(self, i: int) -> None:
        pass

    def changed(self, ids: Iterable[int]) -> None:
        pass

    def taken(self, ids: Iterable[int]) -> None:
        pass

    def rebased(self) -> None:
        pass

    # -- pages --------------------------------------------------------------------------------
    def page(self, key: Hashable, url: str | None = None) -> int:
        """The id of the page with ``key``, created (``DISCOVERED``, no cash) if new."""
        engine = self.engine
        n = engine.n
        i = engine.page(key)
        if engine.n != n:
            self.rows.added(i, url)
            self.counts[DISCOVERED] += 1
        return i

    def url_of(self, i: int) -> str | None:
        """The URL of page ``i`` (None if it was never given)."""
        return self.rows.url_of(i)

    def fetched(self, i: int) -> bool:
        return bool(self.engine.flags_mv[i] & FETCHED)

    def _record_outcome(self, i: int, outcome: int) -> None:
        """Page ``i``'s last fetch ended with ``outcome`` (and :attr:`n_ok` follows)."""
        self.n_ok += (outcome == OK) - (self.outcome[i] == OK)
        self.outcome[i] = outcome

    def _set(self, i: int, status: int) -> None:
        self.counts[self.status[i]] -= 1
        self.status[i] = status
        self.counts[status] += 1
        for obs in self.observers:
            obs.touched(i)

    def slot_of(self, i: int) -> Hashable:
        """Page ``i``'s download slot (``""`` if it has none)."""
        code = self.tier[i]
        return self.tiers.slot(code) if code else ""

    def _refetch_tier(self, i: int) -> None:
        """A refetch waits at priority 0 (see the module docstring: Selection): a page already
        fetched, in a continuous crawl, gets the code of ``(0, its slot)``."""
        code = self.tier[i]
        if (
            self._tiered
            and self.continuous
            and code
            and self.engine.flags_mv[i] & FETCHED
            and self.tiers.priority(code)
        ):
            self.tier[i] = self.tiers.code(0, self.tiers.slot(code))

    def _push(self, i: int) -> None:
        self._refetch_tier(i)
        self.selection.push(i)

    def schedulable(self, i: int, again: bool) -> bool:
        """Whether a request for page ``i`` would be filed (``again``: ``dont_filter``)."""
        st = self.status[i]
        if st in (PENDING, IN_FLIGHT):
            return False
        if self.engine.flags_mv[i] & CLOSED:  # closed for good: only asked for explicitly
            return again
        return st != VISITED or self.continuous or again

    def _pend(
        self, i: int, payload: Any, priority: int, slot: Hashable, key: Hashable = None
    ) -> None:
        self.engine.reopen_page(i)  # (a closed page asked for again: open, with no cash)
        new = not self.tier[i]
        self.tier[i] = self.tiers.code(priority, slot)
        self._refetch_tier(i)
        self.rows.keep(i, self.engine.key_of(i) if key is None else key, payload, new)
        self._set(i, PENDING)
        self._push(i)

    def _held(self, lease: Lease) -> int | None:
        """The id of the page ``lease`` holds, if the lease is current."""
        i = self.engine.id_of(lease.key)
        if i is None or self.status[i] != IN_FLIGHT or self._tokens.get(i) != lease.token:
            return None
        return i

    def _done(
        self, i: int, payload: Any = None, key: Hashable = None, due: float | None = None
    ) -> None:
        """After a visit: pending again (continuous crawl; with ``payload`` instead of its
        previous one if given; parked until ``due`` if given), else visited for good."""
        if self.continuous and self.tier[i]:
            self._refetch_tier(i)
            if payload is not None:
                self.rows.keep(i, self.engine.key_of(i) if key is None else key, payload, False)
            self._set(i, PENDING)
            if due is None:
                self._push(i)
            else:
                self.backoff.park(i, due)
        else:
            self._retire(i)

    def _retire(self, i: int) -> None:
        if self.refresher is not None:
            self.refresher.closed(i)
        self.backoff.forget(i)
        self._set(i, VISITED)
        if self.tier[i]:
            self.rows.forget(i)
            self.tier[i] = 0

    def _room_now(self, full_slots: Collection[Hashable]) -> Callable[[Hashable], bool] | None:
        """The selection's ``has_room`` for a pop now (None: every slot has room): no slot of
        ``full_slots``, nor one that backs off; the parked pages whose wait is over are
        candidates again first. (Every way of choosing the next page goes through here.)"""
        blocked: Collection[Hashable] = ()
        b = self.backoff
        if b.parked or b.slots:
            now = b.clock()
            for i in b.due(now):
                if self.status[i] == PENDING:
                    self._push(i)
            blocked = b.blocked(now)
        if blocked:
            return lambda slot: slot not in full_slots and slot not in blocked
        if full_slots:
            return lambda slot: slot not in full_slots
        return None

    def wakes(self) -> bool:
        """Whether pages wait for a time to come (parked, or their slot backing off): then
        which page a pop takes changes with time alone."""
        return self.backoff.wakes()

    # -- schedules and pops --------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        """File each entry's page (the contract's codes: see :class:`~.contract.Frontier`)."""
        codes = []
        for key, url, priority, slot, payload, seed in entries:
            i = self.page(key, url)
            if not self.schedulable(i, again):
                codes.append(DUPLICATE)
            elif payload is None:
                codes.append(NEEDS_PAYLOAD)
            else:
                if seed:  # (before it is a candidate: its key rises)
                    self.engine.seed(i)
                self._pend(i, payload, priority, slot, key)
                codes.append(SCHEDULED)
        return codes

    def peek(self, full_slots: Collection[Hashable] = (), discover: bool = False) -> Pick | None:
        """The page a greedy pop would lease (with ``discover``: preferring a page never
        fetched, see :func:`~.contract.discovery_step`), left pending; ``None`` if none. The
        caller pays the virtual page out first."""
        sel = self.selection
        if not isinstance(sel, TieredSelection):
            raise TypeError("peek needs the greedy selection")
        return sel.peek(self._room_now(full_slots), discover)

    def take(self, i: int) -> Lease | None:
        """Lease pending page ``i`` (the page :meth:`peek` chose, or the page a replayed outcome
        names); ``None`` if its payload is lost: the page is then given up."""
        sel = self.selection
        if isinstance(sel, TieredSelection):  # (a lease of a page never fetched is a turn)
            sel.turned(i)
        sel.discard(i)
        return self._lease(i)

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        """The random or cycle strategy's pop (a greedy crawl pops through :meth:`peek` and
        :meth:`take`), after the virtual page's payout."""
        self.engine.payout()
        while (i := self.selection.pop()) is not None:
            lease = self._lease(i)
            if lease is not None:
                return lease
        return None

    def _lease(self, i: int) -> Lease | None:
        key, payload, url = self.rows.lease(i, self.continuous, self.engine.key_of)
        if payload is LOST or payload is DAMAGED_PAYLOAD:
            # Its request did not survive (a restart lost it, its row is gone or damaged):
            # given up, its cash to the virtual page.
            self._give_up(i, ERROR if payload is LOST else DAMAGED)
            return None
        if self.refresher is not None:
            self.refresher.taken(i)
        self._set(i, IN_FLIGHT)
        self._seq += 1
        self._tokens[i] = self._seq
        return Lease(key, self._seq, payload, self.slot_of(i), url)

    # -- outcomes -----------------------------------------------------------------------------
    def visit(
        self,
        lease: Lease,
        links: Sequence[Link],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
        outcome: int = OK,
        changed: bool | None = None,
        modified: float | None = None,
    ) -> Visit | None:
        got = self.visit_out(
            lease, links, (), virtual_weight, importance, payload, outcome, changed, modified
        )
        return None if got is None else got[0]

    def visit_out(
        self,
        lease: Lease,
        links: Sequence[Link],
        outside: Sequence[float],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
        outcome: int = OK,
        changed: bool | None = None,
        modified: float | None = None,
    ) -> tuple[Visit, list[Share]] | None:
        """:meth:`~.contract.Frontier.visit` of a page that also links to pages this frontier
        does not hold (see :meth:`OpicEngine.visit_out
        <scrapy_opic.opic.engine.OpicEngine.visit_out>`): ``outside`` gives each such link's
        weight; returns the visit and a :class:`~.engine.Share` per such link, to be paid where
        their pages live. A page links to another page once (after aliases): repeats are
        merged, each with the largest of its weights."""
        i = self._held(lease)
        if i is None:
            return None
        children = [self.page(link.key, link.url) for link in links]
        paid, weights = _paid(self, links, children, virtual_weight)
        shares = self.engine.visit_out(i, paid, weights, virtual_weight, outside)[1]
        if self.keep_links:  # (the list is not changed after this: kept as is, no copy)
            self.link_changes[i] = children
        r = self.refresher
        if r is not None:  # (a parse that failed part-way paid its links all the same)
            share = r.keep(i, paid, weights, virtual_weight)
            if share is not None:  # (a revisit: how far the site's links moved)
                self.engine.links_changed(share)
            r.observed(i, changed, since=modified)
        self._record_outcome(i, outcome)
        if outcome != OK:
            self.failed_visits += 1
        self.backoff.answered(i, self.slot_of(i))
        del self._tokens[i]
        self._done(i, payload, lease.key)
        codes = [
            NEEDS_PAYLOAD if self.schedulable(j, link.again) else DUPLICATE
            for link, j in zip(links, children)
        ]
        return Visit(codes, importance_of(self.engine, i) if importance else None), shares

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        got = self.unchanged_out(lease, (), payload)
        return None if got is None else got[0]

    def unchanged_out(
        self, lease: Lease, outside: Sequence[float], payload: Any = None
    ) -> tuple[Visit, list[Share]] | None:
        """:meth:`~.contract.Frontier.unchanged` of a page whose kept links also lead to pages this
        frontier does not hold: ``outside``, their weights; returns the visit and
        their shares (see :meth:`visit_out`). The links are not filed again."""
        i = self._held(lease)
        if i is None:
            return None
        r = self.refresher
        kept = None if r is None else r.links_of(i)
        if kept is not None:
            shares = self._pay_kept(i, kept, outside)
        else:
            shares = self.engine.visit_out(i, (), None, 0.0, outside)[1]
        if r is not None:
            r.observed(i, False)
        if self.outcome[i] != SPIDER_ERROR:  # (its content is the last parse's: so is that)
            self._record_outcome(i, OK)
        self.backoff.answered(i, self.slot_of(i))
        del self._tokens[i]
        self._done(i, payload, lease.key)
        return Visit([], None), shares

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        i = self._held(lease)
        if i is None:
            return False
        again = self.fetched(i)  # (fetched before: its answer is news of the site)
        self.engine.visit(i, ())
        self._record_outcome(i, outcome)
        self.failed_visits += 1
        del self._tokens[i]
        if self.continuous and outcome not in FINAL_OUTCOMES:
            # Fetched again when its cash says so, after its backoff.
            if self.refresher is not None:
                self.refresher.failed(i)
            self._done(i, payload, lease.key, self.backoff.failed(i, self.slot_of(i)))
        else:
            self._retire(i)
            self._close(i)
            if again:  # a page gone: all its links with it
                self.engine.links_changed(1.0)
        return True

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        i = self._held(lease)
        if i is None:
            return False
        self._give_up(i, outcome)
        return True

    def _give_up(self, i: int, outcome: int) -> None:
        """Page ``i``, in flight, is given up unfetched."""
        self._tokens.pop(i, None)
        self._retire(i)
        self._record_outcome(i, outcome)
        self._close(i)

    def drop(self, key: Hashable, outcome: int = FILTERED) -> bool:
        i = self.engine.id_of(key)
        if i is None or self.status[i] not in (DISCOVERED, PENDING):
            return False
        if self.status[i] == PENDING:
            self.selection.discard(i)
        self._retire(i)
        self._record_outcome(i, outcome)
        self._close(i)
        return True

    def _close(self, i: int) -> None:
        """Close page ``i`` (see the module docstring); its kept links go."""
        if self.keep_links and self.engine.flags_mv[i] & FETCHED:
            self.link_changes[i] = None
        self.engine.close_page(i)

    def take_link_changes(self) -> dict[int, list[int] | int | None]:
        """The link changes recorded since the last call (see :attr:`link_changes`), which
        start afresh."""
        changes, self.link_changes = self.link_changes, {}
        return changes

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        require_payload(entry)
        i = self._held(lease)
        if i is None:
            return None
        del self._tokens[i]
        self._pend(i, entry.payload, entry.priority, entry.slot, lease.key)
        if self.refresher is not None:
            self.refresher.returned(i)
        return SCHEDULED

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        require_payload(entry)
        i = self._held(lease)
        if i is None:
            return None
        j = self.page(entry.key, entry.url)
        if j == i:  # a redirect to itself: a retry in disguise
            return self.retry(lease, entry)
        del self._tokens[i]
        self.engine.transfer(i, j)
        self._record_outcome(i, REDIRECTED)
        if self.keep_links:
            self.link_changes[i] = j
        self._retire(i)
        if permanent:
            # (Not _close: the page's kept link is its target, which the crawl graph follows.)
            self.engine.close_page(i)
            self.alias[i] = j
        else:
            self.alias.pop(i, None)
        return self.schedule([entry])[0]

    def redirect_out(self, lease: Lease, permanent: bool = False) -> Share | None:
        """:meth:`redirect` to a page this frontier does not hold: the page's cash, the credit it
        holds and its votes are taken, returned as a :class:`~.engine.Share` to be paid to the
        target where it lives; the page is visited (closed if ``permanent``: the caller keeps
        the alias)."""
        i = self._held(lease)
        if i is None:
            return None
        del self._tokens[i]
        moved = self.engine.take_out(i)
        self._record_outcome(i, REDIRECTED)
        if self.keep_links:
            self.link_changes[i] = None
        self._retire(i)
        if permanent:
            self.engine.close_page(i)
        self.alias.pop(i, None)
        return moved

    def target(self, j: int) -> int:
        """The page a link to page ``j`` pays: ``j``, or the page it permanently redirects to
        while it is closed (a chain of aliases followed up to 8 hops)."""
        flags = self.engine.flags_mv
        for _ in range(8):
            k = self.alias.get(j)
            if k is None or not flags[j] & CLOSED:
                break
            j = k
        return j

    def release(self, leases: Iterable[Lease]) -> int:
        n = 0
        for lease in leases:
            i = self._held(lease)
            if i is not None:
                del self._tokens[i]
                self.rows.give_back(i, lease.key, lease.payload)
                self._set(i, PENDING)
                self._push(i)
                if self.refresher is not None:
                    self.refresher.returned(i)
                n += 1
        return n

    # -- refetches by change (see scrapy_opic.opic.refresh) ----------------------------------
    def due_page(self, full_slots: Collection[Hashable], early: bool, now: float) -> int | None:
        """The refetch due first among the pages a pop may take (pending, not parked, open,
        their slot not in ``full_slots`` nor backing off), out of the schedule (the caller
        leases it: :meth:`take`); ``early``: one not due yet will do. None if none (or no
        refresher)."""
        r = self.refresher
        sel = self.selection
        if r is None or not isinstance(sel, TieredSelection):
            return None
        room = self._room_now(full_slots)
        status, parked, flags = self.status, self.backoff.parked, self.engine.flags_mv
        tier, slot = self.tier, self.tiers.slot

        def eligible(j: int) -> bool:
            if status[j] != PENDING or j in parked or flags[j] & CLOSED or j not in sel:
                return False
            return room is None or room(slot(tier[j]) if tier[j] else "")

        return r.due(eligible, early, now)

    def forget_lies(self, slot: Hashable, *, unchanged: bool = True, dated: bool = False) -> int:
        """The pages of download slot ``slot`` (a host whose validators lied) forget what the
        lie taught them (:meth:`~.refresh.Refresher.forget`); how many pages."""
        r = self.refresher
        if r is None:
            return 0
        codes = [c for c, (_p, s) in enumerate(self.tiers.as_list(), 1) if s == slot]
        n = self.engine.n
        ids = np.flatnonzero(np.isin(np.frombuffer(self.tier, np.uint32, n), codes))
        r.forget(ids, unchanged=unchanged, dated=dated)
        return len(ids)

    def relay_pick(self, popped: int) -> int | None:
        """The page a relay visit after the refetch pop of ``popped`` is for (see
        :mod:`~scrapy_opic.opic.refresh`): the richest page waiting, if it was fetched and has
        kept links; else None."""
        r = self.refresher
        sel = self.selection
        if r is None or not isinstance(sel, TieredSelection):
            return None
        got = sel.peek(None, False)
        if got is None or got[0] == popped or not self.fetched(got[0]):
            return None
        return got[0] if r.links_of(got[0]) is not None else None

    def relay(self, i: int, outside: Sequence[float] = ()) -> list[Share]:
        """A relay visit of page ``i`` (:meth:`relay_pick`): its cash paid over its kept links,
        without a download. ``outside``: the weights of its kept links to pages
        this frontier does not hold, whose shares are returned (see :meth:`visit_out`)."""
        r = self.refresher
        kept = None if r is None else r.links_of(i)
        if r is None or kept is None:
            raise ValueError(f"page {i} has no kept links to relay over")
        sel = self.selection
        waiting = i in sel
        if waiting:
            sel.discard(i)
        shares = self._pay_kept(i, kept, outside)
        r.relays += 1
        if waiting:
            sel.push(i)
        return shares

    def _pay_kept(self, i: int, kept: Any, outside: Sequence[float] = ()) -> list[Share]:
        """Visit page ``i`` over its kept links (aliases followed as in a visit); the shares
        of ``outside`` links (see :meth:`visit_out`)."""
        ids = kept.ids.tolist()
        paid = [self.target(j) for j in ids] if self.alias else ids
        weights = None if kept.weights is None else kept.weights.tolist()
        if len(set(paid)) < len(paid):
            paid, weights = _one_link_per_page(paid, weights)
        return self.engine.visit_out(i, paid, weights, kept.virtual_weight, outside)[1]

    def refetchable(self) -> np.ndarray:
        """The mask of the pages a refetch plan covers: fetched, open, pending or in flight."""
        n = self.engine.n
        st = np.frombuffer(self.status, np.uint8, count=n)
        flags = self.engine.flags[:n]
        live = ((st == PENDING) | (st == IN_FLIGHT)) & ((flags & FETCHED) != 0)
        live &= (flags & CLOSED) == 0
        return live

    # -- figures ------------------------------------------------------------------------------
    def figures(self) -> dict[str, float]:
        out = self.engine.stats()
        out["fetched"] = self.n_ok
        out["failed_visits"] = self.failed_visits
        if self.refresher is not None:
            out.update(self.refresher.figures())
        if self.backoff.base:
            out["backed_off_pages"] = len(self.backoff.parked)
            out["backed_off_slots"] = len(self.backoff.slots)
        out.update(zip(STATUSES, self.counts))
        return out

    def top_page(self) -> tuple[str, float] | None:
        best = best_page(self.engine)
        if best is None:
            return None
        url = self.url_of(best[0])
        return (url if url is not None else str(best[0])), best[1]


def _paid(
    fr: MemoryFrontier, links: Sequence[Link], children: list[int], virtual_weight: float
) -> tuple[list[int], list[float] | None]:
    """The pages the ``links`` of a visit pay (``children``: their pages), aliases followed,
    each once (:func:`_one_link_per_page`), and their weights (None: all 1)."""
    paid = [fr.target(j) for j in children] if fr.alias else children
    # (Decided on the links as given: the same float operations whatever the store.)
    weights = None
    if virtual_weight or any(link.weight != 1.0 for link in links):
        weights = [link.weight for link in links]
    if len(set(paid)) < len(paid):
        return _one_link_per_page(paid, weights)
    return paid, weights


def _one_link_per_page(
    ids: list[int], weights: list[float] | None
) -> tuple[list[int], list[float] | None]:
    """A page links to another page once (after aliases: a link to the old URL and one to the
    new are one link): repeated ids merged, in order of first appearance, each with the largest
    of its weights."""
    merged: dict[int, float] = {}
    for k, j in enumerate(ids):
        w = 1.0 if weights is None else weights[k]
        merged[j] = max(w, merged.get(j, w))
    return list(merged), None if weights is None else list(merged.values())
