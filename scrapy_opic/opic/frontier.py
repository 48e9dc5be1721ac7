"""The crawl frontier: an OPIC engine plus every page's place in the crawl and its pending payload.

A page (one key: in Scrapy, a request fingerprint) lives through::

    DISCOVERED --schedule--> PENDING --pop--> IN_FLIGHT --complete/fail--> VISITED
                                 ^                |                           |
                                 +----retry-------+     (continuous mode) ----+

* ``DISCOVERED``: known (it has cash: links paid it) but nothing asked to fetch it yet.
* ``PENDING``: a payload (the request) waits; the selection strategy may pop it.
* ``IN_FLIGHT``: popped, not answered yet. Never popped again meanwhile; its cash keeps growing
  and the visit takes all of it at completion.
* ``VISITED``: fetched. In a one-pass crawl it is never scheduled again (a new link to it still
  pays it cash: the money is kept, the fetch is not repeated); in a continuous crawl it goes back
  to ``PENDING`` at once and waits until its cash makes it the best choice again.

Every exit path moves money somewhere (``Frontier.total_cash()`` stays 1):

==========================  ==================================================================
``complete(i, children)``   a visit: history absorbs the cash, out-links and virtual page share it
``fail(i)``                 fetched but useless (error, non-2xx): a visit with no out-links, all
                            the cash goes to the virtual page
``redirect(i, key, ...)``   the cash moves to the target page (same money, new key)
``retry(i, ...)``           nothing moves: the page was not visited
``forfeit(i)``              given up unfetched (dropped request): cash to the virtual page
==========================  ==================================================================

Nothing here knows Scrapy: payloads are opaque objects and download slots opaque keys.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .engine import OpicEngine
from .selection import Selection, TieredSelection, make_selection

DISCOVERED, PENDING, IN_FLIGHT, VISITED = 0, 1, 2, 3
STATUS_NAMES = ("discovered", "pending", "in flight", "visited")


class Frontier:
    """Pages, their life-cycle status, their pending payloads and the OPIC money between them.

    :param engine: the OPIC engine holding cash and history.
    :param strategy: ``greedy`` (slot-aware: the page with the most cash among download slots
        with room), ``random`` or ``cycle``.
    :param continuous: re-pend every visited page (refresh crawl) instead of fetching it once.
    """

    def __init__(
        self,
        engine: OpicEngine,
        strategy: str = "greedy",
        continuous: bool = False,
        seed: int | None = None,
    ) -> None:
        self.engine = engine
        self.continuous = continuous
        self.status = bytearray()
        self.payloads: dict[int, Any] = {}
        self._slots: dict[int, tuple[int, Hashable]] = {}  # (priority, download slot)
        self.selection: Selection = (
            TieredSelection(engine)
            if strategy == "greedy"
            else make_selection(strategy, engine, seed)
        )
        self.counts = [0, 0, 0, 0]  # pages per status
        self._in_flight: dict[Hashable, int] = {}  # download slot -> pages in flight
        #: called with a page id when its payload is dropped (it left pending/in flight for
        #: good): a store deletes the page's request row then.
        self.on_dropped: Callable[[int], None] | None = None
        engine.add_observer(self)

    # -- engine observer: only growth matters here ----------------------------------------
    def grow(self, capacity: int) -> None:
        if capacity > len(self.status):
            self.status.extend(bytes(capacity - len(self.status)))

    def raised(self, i: int) -> None:
        pass

    def changed(self, ids: Iterable[int]) -> None:
        pass

    def taken(self, ids: Iterable[int]) -> None:
        pass

    # -- helpers ------------------------------------------------------------------------------
    def _set(self, i: int, status: int) -> None:
        old = self.status[i]
        self.counts[old] -= 1
        self.status[i] = status
        self.counts[status] += 1
        if old == IN_FLIGHT or status == IN_FLIGHT:
            slot = self._slots.get(i, (0, None))[1]
            n = self._in_flight.get(slot, 0) + (status == IN_FLIGHT) - (old == IN_FLIGHT)
            if n:
                self._in_flight[slot] = n
            else:
                self._in_flight.pop(slot, None)

    def in_flight(self, slot: Hashable) -> int:
        """Pages of download ``slot`` handed out and not finished yet (O(1)). Unlike the
        downloader's own count, it includes requests still on their way through the
        middlewares, which is what keeps a run of pops from piling onto one host."""
        return self._in_flight.get(slot, 0)

    def _push(self, i: int) -> None:
        if isinstance(self.selection, TieredSelection):
            self.selection.push(i, self._slots.get(i, (0, None)))
        else:
            self.selection.push(i)

    def discover(self, key: Hashable) -> int:
        """Id of the page with ``key``, creating it (``DISCOVERED``, no cash) if new."""
        before = self.engine.n
        i = self.engine.page(key)
        if self.engine.n > before:
            self.counts[DISCOVERED] += 1
        return i

    def __len__(self) -> int:
        """Pages waiting to be fetched."""
        return self.counts[PENDING]

    def status_of(self, key: Hashable) -> str | None:
        i = self.engine.id_of(key)
        return None if i is None else STATUS_NAMES[self.status[i]]

    # -- scheduling -----------------------------------------------------------------------
    def schedule(
        self,
        key: Hashable,
        payload: Any,
        slot: Hashable = None,
        priority: int = 0,
        again: bool = False,
    ) -> bool:
        """Ask for page ``key`` to be fetched with ``payload`` through download ``slot``; with the
        greedy strategy a higher ``priority`` is served first. Returns ``False`` for a duplicate:
        the page is already pending or in flight, or was visited in a one-pass crawl (unless
        ``again``: fetch a visited page once more). (Links that led here have already paid the
        page: a duplicate keeps its money.)"""
        i = self.discover(key)
        status = self.status[i]
        if status in (PENDING, IN_FLIGHT) or (status == VISITED and not (self.continuous or again)):
            return False
        self.payloads[i] = payload
        self._slots[i] = (priority, slot)
        self._set(i, PENDING)
        self._push(i)
        return True

    def pop(self, has_room: Callable[[Hashable], bool] | None = None) -> tuple[int, Any] | None:
        """Next page to fetch (``IN_FLIGHT`` from now on) and its payload, or ``None``.
        ``has_room(slot)`` says whether a download slot can take one more request."""
        sel = self.selection
        i = sel.pop(has_room) if isinstance(sel, TieredSelection) else sel.pop()
        if i is None:
            return None
        self._set(i, IN_FLIGHT)
        return i, self.payloads[i]

    def _done(self, i: int) -> None:
        if self.continuous and i in self.payloads:
            self._set(i, PENDING)
            self._push(i)
        else:
            self._retire(i)

    def _retire(self, i: int) -> None:
        self._set(i, VISITED)
        if i in self.payloads:
            del self.payloads[i]
            self._slots.pop(i, None)
            if self.on_dropped is not None:
                self.on_dropped(i)

    # -- outcomes -------------------------------------------------------------------------
    def complete(
        self,
        i: int,
        children: Sequence[int],
        weights: Sequence[float] | None = None,
        boosts: Sequence[float] | None = None,
        virtual_weight: float = 0.0,
    ) -> float:
        """Page ``i`` was fetched and parsed; ``children`` are the pages it links to (ids from
        :meth:`discover`); see :meth:`OpicEngine.visit` for the other arguments. Returns the
        cash its visit absorbed."""
        c = self.engine.visit(i, children, weights, boosts, virtual_weight)
        self._done(i)
        return c

    def fail(self, i: int) -> float:
        """Page ``i`` was fetched but gave nothing to follow (download error, non-2xx status,
        callback error): a visit with no out-links, its cash goes to the virtual page."""
        return self.complete(i, ())

    def redirect(
        self, i: int, key: Hashable, payload: Any, slot: Hashable = None, priority: int = 0
    ) -> tuple[int, bool]:
        """Page ``i`` redirected to page ``key``: its cash moves there and the target is
        scheduled with ``payload`` (unless it is a duplicate: then it keeps the cash).
        Returns the target's id and whether it was scheduled."""
        j = self.discover(key)
        if j == i:  # redirect to itself: a retry in disguise
            self.retry(i, payload, slot, priority)
            return i, True
        self.engine.transfer(i, j)
        self._retire(i)
        return j, self.schedule(key, payload, slot, priority)

    def retry(
        self, i: int, payload: Any = None, slot: Hashable = None, priority: int | None = None
    ) -> None:
        """Page ``i`` goes back to ``PENDING`` without a visit (no money moves), with a new
        ``payload`` and, if given, a new ``priority`` (Scrapy lowers a retry's) and ``slot``."""
        if self.status[i] != IN_FLIGHT:
            return
        if payload is not None:
            self.payloads[i] = payload
        self._set(i, PENDING)  # (uncounts the in-flight page under its old slot)
        if priority is not None:
            self._slots[i] = (priority, slot)
        self._push(i)

    def forfeit(self, i: int) -> float:
        """Give page ``i`` up without fetching it: its cash goes to the virtual page."""
        if self.status[i] == PENDING:
            self.selection.discard(i)
        self._retire(i)
        return self.engine.forfeit(i)

    def release_in_flight(self) -> int:
        """Put every ``IN_FLIGHT`` page back to ``PENDING`` (a resumed crawl); returns how many."""
        back = [i for i in range(self.engine.n) if self.status[i] == IN_FLIGHT]
        for i in back:
            self.retry(i)
        return len(back)

    @classmethod
    def restore(
        cls,
        engine: OpicEngine,
        status: bytes,
        payloads: dict[int, Any],
        slots: dict[int, tuple[int, Hashable]] | None = None,
        strategy: str = "greedy",
        continuous: bool = False,
        seed: int | None = None,
    ) -> Frontier:
        """A frontier over a reloaded engine: ``status`` per page as saved, ``payloads`` of the
        pending (and in-flight) pages, ``slots`` their ``(priority, download slot)``. In-flight
        pages become pending again: their fetch may not have happened, and their cash is still
        theirs."""
        f = cls(engine, strategy, continuous, seed)
        f.grow(engine.capacity)
        f.status[: len(status)] = status
        f.counts = [0, 0, 0, 0]
        for st in status:
            f.counts[st] += 1
        slots = slots or {}
        for i in range(len(status)):
            if status[i] in (PENDING, IN_FLIGHT):
                if i in payloads:
                    f.payloads[i] = payloads[i]
                    f._slots[i] = slots.get(i, (0, None))
                if status[i] == IN_FLIGHT:  # counted so that _set can uncount it
                    slot = f._slots.get(i, (0, None))[1]
                    f._in_flight[slot] = f._in_flight.get(slot, 0) + 1
                f._set(i, PENDING)
                if i not in payloads:  # nothing to fetch it with: give it up
                    f.forfeit(i)
                    continue
                f._push(i)
        return f

    def total_cash(self) -> float:
        """All cash, virtual page included: 1 up to rounding."""
        return self.engine.total_cash()

    def stats(self) -> dict[str, float]:
        out = self.engine.stats()
        out.update({name.replace(" ", "_"): n for name, n in zip(STATUS_NAMES, self.counts)})
        return out


__all__ = ["DISCOVERED", "IN_FLIGHT", "PENDING", "STATUS_NAMES", "VISITED", "Frontier"]
