"""``OpicScheduler``: the Scrapy scheduler that fetches the page with the most cash first.

It holds every Scrapy rule of scrapy-opic once, over the crawl's
:class:`~scrapy_opic._backends.crawl.Crawl` (the :class:`~scrapy_opic.opic.frontier.Frontier`
contract), whatever ``OPIC_STORE`` keeps it in (:mod:`scrapy_opic._state`). Its contract with
Scrapy's engine (see ``scrapy.core.scheduler.BaseScheduler``):

* ``enqueue_request(request)`` files the request under its page, keyed by
  ``crawler.request_fingerprinter.fingerprint(request)``. It returns ``False`` (Scrapy then fires
  ``request_dropped``) for a duplicate: a page already pending or in flight, or already visited
  in a one-pass crawl. The links that led to it have paid it cash all the same (the spider
  middleware did that): the dupefilter never drops money. As with Scrapy, ``dont_filter=True``
  fetches a known page again (start requests excepted: a resume does not refetch its seeds).
  Scrapy's default ``RFPDupeFilter`` is the frontier itself (it knows every fingerprint); any
  other ``DUPEFILTER_CLASS`` is built and asked as Scrapy's scheduler would, and a page it
  refuses gives its cash to the virtual page.
* ``next_request()`` pops the best page among the download slots that have room (see
  :mod:`scrapy_opic._leases`), or returns ``None`` when every slot with pending pages is full;
  the engine asks again when a download finishes. The request carries ``meta["opic_id"]`` (its
  page) and ``meta["opic_lease"]`` (the lease it was handed out under), so that its response,
  retries and redirects find their page again, and an
  :class:`~scrapy_opic._requests.OutcomeErrback` around its errback, so that a failure no
  middleware sees still settles the page.
* A request whose meta names a lease this scheduler holds is a *retry* (same fingerprint:
  nothing moves) or a *redirect* (another fingerprint: the page's cash moves to the target).
* ``has_pending_requests()`` is true while pages wait (with Redis: or are in flight in any
  process of the crawl). In a continuous crawl visited pages wait again at once, so the spider
  stays open until something else closes it (``CLOSESPIDER_PAGECOUNT``...).
* ``close()`` hands the pages still in flight back to the crawl and makes everything durable.

The middlewares report each page's outcome through :meth:`OpicScheduler.settle_visit`,
:meth:`~OpicScheduler.settle_unchanged`, :meth:`~OpicScheduler.settle_callback_error` and
:meth:`~OpicScheduler.settle_failure`. A visit pays its links; each is filed when its request
reaches ``enqueue_request``, so that a request dropped on its way there (by a middleware below
ours, a ``request_scheduled`` handler, the project's dupefilter) is never fetched.

``request.priority`` still matters: pages are served by priority first (higher first, as with
Scrapy's own scheduler) and by cash within a priority. With the default priority 0 for every
request, cash alone orders the crawl.

Requests are stored (JOBDIR) and shared (Redis) as their ``Request.to_dict()``, compactly
(:func:`~scrapy_opic._requests.encode_request`). A request that cannot be serialized (a lambda
callback, a lock in its meta) is kept in memory with one warning, as Scrapy does: it does not
survive a restart, and with Redis this process fetches it itself, outside the OPIC order.

Stats: the per-request counters (``opic/*``, ``scheduler/enqueued``, ``scheduler/dequeued``,
``dupefilter/filtered``) are added to Scrapy's stats collector periodically and at close, with
the crawl's figures (``opic/crawl/*`` for a crawl shared by several processes).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import RFPDupeFilter
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.reactor import CallLaterOnce
from twisted.internet import defer, task

from ._backends import CrawlGone, StoreError, masked_url
from ._backends.crawl import Crawl
from ._errors import raise_in_one_line, stop_crawl
from ._leases import Leases, quiet_seconds, slot_room
from ._requests import (
    SEEN_META,
    OutcomeErrback,
    RequestCodec,
    SlotKeys,
    detach,
    outcome_of,
    page_url,
    refused_weight,
    with_validators,
)
from ._seeds import SeedIntake
from ._sending import warn_unguarded
from ._settings import OpicSettings, OpicSettingsError
from ._state import open_frontier
from ._stats import CrawlStats, log_opening
from .opic.constants import (
    DUPLICATE,
    ERROR,
    FORWARDED,
    IGNORED,
    LOCAL,
    LOST,
    NEEDS_PAYLOAD,
    SCHEDULED,
    SPIDER_ERROR,
)
from .opic.contract import Entry, Lease, Link

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Seconds between two scans of every page for the top page of the stats and the log line.
TOP_PAGE_SECONDS = 30.0

#: The OPIC scheduler of each running crawler (the middlewares' and the extension's way in).
_RUNNING: weakref.WeakKeyDictionary[Any, OpicScheduler] = weakref.WeakKeyDictionary()


#: The scheduler that :func:`prepare` built for each crawler, its frontier open.
_PREPARED: weakref.WeakKeyDictionary[Any, OpicScheduler] = weakref.WeakKeyDictionary()


def prepare(crawler: Crawler) -> OpicSettings:
    """Read and check the crawl's ``OPIC_*`` settings and, if its ``SCHEDULER`` is an
    :class:`OpicScheduler`, build it and open its frontier (state file or Redis), once per
    crawler. Every OPIC component calls this from its ``from_crawler``; the first to run (the
    extension, or the downloader middleware) does it while Scrapy builds the crawl, before the
    engine exists and before any request. A bad value, a damaged, foreign or busy state, an
    unreachable Redis server: the crawl fails to start with one error line (see
    :mod:`scrapy_opic._errors`), and nothing was written."""
    try:
        settings = OpicSettings.from_crawler(crawler)
    except OpicSettingsError as exc:
        raise_in_one_line(exc)
    spider = getattr(crawler, "spider", None)
    if spider is None or crawler in _PREPARED or crawler in _RUNNING:
        return settings
    cls = load_object(crawler.settings["SCHEDULER"])
    # (Not issubclass: Scrapy's BaseScheduler answers it by duck typing, any scheduler passes.)
    if not (isinstance(cls, type) and OpicScheduler in cls.__mro__):
        return settings
    scheduler = cast("type[OpicScheduler]", cls)._build(crawler, settings)
    try:
        scheduler._open_frontier(spider)
    except StoreError as exc:
        if scheduler.df is not None:
            scheduler.df.close("opic_failed")
        raise_in_one_line(exc)
    _PREPARED[crawler] = scheduler
    return settings


#: Scrapy's own commands that run a spider but are not crawls: they read and write no OPIC
#: state (its file, its JOBDIR, its Redis crawl), so that ``scrapy parse URL`` does not
#: replace the last crawl's state, nor ``scrapy fetch`` create one. (``crawl``, ``runspider``,
#: a project's own commands and scripts keep the state as the settings say.)
STATELESS_COMMANDS = frozenset(("parse", "fetch", "shell", "view", "check", "bench"))


def scrapy_command() -> str | None:
    """The name of the command Scrapy's command line runs in this process (``scrapy parse
    ...``: ``"parse"``), or ``None`` if Scrapy's command line did not start it (a script with
    ``CrawlerProcess``, a test). Read from the main thread's stack, where
    ``scrapy.cmdline.execute`` runs the command (``scrapy shell`` crawls in another thread):
    the command name is not in ``sys.argv`` any more, and not in the settings."""
    main = threading.main_thread().ident
    frame = sys._current_frames().get(main) if main is not None else None
    while frame is not None:
        if frame.f_code.co_name == "execute" and frame.f_globals.get("__name__") == (
            "scrapy.cmdline"
        ):
            name = frame.f_locals.get("cmdname")
            return name if isinstance(name, str) else None
        frame = frame.f_back
    return None


#: Seconds a request of a Redis crawl about to go out waits, at most, for the write of its
#: lease's record (see ``until_durable``): one write for the requests of that time, as the
#: store's round trips and CPU per page want, at that much latency.
LEASE_WRITE_WAIT = 0.05


def _guarded(default: Any = None) -> Callable:
    """An entry point of the scheduler (Scrapy's engine, the middlewares and the extension call
    it) that never raises a failure of the frontier's store into Scrapy: a
    :class:`~scrapy_opic._backends.StoreError` (a write the disk refused, a writer thread that
    died) stops the crawl (:meth:`OpicScheduler._stop`) and the call answers ``default``, as
    every later call does. Raised into Scrapy, it would be logged with a traceback at each
    call while the engine went on asking, the crawl hung at 0 pages/min."""

    def wrap(method: Callable) -> Callable:
        @functools.wraps(method)
        def guarded(self: OpicScheduler, *args: Any, **kwargs: Any) -> Any:
            if self._failed is not None:
                return default
            try:
                return method(self, *args, **kwargs)
            except StoreError as exc:
                self._stop(exc)
                return default

        return guarded

    return wrap


def _again(request: Request) -> bool:
    """``dont_filter``: fetch even a known page, as Scrapy does. Not for start requests (Scrapy
    marks start_urls dont_filter): a resumed crawl must not fetch its seeds again."""
    return bool(request.dont_filter and not request.meta.get("is_start_request"))


class PaidLinks:
    """The code of each request a visit paid, until it reaches ``enqueue_request``, and how
    many of them still need filing. Held by weak references: a request dropped on its way (a
    ``request_scheduled`` handler, a spider middleware below the add-on's) is collected and
    leaves by itself. (One dict of references with callbacks: a ``WeakKeyDictionary`` and a
    ``WeakSet`` cost two Python-level calls and two references per link.)"""

    __slots__ = ("codes", "unfiled", "_gone", "__weakref__")

    def __init__(self) -> None:
        self.codes: dict[weakref.ref, int] = {}
        self.unfiled = 0
        me = weakref.ref(self)

        def gone(r: weakref.ref) -> None:
            paid = me()
            if paid is not None and paid.codes.pop(r, None) == NEEDS_PAYLOAD:
                paid.unfiled -= 1

        self._gone = gone

    def add(self, request: Request, code: int) -> None:
        r = weakref.ref(request, self._gone)
        if self.codes.get(r) == NEEDS_PAYLOAD:  # (the same request paid twice)
            self.unfiled -= 1
        self.codes[r] = code
        if code == NEEDS_PAYLOAD:
            self.unfiled += 1

    def pop(self, request: Request) -> int | None:
        code = self.codes.pop(weakref.ref(request), None)
        if code == NEEDS_PAYLOAD:
            self.unfiled -= 1
        return code


class OpicScheduler(BaseScheduler):
    """Greedy OPIC scheduling with politeness over a crawl's frontier (see the module
    docstring)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self.stats = crawler.stats
        self.fingerprinter = crawler.request_fingerprinter
        self.spider: Spider | None = None
        self._frontier: Crawl | None = None
        self.report = CrawlStats(crawler.stats)
        #: Counters of the per-request path (the report's), added to Scrapy's stats now and then.
        self.counts = self.report.counts
        self.codec = RequestCodec(None, self.counts, self._key, settings.store == "redis")
        self.df: Any = None  # a project's DUPEFILTER_CLASS, when it is not Scrapy's default
        self._extra: deque[Request] = deque()  # fetched outside the frontier (dont_filter...)
        self.leases = Leases(slot_room(crawler))
        #: The code of each request whose page a visit paid (it files the page when it comes).
        self._paid = PaidLinks()
        self._tick: task.LoopingCall | None = None
        self._slot_of: SlotKeys | None = None
        #: A pop found nothing while pages were pending elsewhere (see _nudge); the request
        #: handed to the engine to make it ask again, until it comes back here.
        self._starved = False
        self._nudged: Request | None = None
        self._ready: deque[Request] = deque()  # popped and prepared, to hand out first
        self._claimed = False  # a prepared scheduler handed to Scrapy's engine
        self._failed: str | None = None  # why the crawl's store failed (see _stop)
        self._closing = False
        #: Requests waiting to go out until the records of their leases are durable (see
        #: until_durable), with what tells their handlers.
        self._unsent: list[tuple[Lease, defer.Deferred]] = []
        self._flush_soon = CallLaterOnce(self._flush_for_unsent)
        self.seeds = SeedIntake(self)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicScheduler:
        """The scheduler of ``crawler``: the one :func:`prepare` built (its crawl already
        open) if any, else a new one."""
        settings = prepare(crawler)
        prepared = _PREPARED.get(crawler)
        if prepared is not None and type(prepared) is cls and not prepared._claimed:
            prepared._claimed = True
            return prepared
        return cls._build(crawler, settings)

    @classmethod
    def _build(cls, crawler: Crawler, settings: OpicSettings) -> OpicScheduler:
        scheduler = cls(crawler, settings)
        cs = crawler.settings
        # Scrapy's own RFPDupeFilter filters by fingerprint, which the frontier already does
        # (without a second set of fingerprints, or a requests.seen file). Any other
        # DUPEFILTER_CLASS is built and asked, as Scrapy's scheduler would.
        dupefilter_cls = load_object(cs["DUPEFILTER_CLASS"])
        if dupefilter_cls is not RFPDupeFilter:
            scheduler.df = build_from_crawler(dupefilter_cls, crawler)
        scheduler.report.debug = cs.getbool("DUPEFILTER_DEBUG")
        return scheduler

    @staticmethod
    def of(crawler: Crawler) -> OpicScheduler | None:
        """The OPIC scheduler running for ``crawler``, if any."""
        return _RUNNING.get(crawler)

    # -- lifecycle -------------------------------------------------------------------------
    def _open_frontier(self, spider: Spider) -> None:
        self.spider = self.codec.spider = spider
        meta = {"spider": spider.name, "settings": self.settings.as_dict()}
        command = scrapy_command()
        in_memory = command in STATELESS_COMMANDS
        encode = self.codec.encode
        self._frontier = open_frontier(self.settings, spider.name, encode, meta, in_memory)
        paid = self._paid  # (not self: no cycle through the crawl)
        self._frontier.ready = lambda: not paid.unfiled  # (writes wait for the links visits paid)
        if in_memory:
            logger.info(
                "OPIC: `scrapy %s` reads and writes no OPIC state (crawl and runspider do): its "
                "crawl is in memory",
                command,
            )

    def open(self, spider: Spider) -> Any:
        if self._frontier is None:  # (else prepare() opened it before Scrapy's engine existed)
            self._open_frontier(spider)
        s = self.settings
        # Where Scrapy's stats say a request waits: memory, disk (JOBDIR) or redis.
        self.report.where = "redis" if self.frontier.shared else "disk" if s.jobdir else "memory"
        _RUNNING[self.crawler] = self
        self.crawler.signals.connect(self.leases.downloaded, signal=signals.request_left_downloader)
        self._tick = task.LoopingCall(self._maintain)
        self._tick.start(self.frontier.maintain_interval, now=False)
        log_opening(s, masked_url(self.frontier.location or "in memory"))
        self.seeds.start()
        if self.frontier.shared:
            warn_unguarded(self.crawler.settings)
        return self.df.open() if self.df is not None else None

    def _stop(self, exc: StoreError) -> None:
        """The crawl's store failed for good (a full disk, an I/O error): one error line, and
        the spider closes; the state stays that of its last commit, if any is left (``scrapy
        crawl`` exits with 1)."""
        if self._failed is None:
            self._failed = str(exc)
            self._wake_unsent()  # (none goes out: Scrapy's engine waits for them to close)
            kept = not isinstance(exc, CrawlGone)
            stop_crawl(self.crawler, exc, bool(self.settings.jobdir), self._closing, kept)

    @property
    def failed(self) -> bool:
        """Whether the crawl's store failed for good (the crawl is stopping)."""
        return self._failed is not None

    def stop_on(self, exc: StoreError) -> None:
        """The crawl's store failed for good: see :meth:`_stop`."""
        self._stop(exc)

    @property
    def frontier(self) -> Crawl:
        """The crawl's frontier, once :meth:`open` (or :func:`prepare`) opened it."""
        if self._frontier is None:
            raise RuntimeError("the OPIC scheduler's frontier is not open yet")
        return self._frontier

    def close(self, reason: str) -> Any:
        self._closing = True
        if self._tick is not None and self._tick.running:
            self._tick.stop()
        self._wake_unsent()
        self.seeds.stop()
        frontier = self._frontier
        if frontier is None:  # open() failed: nothing was opened but the dupefilter, maybe
            _RUNNING.pop(self.crawler, None)
            return self.df.close(reason) if self.df is not None else None
        try:
            try:
                self._hand_back(reason)  # (guarded: not after a store failure; one stops the crawl)
            finally:
                try:
                    frontier.close([])  # the last checkpoint (none after a failure)
                except StoreError as exc:
                    self._stop(exc)
        finally:
            _RUNNING.pop(self.crawler, None)
            try:
                if self._failed is None and self.settings.export and frontier.location:
                    self._export(frontier.location)
            finally:
                closed = self.df.close(reason) if self.df is not None else None
        return closed

    def _export(self, location: str) -> None:
        from .export import export_at_close

        name = self.spider.name if self.spider else ""
        if not export_at_close(self.settings.export, location, name):
            self.stats.inc_value("opic/export_failed")

    @_guarded()
    def _hand_back(self, reason: str) -> None:
        """At close: the pages in flight go back, cash intact (a closing engine drops the
        requests it had not sent); the final stats and their log line."""
        frontier = self.frontier
        leases = self.leases.clear()
        if leases and frontier.release(leases):
            logger.info("OPIC: %d pages in flight handed back", len(leases))
        f = self.report.update(frontier, closing=True)
        logger.info(
            "OPIC scheduler closed (%s): %s%d pages known, %d fetched, %d visits, %d pending%s",
            reason,
            "the crawl has " if frontier.shared else "",
            f["pages"],
            f.get("fetched", 0),
            f.get("visits", 0),
            f["pending"],
            f"; this process made {frontier.round_trips} round trips"
            if frontier.shared
            else f"; total cash {self.stats.get_value('opic/total_cash'):.12f}",
        )

    def _maintain(self) -> None:
        """The crawl's upkeep (leases, writes) and the stats, every ``maintain_interval``
        seconds; an error other than the store's is logged and retried at the next tick."""
        self.leases.forget_limits()
        if self._failed is not None:
            return
        try:
            self._settle_lost()
            self.frontier.quiet = quiet_seconds(self.crawler)
            self.frontier.maintain(list(self.leases))
            if self._unsent:  # (a flush for them found the links of a visit on their way)
                self._flush_for_unsent()
            if self._starved and len(self.frontier):
                self._nudge()
            self.report.update(self.frontier)
        except StoreError as exc:  # the store failed for good: the crawl stops
            self._stop(exc)
        except Exception:
            logger.exception("OPIC: periodic upkeep of the frontier failed (will retry)")

    # -- requests ---------------------------------------------------------------------------
    def _key(self, request: Request) -> bytes:
        return self.fingerprinter.fingerprint(request)

    def _entry(self, request: Request) -> Entry:
        priority = request.meta.get("opic_priority", request.priority)
        if self._slot_of is None:  # (Scrapy's engine and downloader exist by the first one)
            self._slot_of = SlotKeys(self.crawler.engine.downloader)
        slot = self._slot_of(request)
        seed = bool(request.meta.get("is_start_request"))
        payload = self.codec.pack(request)
        return Entry(self._key(request), page_url(request), priority, slot, payload, seed)

    def _payload(self, later: Request | None) -> Any:
        """What the frontier keeps to fetch a page with next (``None``: what it kept)."""
        return None if later is None else self.codec.pack(later)

    def _settle_lost(self) -> None:
        """Give up (outcome ``lost``, cash to the virtual page) the pages whose request was freed
        in Scrapy's engine with no outcome (a downloader middleware that answers with a new
        ``Request`` drops the one it was given): else in flight for good, the crawl could
        never end."""
        lost = self.leases.lost()
        for lease in lost:
            if self.frontier.forfeit(lease, LOST):
                self.counts["opic/lost"] += 1
        if lost:
            logger.warning(
                "OPIC: %d requests handed out vanished in Scrapy's engine with no outcome (a "
                "middleware dropped them?): their pages are closed as lost",
                len(lost),
            )

    # -- the scheduler interface -----------------------------------------------------------
    @_guarded(False)
    def has_pending_requests(self) -> bool:
        # (Scrapy's engine asks only when its downloader and scraper are idle: a request handed
        # out and not freed by now is held by something else, or was dropped; see _settle_lost.)
        if len(self.leases):
            self._settle_lost()
        return bool(self._extra) or self.frontier.has_pending()

    @_guarded(0)
    def __len__(self) -> int:
        return len(self._extra) + len(self.frontier)

    @_guarded(False)
    def enqueue_request(self, request: Request) -> bool:
        if request is self._nudged:
            self._nudged = None
            self._ready.append(request)
            return True
        # A link a visit paid has its code, and settle_visit detached it: neither a follow-up
        # nor a lease to take out (the common case, so asked first).
        code = self._paid.pop(request) if self._paid.codes else None
        if code is None:
            lease = self.leases.of(request)  # a retry or redirect of a page in flight here?
            detach(request)
            if lease is not None:
                return self._follow_up(request, lease)
        return self._file(request, code)

    def _file(self, request: Request, code: int | None) -> bool:
        """File a request of a page not in flight here (``code``: what the visit that paid it
        found, if one did); whether it is to be fetched."""
        again = _again(request)
        if code is None or code == NEEDS_PAYLOAD:  # not a known duplicate: filed now
            code = self.frontier.schedule([self._entry(request)], again=again)[0]
        if code in (SCHEDULED, FORWARDED):
            # The project's own dupefilter, if any, may refuse it (never a dont_filter one):
            # never to be fetched, its cash goes to the virtual page.
            if self.df is not None and not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.spider)
                self.counts["opic/filtered"] += 1
                self.frontier.drop(self._key(request), url=page_url(request))
                return False
            self.counts["opic/enqueued"] += 1
            self.report.enqueued(self.codec.waits_in(request))
            return True
        if code == LOCAL or (again and code == DUPLICATE):
            # Its page is pending or in flight (dont_filter: Scrapy would fetch it once more
            # all the same), or it cannot be shared: fetched here, outside the frontier; such a
            # fetch pays nothing (the page's cash goes with its own fetch).
            self._extra.append(request)
            self.counts["opic/extra_fetches"] += 1
            self.report.enqueued("memory")
            return True
        self.report.duplicate(request, self.spider)
        return False

    def _follow_up(self, request: Request, lease: Lease) -> bool:
        """A retry (same fingerprint) or a redirect (another one) of a page leased here. It
        waits at the priority its page's request had: a priority adjustment (retry -1, redirect
        +2) is for the one request, which keeps it, not for the page's tier (a retried page
        starved below every refetch, a redirect target refetched ahead of all)."""
        if self.leases.keep_base(request, lease.key):
            self.counts["opic/priority_adjustments_ignored"] += 1
        entry = self._entry(request)
        self.leases.end(lease.key)
        if entry.key == lease.key:
            code = self.frontier.retry(lease, entry)
            if code == SCHEDULED:
                self.counts["opic/retried"] += 1
        else:
            # Scrapy's RedirectMiddleware gives each hop's reason: its HTTP status, or "meta
            # refresh". 301 and 308 say the page moved for good: an alias of the target.
            reasons = request.meta.get("redirect_reasons") or [None]
            code = self.frontier.redirect(lease, entry, permanent=reasons[-1] in (301, 308))
            if code is not None:
                self.counts["opic/redirected"] += 1
        if code in (SCHEDULED, FORWARDED):
            self.report.enqueued(self.codec.waits_in(request))
            return True
        if code == LOCAL:
            self._extra.append(request)
            self.report.enqueued("memory")
            return True
        return False  # a stale lease, or a redirect to a page already known

    @_guarded(None)
    def next_request(self) -> Request | None:
        if self._extra:
            self.report.dequeued("memory")
            return self._extra.popleft()
        if self._ready:
            return self._ready.popleft()
        request = self._pop()
        self._starved = request is None
        if request is not None:
            self.seeds.busy()
        return request

    def _pop(self) -> Request | None:
        """The best page's request, its lease held here (see the module docstring)."""
        for _attempt in range(10):
            lease = self.frontier.pop(self.leases.full)
            if lease is None:
                return None
            request = self.codec.decode(lease.payload, lease.url, self.frontier.continuous)
            if request is None:
                self.frontier.forfeit(lease, ERROR)
                self.counts["opic/undecodable"] += 1
                continue
            self.leases.hand_out(lease, request, self.frontier.continuous)
            request.errback = OutcomeErrback(self, request.errback)
            self.counts["opic/popped"] += 1
            memory = self.codec.memory_only
            if memory and lease.key in memory and not self.frontier.continuous:
                memory.discard(lease.key)  # (a continuous crawl's waits in memory again)
                self.report.dequeued("memory")
            else:
                self.report.dequeued("memory" if lease.key in memory else None)
            return request
        return None

    def _nudge(self) -> None:
        """After a pop found nothing, pages that became pending with no download ending here (a
        shared crawl's messages) would wait for the engine's heartbeat (5 s): the best one goes
        to the engine's ``crawl()``, which files it back here and makes the engine ask."""
        request = self._pop()
        if request is None:
            return
        self._starved = False
        self._nudged = request
        self.crawler.engine.crawl(request)
        if self._nudged is request:  # (a request_scheduled handler dropped it)
            self._nudged = None
            if (taken := self.leases.take(request)) is not None:
                self.frontier.forfeit(taken[0], IGNORED)

    # -- outcomes (called by the middlewares) -----------------------------------------------
    @_guarded(None)
    def settle_visit(
        self,
        request: Request,
        followed: list[Request],
        weights: list[float] | None,
        refused: list[tuple[Request, float]] | None = None,
        failed: bool = False,
    ) -> float | None:
        """The visit of ``request``'s page over ``followed`` (the requests its callback yielded
        that Scrapy will follow), with ``weights`` (``None``: all 1); ``refused``: the links it
        will not follow, with their weights; ``failed``: the callback raised after yielding
        them. The page's importance after the visit if ``OPIC_ITEM_FIELD`` asks for it."""
        # The page's lease first: the callback may yield its own request object again (to
        # fetch the page once more), and detaching it takes the lease out of its meta.
        lease = self.leases.of(request)
        for o in followed:
            # A copy of the page's own request (pagination by response.request.replace), or
            # that request itself, must not pass for a retry or redirect of it, nor carry the
            # errback wrapper.
            detach(o)
        if lease is None:
            return None
        ws = [1.0] * len(followed) if weights is None else weights
        links = [Link(self._key(o), page_url(o), w, _again(o)) for o, w in zip(followed, ws)]
        virtual_weight = refused_weight(refused, self._key)
        # The lease ends here whatever the call does (a store failing now: the page goes back
        # when its lease expires).
        _lease, later = self.leases.end(lease.key)
        kw: dict[str, Any] = {"outcome": SPIDER_ERROR} if failed else {}
        seen = request.meta.get(SEEN_META)
        if seen is not None:  # (a crawl that refetches by freshness)
            later = with_validators(request, later, seen)
            kw.update(changed=seen.changed, modified=seen.modified)
        importance = bool(self.settings.item_field)
        later = self._payload(later)
        visit = self.frontier.visit(lease, links, virtual_weight, importance, later, **kw)
        if visit is None:  # the lease had expired: another process fetches the page
            self.counts["opic/stale"] += 1
            return None
        self.counts["opic/visits"] += 1
        for o, code in zip(followed, visit.codes):
            self._paid.add(o, code)
        return visit.importance

    def until_durable(self, request: Request) -> defer.Deferred | None:
        """For a request about to go out (:mod:`~scrapy_opic._handler`): None if it may go out
        now as far as the store goes, else a Deferred that fires with whether it may, once the
        record of its lease is durable (a next owner of its partition would hold the page in
        doubt, not fetch it again) or the lease is lost. The write for it comes within
        :data:`LEASE_WRITE_WAIT`."""
        lease = self.leases.of(request)
        if lease is None or self._failed:
            return None
        state = self.frontier.durable(lease)
        if state:
            return None
        waiting: defer.Deferred = defer.Deferred()
        if state is False:
            waiting.callback(False)
            return waiting
        self._unsent.append((lease, waiting))
        self._flush_soon.schedule(LEASE_WRITE_WAIT)
        return waiting

    def _flush_for_unsent(self) -> None:
        if self._failed is None and self._unsent:
            try:
                self.frontier.flush_leases()
            except StoreError as exc:
                self._stop(exc)
        self._wake_unsent()

    def _wake_unsent(self) -> None:
        """Tell the requests waiting for their lease records whether they may go out now."""
        if not self._unsent:
            return
        waiting, self._unsent = self._unsent, []
        for lease, d in waiting:
            state = False if self._failed else self.frontier.durable(lease)
            if state is None and not self._closing:
                self._unsent.append((lease, d))
            else:
                d.callback(bool(state))

    @_guarded(True)
    def may_send(self, request: Request) -> bool:
        """The last look before ``request`` goes out (:mod:`~scrapy_opic._handler`): False, its
        page handed back, if its partition may no longer be this process's (see ``Crawl``)."""
        lease = self.leases.of(request)
        if lease is None or self.frontier.may_send(lease):
            return True
        self.leases.end(lease.key)
        self.frontier.release([lease])  # (a stale lease: nothing; else the page waits again)
        self.counts["opic/unsent"] += 1
        return False

    @_guarded(None)
    def settle_unchanged(self, request: Request) -> bool:
        """``request``'s page was refetched and is unchanged (a 304, or a 200 of the signature
        of its last full response): a visit over its kept links. False if not in flight here."""
        if (taken := self.leases.take(request)) is None:
            return False
        lease, later = taken
        if (seen := request.meta.get(SEEN_META)) is not None:
            later = with_validators(request, later, seen)
        if self.frontier.unchanged(lease, self._payload(later)) is None:
            self.counts["opic/stale"] += 1
            return False
        self.counts["opic/visits"] += 1
        self.counts["opic/unchanged"] += 1
        return True

    @_guarded(None)
    def judge_validators(self, host: str, verdict: dict[str, Any]) -> None:
        """Keep the downloader middleware's verdict on ``host``'s validators with the crawl."""
        self.frontier.judge(host, verdict)

    @_guarded(0)
    def forget_lies(self, host: str, *, unchanged: bool = True, dated: bool = False) -> int:
        """``host``'s validators lied: its pages forget what the lie taught their rates (see
        :meth:`Crawl.forget_lies <scrapy_opic._backends.crawl.Crawl.forget_lies>`)."""
        return self.frontier.forget_lies(host, unchanged=unchanged, dated=dated)

    @_guarded({})
    def validator_verdicts(self) -> dict[str, dict[str, Any]]:
        """The crawl's verdicts on hosts' validators, by host."""
        return self.frontier.verdicts()

    @_guarded(None)
    def settle_callback_error(self, request: Request, exception: BaseException) -> None:
        """The callback of ``request``'s page raised before yielding anything (or Scrapy's
        HttpErrorMiddleware refused the response): a visit with no out-links, as it says."""
        if (taken := self.leases.take(request)) is not None:
            # (Whatever the callback raised, a TimeoutError included, is the spider's error.)
            outcome = exception.response.status if isinstance(exception, HttpError) else None
            outcome = SPIDER_ERROR if outcome is None else int(outcome)
            if self.frontier.fail(taken[0], outcome, self._payload(taken[1])):
                self.counts["opic/failed"] += 1

    @_guarded(None)
    def settle_failure(self, request: Request, exception: BaseException) -> None:
        """An in-flight request ended in ``exception`` (:func:`~scrapy_opic._requests.outcome_of`
        names it): an HTTP error status or a download error was a fetch with no links; any other
        ``IgnoreRequest`` (robots.txt, offsite...) fetched nothing: the page is given up."""
        if (taken := self.leases.take(request)) is None:
            return
        lease, later = taken
        outcome = outcome_of(exception)
        if isinstance(exception, IgnoreRequest) and not isinstance(exception, HttpError):
            if self.frontier.forfeit(lease, outcome):
                self.counts["opic/ignored"] += 1
        elif self.frontier.fail(lease, outcome, self._payload(later)):
            self.counts["opic/failed"] += 1

    # -- stats and logs ------------------------------------------------------------------------
    @_guarded("OPIC: stopped (its state store failed)")
    def status_line(self) -> str:
        """The periodic OPIC log line (:class:`~scrapy_opic._extensions.OpicLogStats`)."""
        return self.report.status_line(self.frontier, len(self.leases))


__all__ = ["OpicScheduler"]
