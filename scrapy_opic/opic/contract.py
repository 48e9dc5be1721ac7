"""The contract of a crawl frontier: what the Scrapy scheduler drives, whatever the store.

A frontier is an OPIC engine (cash, history, the clock G, the virtual page) plus every page's
place in the crawl and what to fetch it with. The scheduler drives a crawl through the
:class:`Frontier` contract below (:class:`~scrapy_opic._backends.crawl.Crawl` implements it over
any store, each partition's pages in a :class:`~.frontier.MemoryFrontier`); the data that
crosses it are named tuples: :class:`Entry`, :class:`Link`, :class:`Lease`, :class:`Visit`.

Pages and their life cycle
--------------------------
A page is a *key* (in Scrapy, a request fingerprint: bytes) with a URL. It lives through::

    DISCOVERED --schedule--> PENDING --pop--> IN_FLIGHT --visit/fail--> VISITED
                                ^                 |                        |
                                +------retry------+   (continuous crawl) --+

* ``DISCOVERED``: known (a link paid it cash) but nothing asked to fetch it yet.
* ``PENDING``: a *payload* (the request, opaque to the frontier) waits; a pop may hand it out.
* ``IN_FLIGHT``: popped, not answered yet. Never popped again meanwhile; its cash keeps growing
  and the visit takes all of it at that moment.
* ``VISITED``: fetched, or given up. In a one-pass crawl a visited page is never scheduled again
  (a new link to it still pays it cash: the money stays, the fetch is not repeated) unless a
  schedule says ``again``; in a continuous crawl a visited page is pending again at once, with
  the same payload, and waits until its cash makes it the best choice.

A visit pays its links but files none of them: its answer says, per link, whether a request for
that page would be filed (:data:`NEEDS_PAYLOAD`) or not (:data:`DUPLICATE`), and the caller
files the requests it has (:meth:`Frontier.schedule`). A request dropped on its way (by a
middleware, a project's dupefilter) is then never fetched, and its page keeps its cash.

Money on every path
-------------------
Every outcome moves the page's cash somewhere, so that the sum of all cash, the virtual page's
included, stays 1 (:meth:`Frontier.total_cash`):

=======================  =========================================================================
``visit(lease, links)``  history absorbs the cash; the links and the virtual page share it
``unchanged(lease)``     refetched and unchanged (a 304): a visit over the links of its last
                         parsed visit (none kept: all of the cash to the virtual page)
``fail(lease, o)``       fetched but nothing to follow (an error): a visit with no links, so all
                         of the cash goes to the virtual page; the page is *closed* (below),
                         except in a continuous crawl for an outcome not in ``FINAL_OUTCOMES``
``redirect(lease, e)``   the cash moves to the target page ``e`` (same money, another key)
``retry(lease, e)``      nothing moves: the page was not visited; pending again with ``e``
``forfeit(lease, o)``    given up unfetched (robots.txt...): its cash goes to the virtual page;
                         closed
``drop(key, o)``         a page refused before its fetch (a dupefilter): same as ``forfeit``
``release(leases)``      nothing moves: pending again (a process leaving the crawl)
=======================  =========================================================================

Every outcome is recorded per page (``o``, a code of :data:`~.constants.OUTCOMES`, or an HTTP
status): the export's ``status``. A *closed* page (``OpicEngine.close_page``) receives nothing
from then on: later links to it are no links (left out of the linking page's out-degree) and the
virtual page's payouts skip it, so a page that cannot be fetched never piles up cash; it is
never scheduled again unless a request asks for it explicitly (``again``: ``dont_filter``),
which opens it again with no cash. A page whose payload was lost (a request row gone or
damaged) is given up when a pop reaches it.

Leases
------
A pop hands a page out under a :class:`Lease`; every outcome names the lease it settles. An
outcome under a lease that is no longer current (already settled, or expired and handed to
another process) changes nothing: the method returns ``None`` or ``False`` ("stale"). A lease
is settled exactly once: by ``visit``, ``fail``, ``forfeit``, ``retry``, ``redirect`` or
``release``.

Nothing here knows Scrapy or does I/O: payloads are opaque objects, download slots opaque keys.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from .constants import ERROR, FILTERED, FORBIDDEN, OK


class Entry(NamedTuple):
    """A page to schedule: its key and URL, and what to fetch it with (``payload``) through which
    download ``slot``, at which ``priority`` (higher first); ``seed``: a start request (a
    page the crawl starts from, not a link: see "Votes" in :mod:`~.engine`)."""

    key: Hashable
    url: str
    priority: int = 0
    slot: Hashable = ""
    payload: Any = None
    seed: bool = False


class Link(NamedTuple):
    """A link that a visited page follows. ``weight`` sets its share of the page's cash (shares
    are proportional to weights); ``again``: a request for it would be filed even if the page
    was visited (Scrapy's ``dont_filter``)."""

    key: Hashable
    url: str
    weight: float = 1.0
    again: bool = False


class Lease(NamedTuple):
    """A page handed out by a pop: its key, the lease's token, its payload and download slot,
    and its URL (a payload kept as bytes need not hold it)."""

    key: Hashable
    token: Any
    payload: Any
    slot: Hashable
    url: str | None = None


class Visit(NamedTuple):
    """What a visit answers: a code per link, :data:`NEEDS_PAYLOAD` (a request for it would be
    filed: :meth:`Frontier.schedule` it) or :data:`DUPLICATE`, and, if asked, the page's
    importance just after the visit."""

    codes: list[int]
    importance: float | None


class Frontier(Protocol):
    """The contract of a crawl frontier (see the module docstring for the life cycle, the money
    and the leases). Methods that settle a lease return ``None``/``False`` for a stale one."""

    #: Visited pages wait again at once (a refresh crawl) instead of being fetched once.
    continuous: bool

    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        """Ask for each page to be fetched with its entry's payload; a code per entry:
        :data:`SCHEDULED`, :data:`DUPLICATE` (pending or in flight, or visited in a one-pass
        crawl and not ``again``: its cash stays), :data:`NEEDS_PAYLOAD` (schedulable but the
        entry has no payload), :data:`FORWARDED` (sent to the process that holds its page) or
        :data:`LOCAL` (a payload the crawl cannot share: fetch it in this process). A new key
        becomes a page, cash 0."""
        ...

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        """Pay the virtual page out, then lease the best pending page whose download slot is not
        in ``full_slots``; ``None`` if there is none."""
        ...

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
        """The page was fetched and parsed, and follows ``links`` (self-links are not paid):
        its cash moves into its history and is paid out, ``epsilon`` to the virtual page and the
        rest over the links by weight, with ``virtual_weight`` the total weight of links that
        will not be followed (their share goes to the virtual page). In a continuous crawl a
        ``payload`` replaces the one the page was leased with for its later fetches (a retry's
        or redirect's request is for one fetch). ``outcome``: ``ok`` unless the parse failed
        part-way (``spider_error``: the links found before the failure are paid all the same).
        ``changed``: whether its content changed since its last parsed visit (None: unknown),
        and ``modified``: its last change as a trusted ``Last-Modified`` dates it (seconds since
        the epoch), for a crawl that learns change rates."""
        ...

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        """The page was refetched and is unchanged (a 304, or the content of its last parsed
        visit): a visit over the links of that visit (a page with none kept is dangling: its
        cash goes to the virtual page), and an observation of its change rate."""
        ...

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        """The page was fetched but gives nothing to follow (``outcome``: an HTTP error status,
        a download error): a visit with no links; then closed, unless the crawl is continuous
        and the outcome is not final (it is fetched again when its cash says so, with
        ``payload`` if one is given, as for :meth:`visit`)."""
        ...

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        """The page is given up unfetched (``outcome``): its cash goes to the virtual page;
        visited and closed."""
        ...

    def drop(self, key: Hashable, outcome: int = FILTERED, url: str | None = None) -> bool:
        """A page not in flight (discovered or pending) is given up before its fetch: its cash
        goes to the virtual page; closed. False if the page is unknown, in flight or visited.
        ``url``, the page's, tells a crawl over partitions where the page lives."""
        ...

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        """Pending again with ``entry``'s payload (required: :class:`ValueError` without one),
        priority and slot (same key: no money moves). :data:`SCHEDULED`, or :data:`LOCAL` if
        the payload cannot be shared (the page is then forfeited: fetch it in this process)."""
        ...

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        """The page redirected to ``entry`` (another key; a payload is required, as for
        :meth:`retry`): its cash moves there and the target is scheduled; the schedule code of
        the target (a redirect to its own key is a retry). A ``permanent`` redirect (HTTP 301,
        308) makes the page an *alias* of the target: it is closed, and a later link to it is
        a link to the target (as a PageRank graph with redirects folded in has it), so that it
        is never fetched again for the cash its links bring. A temporary one leaves it open: a
        continuous crawl fetches it again when its links file it and pay it."""
        ...

    def release(self, leases: Iterable[Lease]) -> int:
        """Hand leased pages back (pending again, cash intact); returns how many."""
        ...

    def maintain(self, leases: Collection[Lease]) -> None:
        """Periodic upkeep with the leases this process holds: renew them, write what is due."""
        ...

    def close(self, leases: Collection[Lease]) -> None:
        """Hand ``leases`` back and make everything durable; the frontier is unusable after."""
        ...

    def has_pending(self) -> bool:
        """Is any page pending (or in flight in another process of the crawl)?"""
        ...

    def __len__(self) -> int:
        """Pages pending (as last known)."""
        ...

    def figures(self) -> dict[str, float]:
        """The crawl's figures: pages, fetched (pages whose last fetch was parsed: status
        ``ok``), visits (a failed fetch is a visit too), failed_visits, G, error_factor,
        virtual_cash, and the pages per status (discovered, pending, in_flight, visited)."""
        ...

    def status_of(self, key: Hashable) -> str | None:
        """The page's status name (:data:`~scrapy_opic.opic.constants.STATUSES`), or None."""
        ...

    def cash_of(self, key: Hashable) -> float | None:
        """The page's cash now, or None for an unknown key."""
        ...

    def total_cash(self) -> float:
        """All cash, the virtual page's included: 1 up to float rounding. O(pages)."""
        ...

    def top_page(self) -> tuple[str, float] | None:
        """The URL and importance of the most important page (None if none). O(pages)."""
        ...


def require_payload(entry: Entry) -> None:
    """:class:`ValueError` for an entry without a payload where the contract needs one (a retry
    or a redirect: the request to fetch the page with)."""
    if entry.payload is None:
        raise ValueError(f"a retry or redirect needs the request to fetch, none for {entry.url}")


def boosted_weight(weight: float, boost: float) -> float:
    """The weight of a link a crawl focuses on (a URL matching ``OPIC_BOOST_PATTERNS``):
    ``1 + boost`` times its plain weight. It takes that many times a plain link's share of its
    page's cash, out of the page's own payout: so the size of the boost matters (a boost of
    100 gives such a link nearly all of a page's cash, where 1 gives it twice a plain link's
    share), and the money stays where the crawl put it. Importance follows the same split: it
    is that of the link graph with the focused links weighed up (as ``OPIC_INTERNAL_WEIGHT``
    and ``OPIC_EXTERNAL_WEIGHT`` weigh links)."""
    return weight * (1.0 + boost)


def discovery_step(debt: float, share: float, fetched: bool) -> float:
    """The discovery debt after a pop (a continuous crawl's rule).

    Each pop adds ``share`` to the debt, capped at 1; a pop of a page never fetched pays 1 back
    (floored at 0). A pop made while the debt is 1 or more prefers the best page never fetched
    (among the slots with room, of the highest priority tier that has one) to the best page.
    So while there are pages never fetched they get at least ``share`` of the pops, and
    greedy picks more of them when their cash is the highest anyway; the cap keeps a long spell
    without new pages from turning into a burst of them later."""
    debt = min(debt + share, 1.0)
    return debt if fetched else max(debt - 1.0, 0.0)
