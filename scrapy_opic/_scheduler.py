"""``OpicScheduler``: the Scrapy scheduler that fetches the page with the most cash first.

It holds every Scrapy rule of scrapy-opic once, over the
:class:`~scrapy_opic.opic.frontier.Frontier` contract; ``OPIC_STORE`` picks the backend behind it
(:mod:`scrapy_opic._state`): the embedded frontier (``sqlite``) or one shared through Redis
(``redis``). Its contract with Scrapy's engine (see ``scrapy.core.scheduler.BaseScheduler``):

* ``enqueue_request(request)`` files the request under its page, keyed by
  ``crawler.request_fingerprinter.fingerprint(request)``. It returns ``False`` (Scrapy then fires
  ``request_dropped``) for a duplicate: a page already pending or in flight, or already visited
  in a one-pass crawl. The links that led to it have paid it cash all the same (the spider
  middleware did that): the dupefilter never drops money. As with Scrapy, ``dont_filter=True``
  fetches a known page again (start requests excepted: a resume does not refetch its seeds).
  Scrapy's default ``RFPDupeFilter`` is the frontier itself (it knows every fingerprint); any
  other ``DUPEFILTER_CLASS`` is built and asked as Scrapy's scheduler would, and a page it
  refuses gives its cash to the virtual page.
* ``next_request()`` pops the best page among the download slots that have room: a slot holds at
  most its concurrency, counted from pop to the end of the download (politeness per process), or
  returns ``None`` when every slot with pending pages is full; the engine asks again when a
  download finishes. The request carries ``meta["opic_id"]`` (its page) and
  ``meta["opic_lease"]`` (the lease it was handed out under), so that its response, retries and
  redirects find their page again, and an :class:`OutcomeErrback` around its errback, so that a
  failure no middleware sees still settles the page.
* A request whose meta names a lease this scheduler holds is a *retry* (same fingerprint:
  nothing moves) or a *redirect* (another fingerprint: the page's cash moves to the target).
* ``has_pending_requests()`` is true while pages wait (with Redis: or are in flight in any
  process of the crawl). In a continuous crawl visited pages wait again at once, so the spider
  stays open until something else closes it (``CLOSESPIDER_PAGECOUNT``...).
* ``close()`` hands the pages still in flight back to the frontier and makes everything durable.

The middlewares report each page's outcome through :meth:`OpicScheduler.settle_visit`,
:meth:`~OpicScheduler.settle_callback_error` and :meth:`~OpicScheduler.settle_failure`. With a
shared frontier (Redis) the visit also files the links it pays (one round trip for the visit and
all its new links), and ``enqueue_request`` then answers for those requests from the visit's
codes; an in-process frontier files a request when it reaches ``enqueue_request``.

``request.priority`` still matters: pages are served by priority first (higher first, as with
Scrapy's own scheduler) and by cash within a priority. With the default priority 0 for every
request, cash alone orders the crawl.

Requests are stored (JOBDIR) and shared (Redis) as their ``Request.to_dict()``, like Scrapy's
disk queues, but compactly (:func:`encode_request`): only the fields that differ from a new
request's, and not the URL when the frontier keeps it with the page. A request that cannot be
serialized (a lambda callback, a lock in its meta) is kept in memory with one warning, as Scrapy
does: it does not survive a restart, and with Redis this process fetches it itself, outside the
OPIC order.

Stats: the per-request counters (``opic/*``, ``scheduler/enqueued``, ``scheduler/dequeued``,
``dupefilter/filtered``) are added to Scrapy's stats collector periodically and at close, with
the frontier's figures (``opic/crawl/*`` for a frontier shared by several processes); a stats
call per event would cost more than the pop itself.
"""

from __future__ import annotations

import copy
import functools
import logging
import pickle
import sys
import threading
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Hashable
from typing import TYPE_CHECKING, Any, cast
from weakref import WeakKeyDictionary

from scrapy import exceptions as scrapy_exceptions
from scrapy import signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import RFPDupeFilter
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.request import request_from_dict
from twisted.internet import defer, task
from twisted.internet import error as twisted_error

from ._backends import StoreError, masked_url
from ._backends.crawl import Crawl
from ._errors import raise_in_one_line
from ._settings import OpicSettings, OpicSettingsError
from ._state import open_frontier
from .opic.constants import (
    DNS,
    DUPLICATE,
    ERROR,
    FORBIDDEN,
    FORWARDED,
    IGNORED,
    LOCAL,
    LOST,
    NEEDS_PAYLOAD,
    OFFSITE,
    SCHEDULED,
    SPIDER_ERROR,
    TIMEOUT,
)
from .opic.frontier import Entry, Lease, Link

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

#: Seconds between two scans of every page for the top page of the stats and the log line.
TOP_PAGE_SECONDS = 30.0


# Exceptions by outcome. (Scrapy 2.13+ wraps download errors in its own classes; older
# handlers and other download handlers raise Twisted's.)
_DNS_ERRORS = tuple(
    c
    for c in (
        getattr(scrapy_exceptions, "CannotResolveHostError", None),
        twisted_error.DNSLookupError,
    )
    if c is not None
)
_TIMEOUTS = tuple(
    c
    for c in (
        getattr(scrapy_exceptions, "DownloadTimeoutError", None),
        twisted_error.TimeoutError,
        twisted_error.TCPTimedOutError,
        defer.TimeoutError,
        TimeoutError,
    )
    if c is not None
)


def outcome_of(exception: BaseException) -> int:
    """The outcome code of a request that ended in ``exception``: the HTTP status of an
    ``HttpError``; ``forbidden`` (robots.txt), ``offsite`` or ``ignored`` for an
    ``IgnoreRequest`` (Scrapy gives robots.txt and offsite refusals no class of their own: their
    messages tell them apart); ``dns``, ``timeout``, else ``error``."""
    if isinstance(exception, HttpError):
        return int(exception.response.status)
    if isinstance(exception, IgnoreRequest):
        text = str(exception)
        if "robots.txt" in text:
            return FORBIDDEN
        return OFFSITE if "offsite" in text.lower() else IGNORED
    if isinstance(exception, _DNS_ERRORS):
        return DNS
    if isinstance(exception, _TIMEOUTS):
        return TIMEOUT
    return ERROR


#: What Scrapy's retry and redirect middlewares (and :meth:`OpicScheduler._follow_up`) put in
#: the meta of a follow-up request: it is for that one fetch, not for the page's later ones.
FOLLOW_UP_META = (
    "retry_times",
    "redirect_times",
    "redirect_ttl",
    "redirect_urls",
    "redirect_reasons",
    "opic_priority",
    "opic_dont_filter",
)


