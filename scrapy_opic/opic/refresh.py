"""Refetches that maximise importance-weighted freshness: the continuous crawl's change policy.

A :class:`Refresher` is what a :class:`~scrapy_opic.opic.frontier.MemoryFrontier` holds beside
its engine when a continuous crawl refetches by change (``OPIC_REFETCH = "freshness"``). It
wires the pure rules of :mod:`.change` (change rates), :mod:`.freshness` (the allocation of a
refetch budget) and :mod:`.refetch` (earliest due first) to the frontier's events:

* a full visit of page ``i`` (a 200) at wall-clock time ``now``: ``observed(i, now,
  changed)``, ``changed`` being what the content signature (or the validators) said: ``None``
  for a first look, else an observation over the interval since the previous one;
* a 304 (or a 200 whose signature did not change): the same with ``changed=False``, and the
  page's cash is paid over its *kept links* (:meth:`links_of`), those of its last parsed
  visit: the page is unchanged, so are its links;
* a failed fetch that leaves the page open: :meth:`failed` (due again a period later);
* a page closed (404, 410, a permanent redirect...): :meth:`closed` (never refetched, its
  kept links dropped);
* a page that no kept link leads to any more (the last page that linked to it dropped the
  link): due at once (:meth:`keep`). A page removed from a site loses its links first, and the
  crawl learns that it is gone only by asking; until then it holds importance.

Which page a pop takes (the frontier asks :meth:`due` with its own eligibility test):
discovery first takes its share of the pops for pages never fetched, as without a refresher;
every other pop takes the page due first in the schedule, whose frequencies come from
:func:`~.freshness.optimal_allocation` of the importance (the engine's) and the change rates,
re-planned by a :class:`Planner` every ``plan_every`` refetches (or ``plan_seconds``). The
budget of a plan is the rate of refetches the crawl actually made since the previous plan (a
crawl over partitions: one planner per process, over all its partitions); each page gets at
least ``floor_share`` of the mean frequency (a page that never changes is still checked now and
then: a cheap conditional request), and a page fetched for the first time after a plan gets the
mean frequency until the next one.

*Relay visits.* OPIC needs every page's cash to move over its links, but refetches are now
uneven: a page that never changes is fetched once in a long while and would sit on its cash,
the estimates of the pages it links to starved. So after each refetch pop the frontier visits
the richest fetched page from its kept links without a download (:meth:`links_of`
says whether a page can be; the frontier does the visit, which is a plain engine visit: the
money is accounted for as in any visit). One relay visit per refetch: the cash moves at least as
often as in a crawl where every fetch is a Greedy visit.

Times are wall-clock seconds (changes happen in real time, and a resumed crawl must compare its
times with the saved ones); rates are changes per second. Nothing here knows Scrapy or does
I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from .change import ChangeRates
from .freshness import optimal_allocation
from .refetch import RefetchSchedule


class KeptLinks(NamedTuple):
    """The links of a page's last parsed visit, as the engine paid them (page ids after the
    merge of repeated links; their weights aligned, ``None`` when all 1)."""

    ids: np.ndarray
    weights: np.ndarray | None
    virtual_weight: float


T = TypeVar("T")

#: A plan waits at least this many times as long as the last one took (see
#: :meth:`Planner.due`).
PLAN_LOAD = 20.0

#: The change rate (per second) a page is assumed to have before any observation.
PRIOR_RATE = 1e-3

#: Per-page arrays a backend saves for a refresher (see :meth:`Refresher.columns`): each
#: changes only when its page is fetched, so a checkpoint writes the blocks of the pages
#: fetched since the last one. (The frequencies are not saved: a resumed crawl plans again
#: from the rates, the importance and the saved budget.)
COLUMNS = (*ChangeRates.FIELDS, "period")


def link_change(i: int, old: Sequence[int], new: Sequence[int]) -> tuple[set[int], set[int], float]:
    """How page ``i``'s links to other pages moved from ``old`` to ``new``: the pages lost, the
    pages added, and their share of all the pages linked then and now (0 if there are none),
    what a window that adapts to change is told (:meth:`OpicEngine.links_changed`)."""
    # (Python sets: a page's links are tens, where numpy's set operations cost more.)
    before, after = set(old), set(new)
    before.discard(i)
    after.discard(i)
    union = len(before | after)
    lost, added = before - after, after - before
    return lost, added, (len(lost) + len(added)) / union if union else 0.0


def pick(
    best: T | None,
    unfetched: bool,
    owed: bool,
    due: Callable[[bool], T | None],
    counted: Callable[[], None],
) -> T | None:
    """The page a pop of a crawl that refetches by change takes (see the module docstring):
    ``best``, the richest page (a page never fetched first), if it was never fetched
    (``unfetched``) and discovery is ``owed`` its share; else the refetch due first,
    ``due(early)`` (``early``: one not due yet will do, as there is no page never fetched to
    take instead); else ``best``, a refetch the budget counts (``counted``) if it was fetched
    before. One rule for a frontier and for a crawl over partitions."""
    if best is not None and unfetched and owed:
        return best
    got = due(not unfetched)
    if got is None and best is not None:
        if not unfetched:
            counted()
        return best
    return got


class Planner:
    """The refetch budget and when to re-plan (see the module docstring): counts the pops that
    went to refetches, measures the rate the crawl spends on them and hands it out over the
    pages of one or several refreshers (:meth:`plan`). A crawl over several partitions gives
    all its partitions' refreshers one planner: one budget, planned over all their pages.

    :param floor_share: each page's frequency is at least this share of the mean one.
    :param plan_every: re-plan after this many refetch pops (at least; also ``n / 5``).
    :param plan_seconds: ... or after this many seconds, whichever comes first.
    """

    def __init__(
        self, floor_share: float = 0.02, plan_every: int = 64, plan_seconds: float = 30.0
    ) -> None:
        self.floor_share = floor_share
        self.plan_every = plan_every
        self.plan_seconds = plan_seconds
        self.budget = 0.0  # refetches per second of the last plan (0: no plan yet)
        #: The mean frequency of the last plan (a page first fetched since gets it).
        self.mean = 0.0
        self._planned_at: float | None = None
        #: Seconds the last plan took (the caller measures it).
        self.plan_cost = 0.0
        self._refetches = 0  # refetch pops since the last plan
        self._since: float | None = None  # when that count started
        #: A plan is wanted at the next chance (pages came whose frequencies are unknown).
        self.wanted = False
        self.plans = 0

    def count_refetch(self, now: float) -> None:
        """One pop went to a refetch: the budget of the next plan counts it."""
        if self._since is None:
            self._since = now
        self._refetches += 1

    def due(self, n: int, now: float) -> bool:
        """Whether a re-plan is due (enough refetches, or enough time, since the last, or
        :attr:`wanted`), and affordable: a plan is O(n) (about seconds at a million pages,
        during which the crawl waits), so the crawl spends at most ``1 / PLAN_LOAD`` of its
        time planning."""
        if self._planned_at is not None and now - self._planned_at < PLAN_LOAD * self.plan_cost:
            return False
        if self.wanted:
            return True
        if self._since is None:
            return False
        if self._refetches >= max(self.plan_every, n // 5):
            return True
        return self._planned_at is not None and now - self._planned_at >= self.plan_seconds

    def plan(
        self,
        parts: Sequence[tuple[Refresher, np.ndarray, np.ndarray]],
        now: float,
    ) -> None:
        """Re-plan the refetch frequency of every page of ``parts``, ``(refresher, importance
        of its pages, mask of those that may be refetched: fetched, open)``, importances
        comparable across parts. The budget is the refetch rate measured since the previous
        plan (else the one it was, or as saved); change rates a page has no observation of
        are the parts' pooled one."""
        since = self._since if self._since is not None else now
        elapsed = now - since
        if self._refetches and elapsed > 0:
            self.budget = self._refetches / elapsed
        self._refetches, self._since, self._planned_at = 0, now, now
        self.wanted = False
        chosen = [(r, np.flatnonzero(live), imp) for r, imp, live in parts]
        total = sum(ids.size for _r, ids, _imp in chosen)
        if not total or not self.budget > 0:
            return
        rates = _rates_of(chosen)
        weights = np.concatenate([imp[ids] for _r, ids, imp in chosen])
        self.mean = self.budget / total
        freq = optimal_allocation(weights, rates, self.budget, self.floor_share * self.mean)
        at = 0
        for r, ids, _imp in chosen:
            r.schedule.plan(freq[at : at + ids.size], ids, now=now)
            at += ids.size
        self.plans += 1


