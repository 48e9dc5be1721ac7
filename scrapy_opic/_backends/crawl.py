"""One crawl as the Scrapy scheduler drives it: the partitions this process owns (a
:class:`~scrapy_opic.opic.fleet.Fleet`) and the store that keeps them (:mod:`.store`), whatever
the store: one path from the scheduler to the engine.

:class:`Crawl` implements the :class:`~scrapy_opic.opic.frontier.Frontier` contract over its
fleet, and decides what the store keeps and when:

* *Ownership.* At each beat (every :data:`REBALANCE` seconds) the crawl claims the partitions in
  use that no live process owns, up to its share of them, or marks some of its own *leaving*
  when it holds more than its share while another holds too few; a partition leaving is handed
  over once its pages are all back and its hosts have been quiet for :attr:`Crawl.quiet`
  seconds (their download delay, which Scrapy keeps within one process only). The pool goes to
  the last process in the order of their names. A process alone in its crawl owns every
  partition it meets. With a store of one process (sqlite) it owns every partition at once.
* *Durability.* A store that journals (Redis) gets each member's new records every
  :data:`FLUSH` seconds (at every tick while cash waits to leave, or nothing is left to pop),
  and a checkpoint that replaces them after :data:`~.held.CHECKPOINT_BATCHES` batches or
  :data:`~.held.CHECKPOINT_SECONDS`; one that keeps checkpoints alone (sqlite) gets one every
  ``commit_visits`` visits (doubling from 1 at the start) or ``commit_seconds``, and at close.
  A write waits while links a visit paid have not come back as requests (:attr:`Crawl.ready`):
  a state written then would hold those pages without a request. A message may leave once the
  record that made it is durable (or with it, in one atomic write).
* *Patience.* A store that does not answer (a Redis restart, a failover) is waited for up to
  :data:`~.patience.PATIENCE` seconds, with one warning; meanwhile nothing is popped (what would be
  fetched could be lost with the leases).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Any

from .._series import Series
from ..opic.config import CrawlConfig
from ..opic.constants import ERROR, FILTERED, FORBIDDEN, IN_FLIGHT, OK
from ..opic.contract import Entry, Lease, Link, Visit
from ..opic.fleet import FIGURES, Fleet, finish_figures
from ..opic.journal import Member
from ..opic.messages import POOL, LateNote, Message, in_transit
from ..opic.partition import LATE_RECORDS, Partition
from ..opic.pool import Pool
from . import StoreError, masked_url
from .feed import Feed
from .held import Held
from .patience import Patience
from .store import FAILED, LOST, Claim, Flushed, Outcome, Store, Write

logger = logging.getLogger(__name__)

#: Seconds between two looks at whether to write (the scheduler's upkeep tick), with a store
#: that journals.
TICK = 0.1
#: Seconds between two flushes of a process with pages to pop (one that found none flushes at
#: every tick).
FLUSH = 0.5
#: Seconds between two reads of the inboxes when there is nothing to write.
READ = 0.5
#: Seconds between two looks at the fleet (beats, partition shares, claims, releases).
REBALANCE = 1.0
#: Seconds between two rounds of reports to the pool (and of its payouts).
REPORT = 0.5
#: Cash held back (see :func:`_waiting_cash`) above which a process flushes at every
#: tick, with its reports: a tenth of the crawl's.
URGENT = 0.1
#: Leases a page in doubt waits, from the claim of its partition, for the outcome its sender
#: may still tell (a process stopped past its lease tells it when it runs again) before it is
#: fetched again.
DOUBT_LEASES = 4
#: The figures that say the crawl has work left.
_WORK = ("pending", "in_flight", "messages", "unconfirmed")


class Crawl:
    """A crawl's frontier in this process (see the module docstring). Open one with
    :meth:`open`.

    :param store: where the crawl is kept.
    :param config: its parameters.
    :param encode: ``encode(payload, url)``: a request as bytes (``None`` if it cannot be),
        for a store shared by several processes.
    :param lease: seconds a member's lease lasts unrenewed.
    :param commit_visits: a store that keeps checkpoints alone writes one every this many
        visits (doubling from 1 at the start), or every ``commit_seconds``, which also paces
        the crawl's time series.
    :param feed: where start URLs pushed into the running crawl wait, if anywhere.
    """

    def __init__(
        self,
        store: Store,
        config: CrawlConfig,
        *,
        encode: Callable[[Any, str | None], bytes | None] | None = None,
        lease: float = 30.0,
        commit_visits: int = 500,
        commit_seconds: float = 10.0,
        feed: Feed | None = None,
        time_fn: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.feed = feed
        self.config = config
        self.fleet = Fleet(
            config,
            encode=(encode or _bytes_only) if store.shared else None,
            time_fn=time_fn,
            claim=self._claim_alone,
            atomic=store.atomic,
            record_leases=store.shared and store.journaled,
        )
        self.continuous = config.continuous
        self.shared = store.shared
        self.location = store.location
        self.lease_seconds = lease
        self.maintain_interval = TICK if store.journaled else max(0.05, commit_seconds / 2)
        #: Whether a write may be made now (see the module docstring); the scheduler's.
        self.ready: Callable[[], bool] = lambda: True
        #: Seconds to wait after the last outcome of a partition before handing it to another
        #: process (its hosts' download delay): set by the scheduler.
        self.quiet = 0.0
        self.patience = Patience(store)
        self.held: dict[int, Held] = {}
        self.series = Series()
        self._commit_visits = commit_visits
        self._commit_seconds = commit_seconds
        self._next_commit = 1
        self._due_since: float | None = None
        self._committing = False
        self._last_commit = time.monotonic()
        self._leaving: set[int] = set()
        self._resend: list[Message] = []
        self._live: list[str] = [store.worker]
        self._next_rebalance = 0.0
        self._next_report = 0.0
        self._last_flush = 0.0
        self._hungry = False  # the last pop found nothing to pop at all
        self._next_point = 0.0
        self._point_visits = 0
        self._global: dict[str, float] | None = None
        self._global_at = -1e9
        self._started = time.monotonic()
        self._elapsed_before = 0.0
        self._unjudged: dict[str, dict[str, Any]] = {}  # verdicts the store did not take yet

    @property
    def round_trips(self) -> int:
        """Round trips to the store (and to the feed) made by this process."""
        return self.store.round_trips + (self.feed.round_trips if self.feed is not None else 0)

    # -- opening ----------------------------------------------------------------------------
    def open(self, meta: dict[str, Any]) -> bool:
        """Create the crawl or join it, and take this process's share of it; whether this
        call created it."""
        created = self.store.open(self.config, meta)
        self._rebalance()
        return created

    def _claim(self, k: int) -> Member | None:
        """Take member ``k`` if no process owns it: loaded, and this process's from now on."""
        asked = time.monotonic()
        got: Claim | None = self.store.claim(k)
        if got is None:
            return None
        member = got.member
        held = self.held[k] = Held(member, got.token, got.log)
        held.renewed(asked, self.lease_seconds)
        if got.crawl is not None:
            self.series = Series.from_list(got.crawl.get("series", []))
            self._elapsed_before = self.series.last_elapsed()
            self.fleet.discovery_debt = float(got.crawl.get("discovery_debt", 0.0))
        if isinstance(member, Pool):
            self.fleet.adopt_pool(member)
        else:
            assert isinstance(member, Partition)
            if got.new:  # (made now: its pages' back pay of the crawl's teleport credit)
                member.start(self.fleet.teleport())
            if got.endow:
                member.endow()
            self.fleet.adopt(member)
        self._resend.extend(member.resend())
        return member

    def _claim_alone(self, k: int) -> Partition | None:
        """The fleet's claim: a process alone in its crawl owns every partition it meets."""
        if len(self._live) > 1 or self.patience.waiting:
            return None
        member = self._claim(k)
        return member if isinstance(member, Partition) else None

    def _lose(self, k: int, release: bool = False) -> None:
        """Member ``k`` is no longer this process's: forgotten (the scheduler's leases of its
        pages are stale from now on), its lease given up (``release``) if still held. The
        messages its members applied here at once and not yet durably go to its next owner
        through the store."""
        held = self.held.pop(k, None)
        self._leaving.discard(k)
        if held is None:
            return
        if k != POOL:
            # Its records not durable go to its next owner, which applies the outcomes of pages
            # this process handed out (in doubt there: see Partition.late); the rest, redone.
            tail = [rec for batch, _ in held.unwritten for rec in batch]
            tail += held.member.take_journal()
            late = tuple(rec for rec in tail if type(rec) in LATE_RECORDS)
            if late:
                self.fleet.notes.append(LateNote(k, late))
        if release:
            with contextlib.suppress(Exception):  # (it lapses all the same)
                self.store.release(k, held.token)
        self.fleet.abandon(k)
        if not self.store.atomic:
            for member in self.fleet.members():
                unsent = {(m.dst, m.seq) for m, _ in member.outbox}
                self._resend.extend(
                    m
                    for m in member.box.unconfirmed.values()
                    if m.dst == k and (m.dst, m.seq) not in unsent
                )

    # -- the contract ----------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        codes = self.fleet.schedule(entries, again)
        if self._due_since is not None:
            self._commit_when_ready()
        return codes

    def may_send(self, lease: Lease) -> bool:
        """Whether the request of ``lease`` may go out now: its partition is still this
        process's, and by this process's clock its store lease stays so for :attr:`quiet`
        seconds more (its hosts' download delay: a next owner sends only once the lease has
        lapsed, so no two processes' requests to a host come closer than that)."""
        if not self.store.shared:
            return True
        k = self.fleet.holder(lease)
        held = self.held.get(k) if k is not None else None
        return held is not None and time.monotonic() + self.quiet < held.valid_until

    def durable(self, lease: Lease) -> bool | None:
        """Whether the request of ``lease`` may go out as far as the store goes: True once the
        record of its handing out is durable (a next owner of its partition would hold the
        page in doubt), None while it is not yet (:meth:`flush_leases`), False if the lease
        is stale."""
        return self.fleet.durable(lease)

    def flush_leases(self) -> None:
        """A flush now, for requests waiting for their lease records (:meth:`durable`), without
        the inbox reads and reports (the periodic flush's); not while the links of a visit are
        on their way back to be filed (the upkeep tick flushes then)."""
        if self.store.journaled and self.ready() and not self.patience.waiting:
            with self.patience.answered():
                self.flush(light=True)

    def _lapsing(self) -> set[int]:
        """The members this process may no longer own by the time a request popped now goes
        out (see :meth:`may_send`), and those being handed over: none of their pages is
        popped."""
        if not self.store.shared:
            return self._leaving
        soon = time.monotonic() + self.quiet
        return self._leaving | {k for k, h in self.held.items() if soon >= h.valid_until}

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        if self.patience.waiting:
            return None  # (what it would fetch now could be lost with its leases)
        if self._due_since is not None:
            self._commit_when_ready()
        with self.patience.answered():
            if not self.store.atomic:
                self.quiesce()  # (alone: its pages on their way between its partitions, first)
            elif len(self._live) <= 1:
                self._claim_destinations()
        if self.patience.waiting:
            return None
        # (A partition being handed over gives no more pages.)
        lease = self.fleet.pop(full_slots, self._lapsing())
        # (Hungry: no page to pop at all, not merely the slots with pages full.)
        self._hungry = lease is None and not len(self.fleet)
        return lease

    def _active(self, lease: Lease, result: Any) -> Any:
        """An outcome of ``lease``'s partition here, and the visits that make a write due.
        (The hosts of a partition handed to another process must have been quiet since, for
        their download delay: an outcome comes after its request was sent.)"""
        held = self.held.get(lease.token[0]) if isinstance(lease.token, tuple) else None
        if held is not None:
            held.last_active = time.monotonic()
        if not self.store.journaled and self._due_since is None:
            visits = sum(p.frontier.engine.visit_count for p in self.fleet.parts.values())
            if visits >= self._next_commit:
                # Due, taken at the next call once ready(): not inside the visit, whose links
                # are still on their way back to be filed.
                self._due_since = time.monotonic()
        return result

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
        got = self.fleet.visit(
            lease, links, virtual_weight, importance, payload, outcome, changed, modified
        )
        return self._active(lease, got)

    def unchanged(self, lease: Lease, payload: Any = None) -> Visit | None:
        return self._active(lease, self.fleet.unchanged(lease, payload))

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        return self._active(lease, self.fleet.fail(lease, outcome, payload))

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        return self._active(lease, self.fleet.forfeit(lease, outcome))

    def drop(self, key: Hashable, outcome: int = FILTERED, url: str | None = None) -> bool:
        return self.fleet.drop(key, outcome, url)

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        return self._active(lease, self.fleet.retry(lease, entry))

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        return self._active(lease, self.fleet.redirect(lease, entry, permanent))

    def release(self, leases: Iterable[Lease]) -> int:
        leases = list(leases)
        for lease in leases:
            self._active(lease, None)
        return self.fleet.release(leases)

    def __len__(self) -> int:
        return len(self.fleet)

    # -- upkeep --------------------------------------------------------------------------------
    def maintain(self, leases: Collection[Lease]) -> None:
        """The scheduler's upkeep tick: the fleet every :data:`REBALANCE` seconds, a write that
        is due (see the module docstring)."""
        with self.patience.answered():
            now = time.monotonic()
            if now >= self._next_rebalance:
                self._next_rebalance = now + REBALANCE
                self._rebalance()
                self._end_doubts(now)
            if self.store.journaled:
                self._flush_when_due(now)
            elif self._due_since is not None or now - self._last_commit >= self._commit_seconds:
                self._commit_when_ready()

    def _flush_when_due(self, now: float) -> None:
        """A flush of a store that journals, if one is due (see the module docstring)."""
        # A process batches its writes (fewer round trips), but not the crawl's money: cash that
        # waits to leave (messages, the pool's parts of virtual pages) is cash no page holds,
        # and a crawl of few pages, where a page holds much, would slow down for it.
        # One that found nothing to pop flushes at every tick, for the pages sent to it.
        waiting = _waiting_cash(self.fleet)
        pace = TICK if self._hungry or waiting > URGENT else FLUSH
        renew = any(now >= h.renew_at for h in self.held.values())
        due = now >= self._last_flush + (pace if self._busy() else max(pace, READ))
        # (Not while the links of a visit are on their way back to be filed, for a second at
        # most: records written then would hold pages without a request.)
        if renew or (due and (self.ready() or now - self._last_flush >= REBALANCE)):
            self.flush(reports=waiting > URGENT)

    def _commit_when_ready(self) -> None:
        """A checkpoint now if :attr:`ready`, else as soon as it is; after ``commit_seconds``
        of waiting, at once (links dropped on their way back must not stop checkpoints)."""
        now = time.monotonic()
        if self._due_since is None:
            self._due_since = now
        if self.ready() or now - self._due_since >= self._commit_seconds:
            self.commit(wait=False)

    # -- writing -----------------------------------------------------------------------------
    def flush(self, reports: bool = False, wait: bool = False, light: bool = False) -> None:
        """One step of the store: the members' new records (or checkpoints), the messages that
        may leave and the notes, the leases due renewed, the inboxes read; the reports to the
        pool and its payouts every :data:`REPORT` seconds (or now, with ``reports``).
        ``light``: no reads, reports or claims (a write for requests waiting to go out). (The
        notes go with the records: a note files a page that a record paid.)"""
        now = time.monotonic()
        if not light:
            if reports or now >= self._next_report:
                self._next_report = now + REPORT
                self.fleet.reports()
            self._series_point()
            self._last_flush = now
            self._claim_destinations()
        if self.store.atomic:
            self.fleet.deliver_local()
        writes, marks, renew = self._writes(now, light)
        messages, notes = self.fleet.outgoing()
        messages = self._resend + messages
        self._resend = []
        reads = {}
        if self.store.shared and not light:
            reads = {k: h.read_from for k, h in self.held.items()}
        if not any((writes, renew, messages, notes, reads)):
            return
        try:
            got = self.store.flush(writes, messages, notes, renew, reads, wait)
        except BaseException:  # (no reply: what was sent may have landed, or not)
            self._resend.extend(messages)
            self.fleet.notes[:0] = notes  # (a note that comes twice changes nothing)
            raise
        self._take(writes, marks, renew, got, now)
        if self._unjudged:
            self._judge_unjudged()

    # -- seeds pushed into the running crawl ---------------------------------------------------
    def take_seeds(self) -> list[bytes]:
        """Seeds pushed into the crawl to file now (:meth:`Feed.take
        <scrapy_opic._backends.feed.Feed.take>`): none without a feed, or while the store does
        not answer (they wait in the feed)."""
        if self.feed is None or self.patience.waiting:
            return []
        with self.patience.answered():
            return self.feed.take(self._live)
        return []

    def seeds_filed(self) -> bool:
        """The seeds taken are filed: made durable (a commit), then dropped from the feed;
        whether they were. (A store that does not answer keeps them in the feed, and the next
        take gives them again: filed twice, a page is a duplicate the second time.)"""
        if self.feed is None:
            return True
        with self.patience.answered():
            self.commit()
            self.feed.done()
            return True
        return False

    # -- verdicts on hosts' validators --------------------------------------------------------
    def forget_lies(self, host: str, *, unchanged: bool = True, dated: bool = False) -> int:
        """The pages of ``host`` (its download slot) forget what its lying validators taught
        their change rates (:meth:`Fleet.forget_lies <scrapy_opic.opic.fleet.Fleet.forget_lies>`);
        how many pages."""
        return self.fleet.forget_lies(host, unchanged=unchanged, dated=dated)

    def judge(self, host: str, verdict: dict[str, Any]) -> None:
        """Keep a verdict on ``host``'s validators in the store (:meth:`Store.judge
        <scrapy_opic._backends.store.Store.judge>`); a store that does not answer takes it
        after a flush that it answers."""
        self._unjudged[host] = verdict
        self._judge_unjudged()

    def _judge_unjudged(self) -> None:
        with contextlib.suppress(*self.store.unanswered):
            for host in list(self._unjudged):
                self.store.judge(host, self._unjudged[host])
                del self._unjudged[host]

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """The verdicts on hosts' validators kept in the store (none while it does not
        answer), with this process's own not yet taken."""
        got: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(*self.store.unanswered):
            got = self.store.verdicts()
        return {**got, **self._unjudged}

    def _writes(
        self, now: float, light: bool = False
    ) -> tuple[list[Write], dict[int, int], dict[int, str]]:
        """The members' writes (of those with anything new; ``light``: with new records), the
        records each makes durable (every record made so far), and the leases due renewal of
        the others."""
        writes = [
            w
            for k, h in self.held.items()
            if (not light or h.member.journal or h.unwritten)
            and (w := h.write(k, self.store.journaled, self._committing, self._kept(k), now))
        ]
        marks = {w.k: self.held[w.k].member.records for w in writes}
        renew = {k: h.token for k, h in self.held.items() if k not in marks and now >= h.renew_at}
        return writes, marks, renew

    def _keeps_series(self, k: int) -> bool:
        """Whether member ``k`` carries what the crawl keeps (its time series: the pool; with
        one partition, the partition, which keeps the discovery debt too)."""
        return k == POOL or (k == 0 and self.fleet.P == 1)

    def _kept(self, k: int) -> dict[str, Any] | None:
        """What member ``k`` carries of the crawl (see :meth:`_keeps_series`), if any."""
        if not self._keeps_series(k):
            return None
        return {"series": self.series.as_list(), "discovery_debt": self.fleet.discovery_debt}

    def _take(
        self,
        writes: list[Write],
        marks: dict[int, int],
        renew: dict[int, str],
        got: Flushed,
        now: float,
    ) -> None:
        """Take in what a flush did."""
        lost: list[int] = []
        for w in writes:
            held = self.held.get(w.k)
            outcome = got.written.get(w.k, Outcome(FAILED))
            if held is not None and not held.written(
                w, marks[w.k], outcome, self.lease_seconds, now
            ):
                lost.append(w.k)
        for k in renew:
            renewed = got.written.get(k)
            if renewed is not None and renewed.status == LOST:
                lost.append(k)
            else:  # (still held: nothing since the flush lost a member)
                self.held[k].renewed(now, self.lease_seconds)
        if lost and self.store.atomic:
            # What this process applied at once may have come from a member it lost: it owns
            # nothing any more.
            lost = list(self.held)
            self._resend = []
        else:
            self._resend.extend(got.unsent)
        # (Notes go again, even from a member lost: each says what this process did.)
        self.fleet.notes[:0] = got.unsent_notes
        self._received(got, lost)
        if lost:
            logger.warning(
                "OPIC: this process lost %d partitions of the crawl (their leases lapsed: it "
                "did not renew them within OPIC_REDIS_LEASE=%gs, stalled or starved of CPU?); "
                "other processes take them over, and its requests for their pages are not sent",
                len(set(lost) - {POOL}),
                self.lease_seconds,
            )
        for k in dict.fromkeys(lost):
            self._lose(k, release=self.store.atomic)
        self._resend.sort(key=lambda m: (m.dst, m.src, m.seq))
        self.fleet.durable_now()

    def _received(self, got: Flushed, lost: list[int]) -> None:
        """The messages a flush delivered confirmed to their senders, the inbox entries it read
        delivered to the members not ``lost``."""
        for m in got.delivered:
            src = self.fleet.member(m.src)
            if src is not None:
                src.confirm(m.dst, m.seq)
        for k, entries in got.inbox.items():
            held = self.held.get(k)
            if held is not None and k not in lost:
                held.read_inbox(entries, self.fleet)

    def _claim_destinations(self) -> None:
        """Alone in the crawl, every partition is this process's: those its messages and
        notes go to are claimed (before they are taken: a claim can fail)."""
        if len(self._live) > 1 or self.fleet.P == 1:
            return
        dsts = self.fleet.destinations() | {m.dst for m in self._resend}
        for dst in sorted(dsts - set(self.held)):
            self._claim(dst)

    def _in_motion(self) -> bool:
        """Messages or notes of this process on their way, or not known delivered."""
        return bool(self._resend) or self.fleet.in_motion()

    def _busy(self) -> bool:
        """Anything of this process to write: messages or notes in motion, or a member's
        records, journal or inbox entries applied."""
        held = self.held.values()
        return self._in_motion() or any(h.unwritten or h.member.journal or h.consumed for h in held)

    def _series_point(self, last: bool = False) -> None:
        """A point of the crawl's time series, every ``commit_seconds`` or when the visits
        doubled, by the process that keeps it (see :meth:`_keeps_series`), from what it
        knows of the crawl (the pool's last reports, or its one partition)."""
        keeper = POOL if self.fleet.P > 1 else 0
        if keeper not in self.held:
            return
        f = self.fleet.known_figures()
        now = time.monotonic()
        visits = int(f["visits"])
        if not last and now < self._next_point and visits < 2 * self._point_visits:
            return
        if self.series.points and self.series.points[-1][1] == visits and not last:
            return
        self._next_point = now + self._commit_seconds
        self._point_visits = max(10, visits)
        G = f["G"]
        self.series.add(
            force=last,
            elapsed=self._elapsed_before + now - self._started,
            visits=visits,
            G=G,
            error_factor=1.0 / G if G > 0 else 0.0,
            pages=f["pages"],
            fetched=f["fetched"],
            pending=f["pending"],
            virtual_cash=f["virtual_cash"],
        )

    # -- the fleet ------------------------------------------------------------------------------
    def _rebalance(self) -> None:
        """Beat, read the fleet, and claim or release partitions to own this process's share."""
        view = self.store.beat()
        self._live = view.workers
        self._share_out(view.parts, view.workers, view.owners)
        if self.fleet.P > 1:
            if view.workers[-1] == self.store.worker:
                if POOL not in self.held and view.owners.get(POOL) not in view.workers:
                    self._claim(POOL)
            elif POOL in self.held:
                self.held[POOL].leaving = True  # (to the last process, which takes it)
                self._leaving.add(POOL)
        self._hand_over()

    def _share_out(self, data: list[int], alive: list[str], owner: dict[int, str]) -> None:
        """Claim partitions ``data`` that no live process owns, up to this process's share,
        or mark some of its own leaving if it holds more while another holds too few. The
        partitions in use are shared out evenly (the first processes in the order of their
        names take one more)."""
        mine = sorted(self.held.keys() - {POOL}, reverse=True)
        low, extra = divmod(len(data), len(alive))
        share = low + int(alive.index(self.store.worker) < extra)
        if len(mine) < share:
            for k in data:
                if len(mine) >= share:
                    break
                if k not in self.held and owner.get(k) not in alive and self._claim(k):
                    mine.append(k)
        elif len(mine) > share and _underfed(data, alive, owner, self.store.worker):
            for k in mine[: len(mine) - share]:
                self.held[k].leaving = True
                self._leaving.add(k)

    def _end_doubts(self, now: float) -> None:
        """The pages in doubt of the partitions claimed :data:`DOUBT_LEASES` leases ago or more
        are pending again: the process that sent their requests had its time to tell."""
        due = [
            k
            for k, held in self.held.items()
            if now >= held.claimed_at + DOUBT_LEASES * self.lease_seconds
            and (part := self.fleet.parts.get(k)) is not None
            and part.doubt
        ]
        if due and (n := self.fleet.end_doubts(due)):
            logger.info(
                "OPIC: %d pages whose requests a process sent before it lost their partitions "
                "got no outcome from it in %gs: they are fetched again",
                n,
                DOUBT_LEASES * self.lease_seconds,
            )

    def _hand_over(self) -> None:
        """Release the members marked leaving whose pages are all back and whose hosts have
        been quiet for :attr:`quiet` seconds: checkpointed first."""
        now = time.monotonic()
        ready = []
        for k, held in self.held.items():
            part = self.fleet.parts.get(k)
            if not held.leaving or (part is not None and part.frontier.counts[IN_FLIGHT]):
                continue
            if now - held.last_active >= self.quiet:
                ready.append(k)
        if not ready:
            return
        self.commit()
        for k in ready:
            going = self.held.get(k)
            if going is not None:
                self.store.release(k, going.token)
                self._lose(k)

    # -- figures -------------------------------------------------------------------------------
    def crawl_figures(self, fresh: bool = False) -> dict[str, float]:
        """The crawl's figures: those of the members this process owns, now, and the others'
        as they last wrote them, with the messages in every inbox (read at most once a second,
        unless ``fresh``)."""
        now = time.monotonic()
        stale = self.patience.waiting and self._global is not None
        if not stale and (fresh or self._global is None or now - self._global_at >= 1.0):
            with self.patience.answered():
                self._global = self.store.figures(skip=set(self.held))
                self._global_at = now
            if self._global is None:  # (no answer, nothing read before)
                self._global = {**dict.fromkeys(FIGURES, 0), "messages": 0, "workers": 1}
                self._global.update(partitions=0, others=0)
        out = {**dict.fromkeys(FIGURES, 0), **(self._global or {})}
        self.fleet.add_figures(out)
        out["unconfirmed"] -= self.fleet.applied_here()  # (their confirmation is to come)
        out["owned"] = len(self.fleet.parts)
        return finish_figures(out)

    def has_pending(self) -> bool:
        if self.fleet.has_pending() or self._resend:
            return True
        if any(h.unwritten for h in self.held.values()):
            return True
        if self.patience.waiting:
            return True  # (waiting for the store: the crawl is not over)
        if not self.store.shared:
            return False
        with self.patience.answered():
            return self._has_pending()
        return True  # (no answer: the crawl is not over)

    def _has_pending(self) -> bool:
        f = self.crawl_figures()
        if any(f[x] for x in _WORK) and time.monotonic() - self._global_at < 0.5:
            return True  # (busy half a second ago)
        f = self.crawl_figures(fresh=True)
        if any(f[x] for x in _WORK):
            return True
        if not f["others"]:  # (every member is this process's: nothing moves unseen)
            return False
        # Idle at one look. A message may have gone from a member not read yet to one read
        # already while the look read them one after the other; but every write of a member
        # counts a record: a second look that finds the same records finds the crawl still.
        again = self.crawl_figures(fresh=True)
        return (again["records"], again["pages"]) != (f["records"], f["pages"])

    def figures(self) -> dict[str, float]:
        """The crawl's figures (the process's own, with a store of one process)."""
        self.quiesce()
        if not self.store.shared:
            out = self.fleet.figures()
            out.update(self.store.figures(skip=()))
            return out
        return self.crawl_figures()

    def quiesce(self) -> None:
        """For a process alone in its crawl: its reports made, the pool's payouts, every
        message between its members applied (a store that does not write atomically: by
        flushes), so that its figures are as they are now. (With other processes the crawl is
        never still: figures are as each process last wrote them.)"""
        if len(self._live) > 1:
            return
        if self.store.atomic:
            self._claim_destinations()
            self.fleet.reports()
            return
        for _ in range(4):
            if len(self._live) > 1 or not self._in_motion():
                return
            self.flush(reports=True)

    def commit(self, wait: bool = True) -> None:
        """Make what this process did durable now: its records written and its messages sent
        (readers of the crawl see them)."""
        self._series_point()
        self._committing = True
        try:
            self.flush(reports=True, wait=wait)
        finally:
            self._committing = False
        self._due_since = None
        self._last_commit = time.monotonic()
        visits = sum(p.frontier.engine.visit_count for p in self.fleet.parts.values())
        self._next_commit = visits + min(self._commit_visits, max(1, visits))
        if not self.store.journaled:
            return
        for _ in range(10):
            if not self._busy():
                return
            self.flush(wait=wait)

    def status_of(self, key: Hashable) -> str | None:
        self.quiesce()
        return self.fleet.status_of(key)

    def cash_of(self, key: Hashable) -> float | None:
        self.quiesce()
        return self.fleet.cash_of(key)

    def total_cash(self) -> float:
        """The whole crawl's cash (O(pages)): this process's, or, with a shared store, the
        crawl read back from the store after a flush."""
        if not self.store.shared:
            return self.fleet.total_cash()
        self.flush(reports=True)
        self.flush()
        return self.store.snapshot().total_cash()

    def top_page(self) -> tuple[str, float] | None:
        return self.fleet.top_page()

    # -- closing ----------------------------------------------------------------------------
    def close(self, leases: Collection[Lease]) -> None:
        """Hand ``leases`` back, checkpoint every member and release them all
        (:class:`StoreError` if the store does not answer: what was not written is then lost,
        and redone by the processes that take the partitions over)."""
        try:
            self.release(leases)
            for k, held in self.held.items():
                held.leaving = True
                self._leaving.add(k)
            self._series_point(last=True)
            self.commit(wait=True)
            for k, held in list(self.held.items()):
                if not held.unwritten:
                    self.store.release(k, held.token)
                self._lose(k)
        except self.store.unanswered as exc:
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise StoreError(
                f"{masked_url(self.location or 'the store')} does not answer ({why}): this "
                "process's last records are lost, its pages are fetched again by the processes "
                "that take its partitions over"
            ) from None
        finally:
            self.store.close()


def _waiting_cash(fleet: Fleet) -> float:
    """Cash that the process of ``fleet`` holds back from the crawl's pages: in messages not
    sent, in its partitions' virtual pages, in the pool."""
    total = 0.0
    for part in fleet.parts.values():
        e = part.frontier.engine
        total += e.virtual_cash + e.pool_all + e.pool_unfetched
    for member in fleet.members():
        total += in_transit(m for m, _ in member.outbox)
    if fleet.pool is not None:
        total += fleet.pool.total_cash()
    return total


def _underfed(data: list[int], alive: list[str], owner: dict[int, str], worker: str) -> bool:
    """Whether a live process other than ``worker`` owns fewer of the partitions ``data`` than
    its even share (rounded down)."""
    counts = Counter(owner[k] for k in data if owner.get(k) in alive)
    low = len(data) // len(alive)
    return any(counts[w] < low for w in alive if w != worker)


def _bytes_only(payload: Any, url: str | None) -> bytes | None:
    return payload if isinstance(payload, bytes) else None