#: Meta keys of a stored request that a continuous crawl refetching by freshness keeps with it:
#: what the page's last full response showed, ``(url, ETag, Last-Modified, signature)``.
VALIDATORS_META = "opic_validators"
#: Meta of a request in flight (set by the downloader middleware): what its response showed,
#: ``(url, ETag, Last-Modified, signature, changed, modified)``, ``modified`` the time a
#: trusted Last-Modified gives (seconds since the epoch) or None.
SEEN_META = "_opic_seen"
#: Meta of a request in flight: the validator headers the downloader middleware added to it
#: (not the request's own: they never go into the request the page is refetched with).
SENT_META = "_opic_sent"


#: Meta of a request in flight whose page was found unchanged and whose visit is done: the
#: spider middleware keeps its response from the callback, the errback wrapper swallows what
#: Scrapy hands the request's errback instead (a 304's ``HttpError``, or :class:`NotModified`).
UNCHANGED_META = "_opic_unchanged"


class NotModified(IgnoreRequest):
    """A refetched page is unchanged (a 304, or a 200 with the signature of its last parsed
    visit): its visit is done, over the links of that visit; its callback is not called
    (``OPIC_UNCHANGED_CALLBACK``) and its errback is not either. (Its response was received:
    Scrapy's stats and ``CLOSESPIDER_PAGECOUNT`` count it.)"""


#: The OPIC scheduler of each running crawler (the middlewares' and the extension's way in).
_RUNNING: WeakKeyDictionary[Any, OpicScheduler] = WeakKeyDictionary()


def _url(request: Request) -> str:
    """The URL a page is known by: its request's, without a fragment (the fingerprint ignores
    it, so the first link's ``#section`` would otherwise name the page for good)."""
    url = request.url
    return url[: url.index("#")] if "#" in url else url


#: The fields of ``Request.to_dict()`` that :func:`encode_request` leaves out when they hold
#: the value a new request has, in the order of the bits of its mask (the stored format: never
#: reorder; add at the end).
REQUEST_FIELDS: tuple[tuple[str, Any], ...] = (
    ("callback", None),
    ("errback", None),
    ("headers", {}),
    ("body", b""),
    ("cookies", {}),
    ("meta", {}),
    ("encoding", "utf-8"),
    ("flags", []),
    ("cb_kwargs", {}),
    ("dont_filter", False),
    ("method", "GET"),
    ("priority", 0),
)
#: Mask bits past the fields: the other keys of the dict follow (a Request subclass's
#: ``_class`` and attributes), the URL follows.
_REST, _URL = 14, 15
#: The first byte of a request stored by :func:`encode_request`.
REQUEST_FORMAT = 1


def _pickle(values: tuple) -> bytes:
    # Without the protocol header and the first frame's (11 bytes that a small pickle does not
    # need: both are optional for the unpickler).
    data = pickle.dumps(values, protocol=4)
    return data[11:] if data[2] == pickle.FRAME[0] else data[2:]


def encode_request(request: Request, spider: Spider | None = None, url: str | None = None) -> bytes:
    """``request.to_dict()`` as bytes: :data:`REQUEST_FORMAT`, a 16-bit mask of the fields of
    :data:`REQUEST_FIELDS` that differ from their default (by type and value) and of the two
    extra parts (the dict's other keys, the URL), then the pickle of those values in mask order.
    The URL is left out when it is ``url`` (the URL the frontier hands back with the request:
    :attr:`Lease.url`). :func:`decode_request` rebuilds the request from the same dict.
    Raises what ``to_dict`` or pickle raise for a request that cannot be serialized."""
    d = request.to_dict(spider=spider)
    own_url = d.pop("url")
    mask = 0
    values = []
    for bit, (name, default) in enumerate(REQUEST_FIELDS):
        if name not in d:
            continue
        value = d.pop(name)
        if type(value) is not type(default) or value != default:
            mask |= 1 << bit
            values.append(value)
    if d:
        mask |= 1 << _REST
        values.append(d)
    if own_url != url:
        mask |= 1 << _URL
        values.append(own_url)
    body = _pickle(tuple(values)) if values else b""
    return bytes([REQUEST_FORMAT]) + mask.to_bytes(2, "little") + body


def decode_request(data: bytes, url: str | None = None, spider: Spider | None = None) -> Request:
    """The request :func:`encode_request` stored (``url``: the one it left out);
    :class:`ValueError` for bytes it did not make."""
    if data[:1] != bytes([REQUEST_FORMAT]):
        raise ValueError(f"not a stored request (format byte {data[:1]!r})")
    mask = int.from_bytes(data[1:3], "little")
    values = iter(pickle.loads(data[3:]) if len(data) > 3 else ())
    d: dict[str, Any] = {}
    for bit, (name, default) in enumerate(REQUEST_FIELDS):
        d[name] = next(values) if mask >> bit & 1 else copy.copy(default)
    if mask >> _REST & 1:
        d.update(next(values))
    d["url"] = next(values) if mask >> _URL & 1 else url
    if d["url"] is None:
        raise ValueError("a request stored without its URL, and none given")
    return request_from_dict(d, spider=spider)


#: The scheduler that :func:`prepare` built for each crawler, its frontier open.
_PREPARED: WeakKeyDictionary[Any, OpicScheduler] = WeakKeyDictionary()


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


#: The close reason of a crawl whose frontier's store failed (a full disk...).
STORE_FAILED = "opic_store_failed"


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


class OutcomeErrback:
    """The errback of a request handed out by the scheduler: reports a failure that no
    middleware reported (an ``IgnoreRequest`` raised from a downloader middleware's
    ``process_response``, such as "max redirections reached", reaches only the request's
    errback), then behaves exactly as the request's own errback would (or as no errback: the
    failure goes on). Without it the page would stay in flight: its cash stuck and its
    download slot counted busy for good."""

    def __init__(self, scheduler: OpicScheduler, original: Any) -> None:
        # A weak reference: a request must not keep its scheduler (and, through it, every
        # request of the crawl) alive in a reference cycle that only the cyclic GC can free.
        self.scheduler = weakref.ref(scheduler)
        self.original = original

    def __call__(self, failure: Any) -> Any:
        request = getattr(failure, "request", None)
        if request is not None and request.meta.get(UNCHANGED_META):
            return None  # (an unchanged page: its visit is done, nothing failed)
        scheduler = self.scheduler()
        if request is not None and scheduler is not None:
            scheduler.settle_failure(request, failure.value)
        return failure if self.original is None else self.original(failure)