def _rates_of(chosen: Sequence[tuple[Refresher, np.ndarray, np.ndarray]]) -> np.ndarray:
    """The change rates of the pages ``ids`` of the parts ``(refresher, ids, importance of
    its pages)``, in that order: a page with no observation has the parts' pooled rate."""
    for r, _ids, imp in chosen:
        r.rates.grow(len(imp))
    totals: dict[str, float] = {}
    for r, _ids, _imp in chosen:
        for f, v in r.rates.sums().items():
            totals[f] = totals.get(f, 0.0) + v
    prior = chosen[0][0].rates.rate_of_sums(totals)
    # (One solve for all parts: a process may own hundreds of partitions, each small.)
    columns = zip(*(r.rates.sums_of(ids) for r, ids, _i in chosen))
    return chosen[0][0].rates.rates_of([np.concatenate(c) for c in columns], prior)


class Refresher:
    """Change rates, the refetch schedule and the kept links of a continuous crawl (see the
    module docstring).

    :param planner: the budget and plans (a crawl over partitions shares one); by default
        one of its own.
    :param prior_rate: the change rate assumed before any observation (per second).
    :param wall: the clock (seconds since the epoch).
    """

    def __init__(
        self,
        planner: Planner | None = None,
        prior_rate: float = PRIOR_RATE,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.rates = ChangeRates(prior_rate=prior_rate)
        self.schedule = RefetchSchedule()
        # By page id: its kept links, as the bytes of their int32 ids when they are plain
        # (no weight or refused link: most pages; 4 bytes a link and one small object),
        # else a KeptLinks; None for a page with none.
        self._links: list[bytes | KeptLinks | None] = []
        #: Per page, the pages whose kept links lead to it (see :meth:`keep`).
        self.indegree = np.zeros(0, np.int32)
        self.planner = planner if planner is not None else Planner()
        self.wall = wall
        #: Counters for the crawl's figures.
        self.relays = 0

    # -- events -----------------------------------------------------------------------------
    def keep(
        self,
        i: int,
        ids: Sequence[int] | np.ndarray,
        weights: Sequence[float] | None,
        virtual_weight: float,
    ) -> float | None:
        """Page ``i`` was parsed and paid these links: they are the ones a 304 or a relay
        visit pays later. A page that no kept link leads to any more (the last page that
        linked to it dropped the link) is due for a refetch at once: a page removed from a
        site loses its links first, and the crawl learns that it is gone only by asking.
        Returns the share of the page's links (to other pages) that are new or gone since its
        links were last kept, of all of them then and now (None: none were kept)."""
        new = np.asarray(ids, np.int32)
        old = self.links_of(i)
        if weights is None and not virtual_weight:
            self._put(i, new.tobytes())
        else:
            w = None if weights is None else np.asarray(weights, float)
            self._put(i, KeptLinks(new, w, float(virtual_weight)))
        return self._count_links(i, None if old is None else old.ids, new)

    def _put(self, i: int, kept: bytes | KeptLinks | None) -> None:
        links = self._links
        if i >= len(links):
            links.extend([None] * (max(i + 1, 2 * len(links)) - len(links)))
        links[i] = kept

    def _count_links(self, i: int, old: np.ndarray | None, new: np.ndarray) -> float | None:
        """Keep :attr:`indegree` (kept links to each page from other pages, once per page)
        and expedite the pages it drops to 0; returns what :meth:`keep` does."""
        if old is not None and np.array_equal(old, new):
            return 0.0  # (the same links: most changed pages)
        lost, added, share = link_change(i, () if old is None else old.tolist(), new.tolist())
        top = max(added, default=-1) + 1
        deg = self.indegree
        if top > len(deg):
            deg = np.zeros(max(top, 2 * len(deg)), np.int32)
            deg[: len(self.indegree)] = self.indegree
            self.indegree = deg
        for j in added:
            deg[j] += 1
        now = None
        for j in lost:
            deg[j] -= 1
            if not deg[j]:
                now = self.wall() if now is None else now
                self.schedule.expedite(j, now)
        return None if old is None else share  # (None: nothing kept to compare with)

    def links_of(self, i: int) -> KeptLinks | None:
        """Page ``i``'s kept links (None: it was never parsed, or it was closed since)."""
        kept = self._links[i] if i < len(self._links) else None
        if kept is None or isinstance(kept, KeptLinks):
            return kept
        return KeptLinks(np.frombuffer(kept, np.int32), None, 0.0)

    def kept(self) -> Iterator[tuple[int, KeptLinks]]:
        """``(page, its kept links)`` of every page that has some."""
        for i, kept in enumerate(self._links):
            if kept is not None:
                links = self.links_of(i)
                assert links is not None
                yield i, links

    def observed(
        self,
        i: int,
        changed: bool | None,
        now: float | None = None,
        since: float | None = None,
    ) -> None:
        """Page ``i`` was seen in full (a 200) or confirmed unchanged (a 304) at ``now``.
        ``since``: when it last changed, as a trusted ``Last-Modified`` says. At a first look
        (``changed`` None) that is an observation already: a change then, and none since (a
        page unchanged for a year is not a page that changes hourly, one changed a minute ago
        not one unchanged for a minute: :meth:`ChangeRates.dated
        <scrapy_opic.opic.change.ChangeRates.dated>`); after a change seen, it dates the
        change."""
        now = self.wall() if now is None else now
        self._observe(i, changed, now, since)
        sched = self.schedule
        sched.grow(i + 1)
        mean = self.planner.mean
        if not sched.freq[i] and mean:
            sched.freq[i] = mean  # (first fetched after the last plan: the mean, for now)
        sched.fetched(i, now)

    def _observe(self, i: int, changed: bool | None, now: float, since: float | None) -> None:
        """:meth:`observed`'s observation of page ``i``, as its change rate reads it."""
        rates = self.rates
        if since is not None and not since < now:
            since = None  # (a date in the future: no evidence)
        before = rates.last_seen(i)
        if changed is None and since is not None and np.isnan(before):
            rates.dated(i, now, since)
        else:
            # (A change dated before the previous look is a date that lies: not used.)
            dated = changed and since is not None and since > before
            rates.observe(i, now, changed, at=since if dated else None)

    def forget(self, ids: np.ndarray, *, unchanged: bool = True, dated: bool = False) -> None:
        """Pages ``ids`` forget what their host's lying validators taught them: with
        ``unchanged``, the time they were thought unchanged (304s that hid changes, a constant
        ``Last-Modified``: evidence that would hold their rates low, and their refetches rare,
        long after; their changes seen stand); with ``dated``, the change a ``Last-Modified``
        dated at their first look. Re-planned soon."""
        self.rates.forget(ids, unchanged=unchanged, dated=dated)
        if len(ids):
            self.planner.wanted = True

    def failed(self, i: int, now: float | None = None) -> None:
        """Page ``i``'s fetch failed and the page stays open: due again a period later."""
        self.schedule.grow(i + 1)
        self.schedule.fetched(i, self.wall() if now is None else now)

    def closed(self, i: int) -> None:
        """Page ``i`` is closed: never refetched, its kept links gone."""
        self.schedule.discard(i)
        old = self.links_of(i)
        if old is not None:
            self._put(i, None)
            self._count_links(i, old.ids, np.zeros(0, np.int32))

    def taken(self, i: int) -> None:
        """Page ``i`` is leased (whichever way the pop chose it): out of the schedule until
        it is fetched (:meth:`observed`, :meth:`failed`) or handed back (:meth:`returned`)."""
        self.schedule.take(i)

    def returned(self, i: int) -> None:
        """Page ``i`` was leased and is pending again unfetched (released, retried)."""
        if i < len(self.schedule.state):
            self.schedule.push(i)

    # -- choosing ---------------------------------------------------------------------------
    def due(
        self, eligible: Callable[[int], bool], early: bool, now: float | None = None
    ) -> int | None:
        """The page due first that ``eligible`` accepts, taken out of the schedule (the caller
        leases it); pages it refuses keep their places. ``early``: a page not due yet may be
        taken (nothing else to do). Looks at 64 pages at most."""
        sched = self.schedule
        now = self.wall() if now is None else now
        aside: list[int] = []
        got = None
        try:
            for _ in range(64):
                top = sched.peek()
                if top is None or (top[1] > now and not early):
                    break
                i = sched.pop()
                assert i is not None
                if eligible(i):
                    got = i
                    break
                aside.append(i)
        finally:
            for j in aside:
                sched.push(j)
        if got is not None:
            self.planner.count_refetch(now)
        return got

    # -- planning ---------------------------------------------------------------------------
    def plan(self, importance: np.ndarray, live: np.ndarray, now: float | None = None) -> None:
        """Re-plan every page's refetch frequency (:meth:`Planner.plan` over this refresher's
        pages alone): ``importance`` of all pages, ``live`` the mask of those that may be
        refetched."""
        self.planner.plan([(self, importance, live)], self.wall() if now is None else now)

    # -- saving ------------------------------------------------------------------------------
    def columns(self, n: int) -> dict[str, np.ndarray]:
        """The per-page arrays of pages ``0..n-1`` to save (:data:`COLUMNS`, prefixed ``r.``)."""
        self.rates.grow(n)
        self.schedule.grow(n)
        out = {f"r.{f}": self.rates.a[f][:n] for f in ChangeRates.FIELDS}
        out["r.period"] = self.schedule.last[:n]  # (the start of its current period)
        return out

    def load(self, cols: dict[str, np.ndarray], budget: float) -> None:
        """Take saved arrays back (as :meth:`columns` gave them) and the budget of the saved
        crawl's last plan; the caller re-plans (:meth:`plan`) once the pages are back."""
        n = len(cols["r.period"])
        self.rates.grow(n)
        for f in ChangeRates.FIELDS:
            self.rates.a[f][:n] = cols[f"r.{f}"]
        self.schedule.grow(n)
        self.schedule.last[:n] = cols["r.period"]
        self.planner.budget = budget

    def kept_from(self, pages: np.ndarray, counts: np.ndarray, targets: np.ndarray) -> None:
        """Kept links from a saved state's link rows (weights are not saved: plain links)."""
        ends = np.cumsum(counts)
        starts = ends - counts
        for i, a, b in zip(pages.tolist(), starts.tolist(), ends.tolist()):
            ids = np.unique(targets[a:b]).astype(np.int32)
            self._put(i, ids.tobytes())
            self._count_links(i, None, ids)

    def figures(self) -> dict[str, float]:
        return {
            "refetch_budget": self.planner.budget,
            "refetch_plans": self.planner.plans,
            "relay_visits": self.relays,
        }