class OpicScheduler(BaseScheduler):
    """Greedy OPIC scheduling with politeness over a frontier backend (see the module
    docstring)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self.stats = crawler.stats
        self.fingerprinter = crawler.request_fingerprinter
        self.spider: Spider | None = None
        self._frontier: Crawl | None = None
        #: Counters of the per-request path, added to Scrapy's stats now and then.
        self.counts: defaultdict[str, int] = defaultdict(int)
        self.df: Any = None  # a project's DUPEFILTER_CLASS, when it is not Scrapy's default
        self._dupefilter_debug = False
        self._logged_duplicate = False
        self._warned_unserializable = False
        #: The pages whose request stays in this process's memory because it cannot be
        #: serialized (with a JOBDIR: Scrapy counts its pushes and pops as memory ones).
        self._memory_only: set[Hashable] = set()
        self._unserializable: Request | None = None  # the last request _encode could not
        self._extra: deque[Request] = deque()  # fetched outside the frontier (dont_filter...)
        self._leases: dict[Hashable, Lease] = {}  # page key -> the lease this process holds
        #: page key -> a weak reference to the request its lease was handed out with (see
        #: _settle_lost)
        self._out: dict[Hashable, weakref.ref] = {}
        #: page key -> the priority and dont_filter of its leased request as filed (its
        #: follow-ups keep them)
        self._base: dict[Hashable, tuple[int, bool]] = {}
        #: page key -> the request to fetch the page with later, when the one leased is a
        #: follow-up (a continuous crawl)
        self._clean: dict[Hashable, Request] = {}
        #: download slot -> requests popped and not yet out of the downloader
        self._slot_load: dict[Hashable, int] = {}
        self._downloaded: set[Hashable] = set()  # leased pages whose download is over
        self._full: set[Hashable] = set()  # the download slots without room (see _full_slots)
        #: The schedule code of each request that the visit that paid it already filed.
        self._codes: WeakKeyDictionary[Request, int] = WeakKeyDictionary()
        self._top: tuple[str, float] | None = None  # see _top_page
        self._top_at = 0.0
        self._top_cost = 0.0
        #: Requests a visit paid that have not reached enqueue_request yet (a request dropped
        #: on its way is collected, and leaves the set by itself).
        self._unfiled: weakref.WeakSet[Request] = weakref.WeakSet()
        self._default_concurrency = 8  # CONCURRENT_REQUESTS_PER_DOMAIN (see from_crawler)
        self._slot_concurrency: dict[str, int] = {}
        self._limits: dict[Hashable, int] = {}  # download slot -> leases it may hold (cached)
        self._tick: task.LoopingCall | None = None
        #: A pop found nothing while pages were pending elsewhere (see _nudge); the request
        #: handed to the engine to make it ask again, until it comes back here.
        self._starved = False
        self._nudged: Request | None = None
        self._ready: deque[Request] = deque()  # popped and prepared, to hand out first
        self._enqueued_where = self._dequeued_where = ""  # (set by open)
        self._claimed = False  # a prepared scheduler handed to Scrapy's engine
        self._handed_over = False  # the frontier hands payloads over (see open, _decode)
        self._failed: str | None = None  # why the frontier's store failed (see _stop)
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> OpicScheduler:
        """The scheduler of ``crawler``: the one :func:`prepare` built (its frontier already
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
        scheduler._dupefilter_debug = cs.getbool("DUPEFILTER_DEBUG")
        # The downloader's per-slot concurrency, for slots it has not created yet.
        per_ip = cs.getint("CONCURRENT_REQUESTS_PER_IP")
        scheduler._default_concurrency = per_ip or cs.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
        scheduler._slot_concurrency = {
            key: int(conf["concurrency"])
            for key, conf in cs.getdict("DOWNLOAD_SLOTS").items()
            if isinstance(conf, dict) and "concurrency" in conf
        }
        return scheduler

    @staticmethod
    def of(crawler: Crawler) -> OpicScheduler | None:
        """The OPIC scheduler running for ``crawler``, if any."""
        return _RUNNING.get(crawler)

    # -- lifecycle -------------------------------------------------------------------------
    def _open_frontier(self, spider: Spider) -> None:
        self.spider = spider
        meta = {"spider": spider.name, "settings": self.settings.as_dict()}
        command = scrapy_command()
        in_memory = command in STATELESS_COMMANDS
        self._frontier = open_frontier(self.settings, spider.name, self._encode, meta, in_memory)
        if in_memory:
            logger.info(
                "OPIC: `scrapy %s` reads and writes no OPIC state (crawl and runspider do): its "
                "frontier is in memory",
                command,
            )

    def open(self, spider: Spider) -> Any:
        if self._frontier is None:  # (else prepare() opened it before Scrapy's engine existed)
            self._open_frontier(spider)
        # A one-pass crawl hands a request over with its lease (its store keeps none).
        self._handed_over = not self.frontier.continuous
        unfiled = self._unfiled  # (not self: no cycle through the frontier)
        self.frontier.ready = lambda: not unfiled  # (writes wait for the links visits paid)
        s = self.settings
        # Where Scrapy's stats say a request waits: memory, disk (JOBDIR) or redis.
        where = "redis" if self.frontier.shared else "disk" if s.jobdir else "memory"
        self._enqueued_where = f"scheduler/enqueued/{where}"
        self._dequeued_where = f"scheduler/dequeued/{where}"
        _RUNNING[self.crawler] = self
        from scrapy import signals

        self.crawler.signals.connect(self._left_downloader, signal=signals.request_left_downloader)
        self._tick = task.LoopingCall(self._maintain)
        self._tick.start(self.frontier.maintain_interval, now=False)
        opened = self.df.open() if self.df is not None else None
        logger.info(
            "OPIC scheduler (%s, epsilon=%s, refresh=%s, window=%s, %s crawl), state %s",
            s.strategy,
            s.epsilon,
            s.refresh,
            s.window,
            "continuous" if s.continuous else "one-pass",
            masked_url(self.frontier.location or "in memory"),
        )
        if s.boost_patterns:
            logger.info(
                "OPIC boosts URLs matching %s (OPIC_BOOST=%s)",
                ", ".join(repr(p.pattern) for p in s.boost_patterns),
                s.boost,
            )
        return opened

    def _stop(self, exc: StoreError) -> None:
        """The frontier's store failed for good (a full disk, an I/O error, a writer thread that
        died): say so in one error line and close the spider. Nothing more is written (the
        store refuses every later write), so the state stays that of its last commit, and a
        crawl with a JOBDIR resumes from it once the cause is gone. ``scrapy crawl`` then
        exits with 1, as for a crawl that failed to start."""
        if self._failed is not None:
            return
        self._failed = str(exc)
        resume = " (resume it with the same JOBDIR once the cause is gone)"
        logger.error(
            "OPIC: %s: the crawl stops; its state is that of its last checkpoint%s",
            exc,
            resume if self.settings.jobdir else "",
        )
        crawler = self.crawler

        def failed() -> None:
            # Scrapy's crawler process counts a crawl whose crawler has no spider at the end as
            # one that failed (bootstrap_failed): the command's exit code is then 1. (The
            # engine has stopped: nothing reads the spider any more.)
            crawler.spider = None

        crawler.signals.connect(failed, signal=signals.engine_stopped, weak=False)
        if not self._closing:
            d = deferred_from_coro(crawler.engine.close_spider_async(reason=STORE_FAILED))
            d.addErrback(lambda failure: None)  # (a spider closing already: nothing to do)

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
        frontier = self._frontier
        if frontier is None:  # open() failed: nothing was opened but the dupefilter, maybe
            _RUNNING.pop(self.crawler, None)
            return self.df.close(reason) if self.df is not None else None
        try:
            try:
                if self._failed is None:
                    self._hand_back(reason)
            except StoreError as exc:
                self._stop(exc)
            finally:
                try:
                    frontier.close([])  # the last checkpoint (none after a failure)
                except StoreError as exc:
                    self._stop(exc)
        finally:
            _RUNNING.pop(self.crawler, None)
            try:
                if self._failed is None:
                    self._export()
            finally:
                closed = self.df.close(reason) if self.df is not None else None
        return closed

    def _hand_back(self, reason: str) -> None:
        """At close: what this process still holds goes back, cash intact (not settled as
        lost: a closing engine drops the requests it had not sent, and those pages are merely
        not fetched yet); the final stats and their log line."""
        frontier = self.frontier
        leases = []
        for lease in self._leases.values():
            if lease.payload is None:  # (handed over: the request itself, if still alive)
                ref = self._out.get(lease.key)
                lease = lease._replace(payload=ref() if ref is not None else None)
            leases.append(lease)
        self._leases.clear()
        self._out.clear()
        self._base.clear()
        self._clean.clear()
        self._slot_load.clear()
        self._downloaded.clear()
        self._full.clear()
        if leases and frontier.release(leases):
            logger.info("OPIC: %d pages in flight handed back", len(leases))
        f = self.update_stats(closing=True)
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
        """Every ``frontier.maintain_interval`` seconds: the frontier's upkeep (lease renewal,
        a checkpoint that is due) and the stats. An error is logged and retried at the next
        tick: a Redis hiccup must not stop the loop that renews the leases."""
        self._limits.clear()
        if self._failed is not None:
            return
        try:
            self._settle_lost()
            if self.frontier.shared:
                self.frontier.quiet = self._quiet()
            self.frontier.maintain(list(self._leases.values()))
            if self._starved and len(self.frontier):
                self._nudge()
            self.update_stats()
        except StoreError as exc:  # the store failed for good: the crawl stops
            self._stop(exc)
        except Exception:
            logger.exception("OPIC: periodic upkeep of the frontier failed (will retry)")

    def _quiet(self) -> float:
        """Seconds a shared frontier waits after a partition's last outcome here before it
        hands the partition to another process: the longest download delay of the slots here
        (Scrapy keeps a slot's delay within a process), with its jitter."""
        delay = self.crawler.settings.getfloat("DOWNLOAD_DELAY")
        for slot in self.crawler.engine.downloader.slots.values():
            delay = max(delay, float(slot.delay))
        return 1.5 * delay

    def _export(self) -> None:
        """``OPIC_EXPORT``: write each target from the state just made durable. A failed export
        is logged, never raised: the crawl's state is safe and ``scrapy opic-export`` can redo
        it."""
        if not self.settings.export or not self.frontier.location:
            return
        from .export import open_state, write_export

        for out, options in self.settings.export.items():
            target = out.replace("{spider}", self.spider.name if self.spider else "")
            try:
                with open_state(self.frontier.location) as state:
                    n = write_export(state, target, **options)
            except Exception as exc:
                logger.error("OPIC export to %s failed: %s", target, exc)
                self.stats.inc_value("opic/export_failed")
            else:
                logger.info(
                    "OPIC importance of %d row%s exported to %s", n, "" if n == 1 else "s", target
                )

    # -- requests ---------------------------------------------------------------------------
    def _key(self, request: Request) -> bytes:
        return self.fingerprinter.fingerprint(request)

    def _slot(self, request: Request) -> Any:
        return self.crawler.engine.downloader.get_slot_key(request)

    def _entry(self, request: Request) -> Entry:
        priority = request.meta.get("opic_priority", request.priority)
        return Entry(self._key(request), _url(request), priority, self._slot(request), request)

    @staticmethod
    def _again(request: Request) -> bool:
        """``dont_filter``: fetch even a known page, as Scrapy does. Not for start requests
        (Scrapy marks start_urls dont_filter): a resumed crawl must not fetch its seeds again."""
        return bool(request.dont_filter and not request.meta.get("is_start_request"))

    def _encode(self, request: Request, url: str | None = None) -> bytes | None:
        """The request as bytes for a backend that stores or shares it (``None``, with one
        warning, if it cannot be serialized); without its URL if it is ``url``, which the
        backend hands back with it (:attr:`Lease.url`)."""
        try:
            data = encode_request(request, self.spider, url)
        except (ValueError, TypeError, AttributeError, pickle.PicklingError) as exc:
            # to_dict refuses a callback that is not a spider method (ValueError); pickle
            # refuses a lock or a lambda in meta or cb_kwargs (TypeError, PicklingError...).
            if not self._warned_unserializable:
                self._warned_unserializable = True
                logger.warning(
                    "Unable to serialize request %s (%s): it stays in this process's memory "
                    "(not in a JOBDIR state, not shared through Redis). (This message is logged "
                    "once.)",
                    request,
                    exc,
                )
            # (Scrapy's own stat for a request its disk queue refuses.)
            self.counts["scheduler/unserializable"] += 1
            if self.settings.store == "sqlite":  # (a shared frontier answers LOCAL for it)
                self._unserializable = request
                self._memory_only.add(self._key(request))
            return None
        if self._memory_only:  # (a page that waited in memory may wait on disk again)
            self._memory_only.discard(self._key(request))
        return data

    def _decode(self, payload: Any, url: str | None = None) -> Request | None:
        """A lease's payload as a request: as stored, or rebuilt from its bytes (with ``url``,
        the lease's, if they left it out), or ``None``, with an error, if this spider's code
        cannot rebuild it (written by other spider code)."""
        if not isinstance(payload, (bytes, dict)):
            # Kept in memory. Unless the frontier handed it over (it keeps no reference to it),
            # hand out a copy: Scrapy's components change a request's meta on its way (a
            # continuous crawl keeps the stored one for the page's next fetch), and only the
            # engine may hold the one handed out, so that its loss is seen (_settle_lost).
            return payload if self._handed_over else payload.replace()
        try:
            if isinstance(payload, bytes):
                return decode_request(payload, url, self.spider)
            return request_from_dict(payload, spider=self.spider)
        except Exception as exc:
            logger.error("OPIC: cannot rebuild a stored request (%s): its page is given up", exc)
            return None

    # -- leases -----------------------------------------------------------------------------
    def _hold(self, lease: Lease) -> None:
        self._end(lease.key)  # a page whose lease lapsed, popped again: one lease
        if self._handed_over and not isinstance(lease.payload, (bytes, dict)):
            # The request handed out: only the engine may hold it, so that its loss is seen
            # (_settle_lost). (_hand_back gives it back to the frontier with the lease.)
            lease = lease._replace(payload=None)
        self._leases[lease.key] = lease
        slot = lease.slot
        n = self._slot_load[slot] = self._slot_load.get(slot, 0) + 1
        if n >= self._limit(slot):
            self._full.add(slot)

    def _end(self, key: Hashable) -> Lease | None:
        """This process's lease of page ``key`` ends (its outcome is being reported)."""
        lease = self._leases.pop(key, None)
        self._out.pop(key, None)
        self._base.pop(key, None)
        self._clean.pop(key, None)
        if lease is not None and key not in self._downloaded:
            self._unload(lease.slot)
        self._downloaded.discard(key)
        return lease

    def _unload(self, slot: Hashable) -> None:
        n = self._slot_load.get(slot, 0) - 1
        if n > 0:
            self._slot_load[slot] = n
        else:
            self._slot_load.pop(slot, None)
        if slot in self._full and n < self._limit(slot):
            self._full.discard(slot)

    def _left_downloader(self, request: Request, spider: Spider | None = None) -> None:
        """Scrapy's ``request_left_downloader``: a page's download is over (its slot has room
        again, while its response is parsed)."""
        lease = self._held(request)
        if lease is not None and lease.key not in self._downloaded:
            self._downloaded.add(lease.key)
            self._unload(lease.slot)

    def _settle_lost(self) -> None:
        """Give up the pages whose request vanished in Scrapy's engine with no outcome: the
        request object handed out under a lease this process still holds has been freed, so no
        middleware, errback or callback will ever report it. (A downloader middleware that
        answers ``process_request`` with a new ``Request`` built from scratch, such as a URL
        rewriter, drops the one it was given: the new request is a page of its own.) Such a page
        would otherwise stay in flight for good: with Redis its lease renewed by this process
        forever, so the crawl could never end by itself. It is closed with the outcome ``lost``,
        its cash to the virtual page, as for any page given up unfetched. O(leases held), run
        at each upkeep tick and when the engine, idle, asks whether requests are pending."""
        lost = [key for key, ref in self._out.items() if ref() is None]
        for key in lost:
            lease = self._end(key)
            if lease is not None and self.frontier.forfeit(lease, LOST):
                self.counts["opic/lost"] += 1
        if lost:
            logger.warning(
                "OPIC: %d requests handed out vanished in Scrapy's engine with no outcome (a "
                "middleware dropped them?): their pages are closed as lost",
                len(lost),
            )

    def _held(self, request: Request) -> Lease | None:
        """The lease ``request`` was handed out under, if this process still holds it. (A
        request whose lease lapsed and whose page was then popped again under another lease is
        not the holder: its outcome is ignored.)"""
        lease = self._leases.get(request.meta.get("opic_id"))
        if lease is None or lease.token != request.meta.get("opic_lease"):
            return None
        return lease

    def _limit(self, slot: Any) -> int:
        """The slot's concurrency (see :meth:`_full_slots`); cached, and the cache emptied at
        each upkeep tick, in case the downloader's slots changed meanwhile."""
        limit = self._limits.get(slot)
        if limit is None:
            downloader_slot = self.crawler.engine.downloader.slots.get(slot)
            if downloader_slot is not None:
                concurrency = downloader_slot.concurrency
            else:
                concurrency = self._slot_concurrency.get(slot, self._default_concurrency)
            limit = self._limits[slot] = concurrency
        return limit

    def _full_slots(self) -> Collection[Hashable]:
        """The download slots that have no room. A slot has room while fewer of its requests
        than its concurrency are between their pop and the end of their download (Scrapy's
        ``request_left_downloader``), or their outcome if they never reach the downloader:
        the downloader then never holds more of a slot's requests than it may send at once.
        (Scrapy 2.13+ on the asyncio reactor starts every queued request of a slot that has a
        free transfer slot at once: more queued would mean more than its concurrency sent.)
        Counted here, not read from the downloader, whose count lags behind a run of pops,
        since a request reaches it only after the downloader middlewares."""
        return self._full

    # -- the scheduler interface -----------------------------------------------------------
    @_guarded(False)
    def has_pending_requests(self) -> bool:
        # (Scrapy's engine asks only when its downloader and scraper are idle: a request handed
        # out and not freed by now is held by something else, or was dropped; see _settle_lost.)
        if self._out:
            self._settle_lost()
        return bool(self._extra) or self.frontier.has_pending()

    @_guarded(0)
    def __len__(self) -> int:
        return len(self._extra) + len(self.frontier)

    @staticmethod
    def detach(request: Request) -> None:
        """Take out what the scheduler put into a request it handed out (its lease in meta, the
        errback wrapper), so that a copy of it (a retry, a redirect, a callback's
        ``response.request.replace(...)``) is filed as a request of its own: no request in a
        queue carries a lease, and the wrapper never reaches a serializer."""
        if isinstance(request.errback, OutcomeErrback):
            request.errback = request.errback.original
        meta = request.meta
        if "opic_id" in meta:
            del meta["opic_id"]
            meta.pop("opic_lease", None)

    @_guarded(False)
    def enqueue_request(self, request: Request) -> bool:
        if request is self._nudged:
            self._nudged = None
            self._ready.append(request)
            return True
        if self._unfiled:
            self._unfiled.discard(request)
        # A link a visit filed has its code, and settle_visit detached it: neither a follow-up
        # nor a lease to take out (the common case, so asked first).
        code = self._codes.pop(request, None) if self._codes else None
        if code is None:
            lease = self._held(request)  # a retry or redirect of a page in flight here?
            self.detach(request)
            if lease is not None:
                return self._follow_up(request, lease)
        again = self._again(request)
        if code is None or code == NEEDS_PAYLOAD:  # not filed by a visit: file it now
            code = self.frontier.schedule([self._entry(request)], again=again)[0]
        if code in (SCHEDULED, FORWARDED):
            # The project's own dupefilter, if any, may refuse it (never a dont_filter one):
            # never to be fetched, its cash goes to the virtual page.
            if self.df is not None and not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.spider)
                self.counts["opic/filtered"] += 1
                self.frontier.drop(self._key(request), url=_url(request))
                return False
            self.counts["opic/enqueued"] += 1
            self._count_enqueued(self._where(request))
            return True
        if code == LOCAL or (again and code == DUPLICATE):
            # Its page is pending or in flight (dont_filter: Scrapy would fetch it once more
            # all the same), or it cannot be shared: fetched here, outside the frontier; such a
            # fetch pays nothing (the page's cash goes with its own fetch).
            self._extra.append(request)
            self.counts["opic/extra_fetches"] += 1
            self._count_enqueued("memory")
            return True
        self.counts["opic/duplicates"] += 1
        self._log_duplicate(request)
        return False

    def _follow_up(self, request: Request, lease: Lease) -> bool:
        """A retry (same fingerprint) or a redirect (another one) of a page leased here.

        It waits at the priority its page's request had: Scrapy's retry (-1) and redirect (+2)
        adjustments order a FIFO or LIFO queue, where they are all a request has; here cash
        orders a priority, and a tier of its own would make the adjustment the page's for good
        (a retried page starved below every refetch of a continuous crawl, a redirect target
        refetched ahead of every page). The request itself keeps its priority attribute (and
        the ``dont_filter`` a retry sets) for its one fetch; a continuous crawl fetches the
        page later with neither (see :meth:`_later`)."""
        base = self._base.get(lease.key)
        if base is not None:
            # (In meta, so that the follow-up, stored or shared, still knows its page's
            # priority when it is popped, and its own follow-ups keep it too.)
            if request.priority != base[0]:
                request.meta["opic_priority"] = base[0]
                self.counts["opic/priority_adjustments_ignored"] += 1
            if request.dont_filter != base[1]:
                request.meta["opic_dont_filter"] = base[1]
        entry = self._entry(request)
        self._end(lease.key)
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
            self._count_enqueued(self._where(request))
            return True
        if code == LOCAL:
            self._extra.append(request)
            self._count_enqueued("memory")
            return True
        return False  # a stale lease, or a redirect to a page already known

    @_guarded(None)
    def next_request(self) -> Request | None:
        if self._extra:
            self.counts["scheduler/dequeued"] += 1
            self.counts["scheduler/dequeued/memory"] += 1
            return self._extra.popleft()
        if self._ready:
            return self._ready.popleft()
        request = self._pop()
        self._starved = request is None
        return request

    def _pop(self) -> Request | None:
        """The best page's request, its lease held here (see the module docstring)."""
        full = self._full_slots()
        for _attempt in range(10):
            lease = self.frontier.pop(full)
            if lease is None:
                return None
            request = self._decode(lease.payload, lease.url)
            if request is None:
                self.frontier.forfeit(lease, ERROR)
                self.counts["opic/undecodable"] += 1
                continue
            self._hold(lease)
            meta = request.meta
            base = self._base[lease.key] = (
                meta.get("opic_priority", request.priority),
                meta.get("opic_dont_filter", request.dont_filter),
            )
            if self.frontier.continuous and any(k in meta for k in FOLLOW_UP_META):
                self._clean[lease.key] = self._later(request, base)
            request.meta["opic_id"] = lease.key
            request.meta["opic_lease"] = lease.token
            request.errback = OutcomeErrback(self, request.errback)
            self._out[lease.key] = weakref.ref(request)
            self.counts["opic/popped"] += 1
            self.counts["scheduler/dequeued"] += 1
            if self._memory_only and lease.key in self._memory_only:
                if not self.frontier.continuous:  # (else it waits in memory again)
                    self._memory_only.discard(lease.key)
                self.counts["scheduler/dequeued/memory"] += 1
            else:
                self.counts[self._dequeued_where] += 1
            return request
        return None

    def _nudge(self) -> None:
        """Scrapy's engine asks for a request when a download ends, or at its heartbeat (every
        5 s). After a pop found nothing, pages that became pending without a download ending
        here (a shared frontier's messages, a partition taken over) would wait for the
        heartbeat: the best one is handed to the engine's public ``crawl()``, which files it
        back here (:meth:`enqueue_request` knows it) and makes the engine ask at once."""
        request = self._pop()
        if request is None:
            return
        self._starved = False
        self._nudged = request
        self.crawler.engine.crawl(request)
        if self._nudged is request:  # (a request_scheduled handler dropped it)
            self._nudged = None
            lease = self._held(request)
            if lease is not None:
                self._end(lease.key)
                self.frontier.forfeit(lease, IGNORED)

    @staticmethod
    def _later(request: Request, base: tuple[int, bool]) -> Request:
        """The request to fetch a page with after ``request``, a follow-up (a retry, a redirect
        target): the same request without what Scrapy's retry and redirect middlewares added
        for one fetch (their meta counters, the priority adjustment, a retry's
        ``dont_filter``). Else a page retried once would keep its ``retry_times`` for good
        (fewer retries, then none, at each later fetch) and a redirect target its
        ``redirect_urls`` (a redirect its spider would see at every refetch)."""
        priority, dont_filter = base
        meta = {k: v for k, v in request.meta.items() if k not in FOLLOW_UP_META}
        return request.replace(priority=priority, dont_filter=dont_filter, meta=meta)

    def _end_with(self, key: Hashable) -> Request | None:
        """:meth:`_end` for an outcome that leaves the page waiting in a continuous crawl: the
        request it is fetched with later if the one leased is a follow-up, else ``None``."""
        later = self._clean.get(key)
        self._end(key)
        return later

    # -- outcomes (called by the middlewares) -----------------------------------------------
    @_guarded(None)
    def settle_visit(
        self,
        request: Request,
        followed: list[Request],
        weights: list[float] | None,
        boosts: list[float] | None,
        refused: list[tuple[Request, float]] | None = None,
        failed: bool = False,
    ) -> float | None:
        """The visit of ``request``'s page, which links to ``followed`` (the requests its
        callback yielded that Scrapy will follow): one payout over them, with ``weights`` and
        ``boosts`` aligned with them (``None``: all 1, all 0); ``refused`` are the links it
        will not follow with their weights (their share goes to the virtual page). The links
        are filed in the same frontier call.

        A page links to another page once, however many of its requests lead there: requests
        with one fingerprint (``a.html#x`` and ``a.html#y``, a link in the menu and in the
        text) are one link, with the largest of their weights and boosts, as in PageRank's
        graph of pages. Counting each would weigh a page's links by how many anchors it has.
        Returns the page's importance just after the visit if ``OPIC_ITEM_FIELD`` asks for it
        (else, or if the page was not in flight here, ``None``). ``failed``: the callback raised
        after yielding them, the page's outcome is ``spider_error``."""
        # The page's lease first: the callback may yield its own request object again (to
        # fetch the page once more), and detaching it takes the lease out of its meta.
        lease = self._held(request)
        for o in followed:
            # A copy of the page's own request (pagination by response.request.replace), or
            # that request itself, must not pass for a retry or redirect of it, nor carry the
            # errback wrapper.
            self.detach(o)
        if lease is None:
            return None
        links, owners, repeats = self._links_of(followed, weights, boosts)
        virtual_weight = 0.0
        if refused:
            most: dict[Hashable, float] = {}
            for o, w in refused:
                key = self._key(o)
                if w > most.get(key, -1.0):
                    most[key] = w
            virtual_weight = float(sum(most.values()))
        # The lease ends here whatever the call does: if the frontier fails now, the page is
        # not renewed any more (with Redis it goes back to the frontier when its lease expires).
        seen = request.meta.get(SEEN_META)
        later = self._end_with(lease.key)
        importance = bool(self.settings.item_field)
        kw: dict[str, Any] = {}
        if seen is not None:  # (a crawl that refetches by freshness)
            later = self._next_payload(request, later, seen)
            kw["changed"], kw["modified"] = seen[4], seen[5]
        if failed:
            kw["outcome"] = SPIDER_ERROR
        visit = self.frontier.visit(lease, links, virtual_weight, importance, later, **kw)
        if visit is None:  # the lease had expired: another process fetches the page
            self.counts["opic/stale"] += 1
            return None
        self.counts["opic/visits"] += 1
        self._note_codes(visit.codes, owners, repeats)
        return visit.importance

    def _links_of(
        self,
        followed: list[Request],
        weights: list[float] | None,
        boosts: list[float] | None,
    ) -> tuple[list[Link], list[Request], list[tuple[Request, int]]]:
        """A visit's links (one per key: the largest weight and boost of its requests), the
        first request of each, and the other requests with their key's link index."""
        # Each request is filed when it reaches enqueue_request, so that a request dropped on
        # its way there (by a middleware below ours, a request_scheduled handler, the
        # project's dupefilter) is never fetched.
        links: list[Link] = []
        owners: list[Request] = []
        first: dict[Hashable, int] = {}  # key -> its link's index
        repeats: list[tuple[Request, int]] = []
        for k, o in enumerate(followed):
            key = self._key(o)
            w = weights[k] if weights is not None else 1.0
            b = boosts[k] if boosts is not None else 0.0
            m = first.get(key)
            if m is not None:
                repeats.append((o, m))
                if w > links[m].weight or b > links[m].boost:
                    links[m] = links[m]._replace(
                        weight=max(w, links[m].weight), boost=max(b, links[m].boost)
                    )
                continue
            first[key] = len(links)
            owners.append(o)
            links.append(Link(key, _url(o), w, b, self._again(o)))
        return links, owners, repeats

    def _note_codes(
        self, codes: list[int], owners: list[Request], repeats: list[tuple[Request, int]]
    ) -> None:
        """What the frontier said of each followed request (see :meth:`_links_of`)."""
        for o, code in zip(owners, codes):
            self._codes[o] = code
            if code == NEEDS_PAYLOAD:
                self._unfiled.add(o)
        for o, m in repeats:
            # Its page is filed by its key's first request: this one is a duplicate of it
            # (or, not filed yet, it is when it reaches enqueue_request after the first).
            code = codes[m]
            self._codes[o] = code if code == NEEDS_PAYLOAD else DUPLICATE
            if code == NEEDS_PAYLOAD:
                self._unfiled.add(o)

    @_guarded(None)
    def settle_unchanged(self, request: Request) -> bool:
        """``request``'s page was refetched and is unchanged (a 304 to its validators, or a
        200 whose signature is that of its last full response): a visit over the links of its
        last parsed visit (:meth:`MemoryFrontier.unchanged
        <scrapy_opic.opic.frontier.MemoryFrontier.unchanged>`). False if the page was not in
        flight here."""
        lease = self._held(request)
        if lease is None:
            return False
        seen = request.meta.get(SEEN_META)
        later = self._end_with(lease.key)
        if seen is not None:
            later = self._next_payload(request, later, seen)
        if self.frontier.unchanged(lease, later) is None:
            self.counts["opic/stale"] += 1
            return False
        self.counts["opic/visits"] += 1
        self.counts["opic/unchanged"] += 1
        return True

    def _next_payload(self, request: Request, later: Request | None, seen: tuple) -> Request | None:
        """The request to refetch ``request``'s page with, carrying what its last full response
        showed (``seen``: see :data:`SEEN_META`); ``later`` (the one it would be refetched with
        otherwise: ``None`` for the stored one) if that did not change."""
        shown = tuple(seen[:4])
        base = later if later is not None else request
        if base.meta.get(VALIDATORS_META) == shown and SENT_META not in base.meta:
            return later
        meta = {
            k: v
            for k, v in base.meta.items()
            if not k.startswith("_opic") and k != "download_latency"
        }
        meta[VALIDATORS_META] = shown
        headers = base.headers.copy()
        for name in base.meta.get(SENT_META, ()):
            headers.pop(name, None)
        stored = base.replace(meta=meta, headers=headers)
        self.detach(stored)  # (no lease in its meta, its own errback)
        return stored

    @_guarded(None)
    def settle_callback_error(self, request: Request, exception: BaseException) -> None:
        """The callback of ``request``'s page raised before yielding anything (or Scrapy's
        HttpErrorMiddleware refused the response: ``HttpError``): a visit with no out-links,
        with the outcome ``http_<status>`` or ``spider_error``."""
        lease = self._held(request)
        if lease is not None:
            later = self._end_with(lease.key)
            # (Whatever the callback raised, a TimeoutError included, is the spider's error.)
            outcome = exception.response.status if isinstance(exception, HttpError) else None
            outcome = SPIDER_ERROR if outcome is None else int(outcome)
            if self.frontier.fail(lease, outcome, later):
                self.counts["opic/failed"] += 1

    @_guarded(None)
    def settle_failure(self, request: Request, exception: BaseException) -> None:
        """The outcome of an in-flight request that ends in ``exception`` instead of a response
        to parse (the downloader middleware's and the errback's one rule), named by
        :func:`outcome_of`. An HTTP error status or a download error (after Scrapy's retries)
        was a fetch: a visit with no out-links. Any other ``IgnoreRequest`` (robots.txt,
        offsite, too many redirects...) fetched nothing: the page is given up and its cash goes
        to the virtual page. Either way the frontier closes the page (its later links pay it
        nothing), except a failed fetch in a continuous crawl that the frontier will try again
        (see :data:`~.opic.constants.FINAL_OUTCOMES`). A page not in flight here is left
        alone."""
        lease = self._held(request)
        if lease is None:
            return
        later = self._end_with(lease.key)
        outcome = outcome_of(exception)
        if isinstance(exception, IgnoreRequest) and not isinstance(exception, HttpError):
            if self.frontier.forfeit(lease, outcome):
                self.counts["opic/ignored"] += 1
        elif self.frontier.fail(lease, outcome, later):
            self.counts["opic/failed"] += 1

    # -- stats and logs ------------------------------------------------------------------------
    def _where(self, request: Request) -> str | None:
        """``"memory"`` for a request just filed that could not be serialized (it waits in this
        process's memory, as Scrapy's scheduler counts it), else ``None``: where the frontier
        keeps its requests."""
        if self._unserializable is request:
            self._unserializable = None
            return "memory"
        return None

    def _count_enqueued(self, where: str | None = None) -> None:
        self.counts["scheduler/enqueued"] += 1
        self.counts[f"scheduler/enqueued/{where}" if where else self._enqueued_where] += 1

    def _log_duplicate(self, request: Request) -> None:
        """What Scrapy's RFPDupeFilter says of a duplicate: the ``dupefilter/filtered`` stat and
        a debug line (the first only, or all with DUPEFILTER_DEBUG). The frontier refused it,
        not a project's own dupefilter: that one's ``log()`` is for the duplicates it saw (Scrapy
        calls it for nothing else)."""
        self.counts["dupefilter/filtered"] += 1
        if self._dupefilter_debug or not self._logged_duplicate:
            self._logged_duplicate = True
            logger.debug(
                "Filtered duplicate request: %(request)s"
                + ("" if self._dupefilter_debug else " - no more duplicates will be shown"),
                {"request": request},
                extra={"spider": self.spider},
            )

    def update_stats(self, closing: bool = False) -> dict[str, float]:
        """Add the event counters to Scrapy's stats and set the frontier's figures
        (``opic/...``; ``opic/crawl/...`` for a frontier shared by several processes), which it
        returns. O(pages) for the embedded frontier (its top page): called periodically and at
        close, never per request."""
        counts, self.counts = self.counts, defaultdict(int)
        for name, n in counts.items():
            self.stats.inc_value(name, n)
        frontier = self.frontier
        prefix = "opic/crawl/" if frontier.shared else "opic/"
        figures = frontier.figures()
        for name, value in figures.items():
            self.stats.set_value(prefix + name, value)
        if frontier.shared:
            self.stats.set_value("opic/round_trips", frontier.round_trips)
            return figures
        top = self._top_page(fresh=closing)
        if top is not None:
            self.stats.set_value("opic/top_page", top[0])
            self.stats.set_value("opic/top_importance", top[1])
        if closing:
            self.stats.set_value("opic/total_cash", frontier.total_cash())
        return figures

    def _top_page(self, fresh: bool = False) -> tuple[str, float] | None:
        """The frontier's top page, found again (a scan of every page) at most every
        :data:`TOP_PAGE_SECONDS`, and no more often than 50 times the last scan took: its
        stats and log line cost a few percent of a crawl of tens of millions of pages at
        most. ``fresh``: found now (at close)."""
        now = time.monotonic()
        due = self._top_at + max(TOP_PAGE_SECONDS, 50 * self._top_cost)
        if fresh or self._top_at == 0.0 or now >= due:
            self._top = self.frontier.top_page()
            self._top_at = time.monotonic()
            self._top_cost = self._top_at - now
        return self._top

    @_guarded("OPIC: stopped (its state store failed)")
    def status_line(self) -> str:
        """The periodic OPIC log line (:class:`~scrapy_opic._extensions.OpicLogStats`)."""
        frontier = self.frontier
        f = frontier.figures()
        line = "OPIC" + (f" (Redis, {f['workers']} processes)" if frontier.shared else "")
        failed = f.get("failed_visits")
        line += (
            f": {f['fetched']} pages fetched ({f['visits']} visits"
            + (f", {failed} of them failed" if failed else "")
            + f"), {f['pages']} known, {f['pending']} pending"
        )
        if frontier.shared:
            line += f", {f['leases']} in flight in the crawl"
        line += (
            f"; G={f['G']:.4f}, error factor 1/G={f['error_factor']:.4f}, virtual cash "
            f"{f['virtual_cash']:.4f}"
        )
        top = self._top_page()
        if top is not None:
            line += f"; top page: {top[0]} ({top[1]:.4f})"
        if frontier.shared:
            line += (
                f"; this process: {len(self._leases)} in flight, {frontier.round_trips} round trips"
            )
        return line


__all__ = ["NotModified", "OpicScheduler", "OutcomeErrback"]
