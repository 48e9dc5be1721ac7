"""``OpicScheduler``: a Scrapy scheduler that fetches the page with the most cash first.

Contract with Scrapy's engine (see ``scrapy.core.scheduler.BaseScheduler``):

* ``enqueue_request(request)`` files the request under its page, keyed by
  ``crawler.request_fingerprinter.fingerprint(request)``. It returns ``False`` (Scrapy then fires
  ``request_dropped``) for a duplicate: a page already pending or in flight, or already visited
  in a one-pass crawl. The links that led to it have paid it cash all the same (the spider
  middleware did that): the dupefilter never drops money. As with Scrapy, ``dont_filter=True``
  fetches a known page again (start requests excepted: a resume does not refetch its seeds), and
  a project's own ``DUPEFILTER_CLASS`` is asked (Scrapy's default one is the frontier itself).
* ``next_request()`` pops the best page among the download slots that have room (politeness), or
  returns ``None`` when every slot with pending pages is full: the engine asks again when a
  download finishes. The request carries ``meta["opic_id"]`` so that its response, retries and
  redirects find their page again, and an :class:`OutcomeErrback` around its errback so that a
  failure no middleware sees still settles the page.
* A request whose ``meta["opic_id"]`` names an in-flight page is a *retry* (same fingerprint:
  nothing moves) or a *redirect* (another fingerprint: the page's cash moves to the target).
* ``has_pending_requests()`` is true while pages wait; in a continuous crawl visited pages wait
  again at once, so the spider stays open until something else closes it
  (``CLOSESPIDER_PAGECOUNT``...).

State. The frontier (cash, history, statuses, keys, URLs) and one row per pending request live in
one sqlite file (:class:`~scrapy_opic.backends.sqlite.SqliteStore`): ``JOBDIR/opic.sqlite`` when a
job directory is set, which a rerun with the same ``JOBDIR`` resumes; otherwise
``OPIC_STATE_PATH`` or ``.scrapy/opic/<spider>.sqlite``, started afresh by each crawl and kept
for ``scrapy opic-export``. A snapshot is committed every ``OPIC_COMMIT_VISITS`` visits or
``OPIC_COMMIT_SECONDS`` seconds and at close; a crawl killed with SIGKILL resumes from the last
one, its in-flight pages pending again. With a JOBDIR, pending requests are sqlite rows (like
Scrapy's disk queues); up to ``OPIC_MEMORY_REQUESTS`` of them also stay in memory for fast pops,
the rest are read back from disk when their page is popped, so a frontier of millions of pending
requests holds only that many in memory. Without a JOBDIR they are kept in memory (like Scrapy's
memory queues). Requests that cannot be serialized (a lambda callback) are kept in
memory, with a warning, as Scrapy does.

Stats: the per-request counters (``opic/*``, ``scheduler/enqueued``, ``scheduler/dequeued``,
``dupefilter/filtered``) are added to Scrapy's stats collector at each commit and at close,
with the frontier's figures; a stats call per event would cost more than the pop itself.

``request.priority`` still matters: pages are served by priority first (higher first, as with
Scrapy's own scheduler, so Scrapy's retry and redirect priority adjustments keep their meaning)
and by cash within a priority. With the default priority 0 for every request, cash alone orders
the crawl.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import RFPDupeFilter
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object
from scrapy.utils.project import data_path
from scrapy.utils.request import request_from_dict

from .backends.sqlite import Saved, SqliteStore
from .logstats import OpicLogStats
from .opic.engine import OpicEngine
from .opic.frontier import DISCOVERED, IN_FLIGHT, PENDING, VISITED, Frontier
from .opic.window import parse_window
from .series import Series
from .settings import OpicSettings

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)

_RUNNING: WeakKeyDictionary = WeakKeyDictionary()

#: The frontier's payload of a page whose pending request is a row of the store (JOBDIR).
ON_DISK = "opic:on-disk"


class OutcomeErrback:
    """The errback of a request handed out by the scheduler: reports a failure that no
    middleware reported (an ``IgnoreRequest`` raised from a downloader middleware's
    ``process_response``, such as "max redirections reached", reaches only the request's
    errback), then behaves exactly as the request's own errback would (or as no errback: the
    failure goes on). Without it the page would stay in flight: its cash stuck and its
    download slot counted busy for good."""

    def __init__(self, scheduler: SchedulerBase, original: Any) -> None:
        self.scheduler = scheduler
        self.original = original

    def __call__(self, failure: Any) -> Any:
        request = getattr(failure, "request", None)
        if request is not None:
            self.scheduler.settle_failure(request, failure.value)
        return failure if self.original is None else self.original(failure)


def state_path(settings: Any, spider_name: str, create: bool = True) -> Path:
    """Where a spider's OPIC state lives (the export commands read it from there too).
    ``create=False`` (readers) creates no directory on the way."""
    jobdir = job_dir(settings) if create else settings.get("JOBDIR")
    if jobdir:
        return Path(jobdir) / "opic.sqlite"
    explicit = settings.get("OPIC_STATE_PATH")
    if explicit:
        return Path(str(explicit).replace("{spider}", spider_name))
    if create:
        return Path(data_path("opic", createdir=True)) / f"{spider_name}.sqlite"
    return _project_data_dir() / "opic" / f"{spider_name}.sqlite"


def state_location(settings: Any, spider_name: str) -> str:
    """Where the export commands read a spider's state: the file of :func:`state_path`, or
    with ``OPIC_STORE = "redis"`` the crawl in Redis (``OPIC_REDIS_URL#KEY``)."""
    s = OpicSettings.from_settings(settings)
    if s.store == "redis":
        return f"{s.redis_url}#{s.redis_key.replace('{spider}', spider_name)}"
    return str(state_path(settings, spider_name, create=False))


def _project_data_dir() -> Path:
    """Where ``data_path`` puts a project's data (``.scrapy`` beside scrapy.cfg, or the cfg's
    ``[datadir]``), without creating it as ``data_path`` would: readers create nothing."""
    from scrapy.utils.conf import closest_scrapy_cfg, get_config
    from scrapy.utils.project import inside_project

    if not inside_project():
        return Path(".scrapy")
    cfg = get_config()
    if cfg.has_option("datadir", "default"):
        return Path(cfg.get("datadir", "default"))
    scrapy_cfg = closest_scrapy_cfg()
    return Path(scrapy_cfg).parent.resolve() / ".scrapy" if scrapy_cfg else Path(".scrapy")


class SchedulerBase(BaseScheduler):
    """What the OPIC schedulers share, whatever holds the frontier: settings, the project's
    dupefilter, download-slot concurrency, event counters and the outcome methods the
    middlewares call (:meth:`settle_visit`, :meth:`settle_callback_error`,
    :meth:`settle_failure`)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        self.crawler = crawler
        self.settings = settings
        self.stats = crawler.stats
        self.fingerprinter = crawler.request_fingerprinter
        #: Counters of the per-request path (``opic/*``, ``scheduler/*``, ``dupefilter/filtered``)
        #: kept here and added to Scrapy's stats at each commit and at close: a stats call per
        #: event costs more than the rest of a pop.
        self.counts: defaultdict[str, int] = defaultdict(int)
        self._warned_unserializable = False
        self.df: Any = None  # a project's DUPEFILTER_CLASS, when it is not Scrapy's default
        self._dupefilter_debug = False
        self._logged_duplicate = False
        self._extra: deque[Request] = deque()  # dont_filter fetches of pending/in-flight pages
        self._started = time.monotonic()
        self._logstats: OpicLogStats | None = None
        self._default_concurrency = 8  # CONCURRENT_REQUESTS_PER_DOMAIN (see from_crawler)
        self._slot_concurrency: dict[str, int] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SchedulerBase:
        store = str(crawler.settings.get("OPIC_STORE") or "sqlite")
        if cls is OpicScheduler and store != "sqlite":
            # OPIC_STORE picks the implementation behind SCHEDULER = "scrapy_opic.OpicScheduler".
            if store == "redis":
                from .redis_scheduler import RedisScheduler

                impl: Any = RedisScheduler
            else:
                impl = load_object(store)
            if not (isinstance(impl, type) and issubclass(impl, SchedulerBase)):
                raise ValueError(
                    f"OPIC_STORE must be 'sqlite', 'redis' or the path of a scheduler class "
                    f"derived from scrapy_opic.scheduler.SchedulerBase, not {store!r}"
                )
            return impl.from_crawler(crawler)
        scheduler = cls(crawler, OpicSettings.from_settings(crawler.settings))
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
    def of(crawler: Crawler) -> SchedulerBase | None:
        """The OPIC scheduler running for ``crawler`` (the middlewares' way in)."""
        return _RUNNING.get(crawler)

    # -- outcomes (called by the middlewares) -----------------------------------------------
    def settle_visit(
        self,
        request: Request,
        followed: list[Request],
        weights: list[float] | None,
        boosts: list[float] | None,
        virtual_weight: float,
    ) -> float | None:
        """The visit of ``request``'s page, which links to ``followed`` (the requests its
        callback yielded that Scrapy will follow): one payout over them, with ``weights``,
        ``boosts`` and ``virtual_weight`` as in :meth:`OpicEngine.visit`. Returns the page's
        importance just after the visit if ``OPIC_ITEM_FIELD`` asks for it (else, or if the
        page was not in flight, ``None``)."""
        raise NotImplementedError

    def settle_callback_error(self, request: Request) -> None:
        """The callback of ``request``'s page raised before yielding anything: a visit with no
        out-links."""
        raise NotImplementedError

    def settle_failure(self, request: Request, exception: BaseException) -> None:
        """The outcome of an in-flight request that ends in ``exception`` instead of a response
        to parse (the downloader middleware's and the errback's one rule). An HTTP error status
        was fetched: a visit with no out-links, like a download error. Any other
        ``IgnoreRequest`` (robots.txt, too many redirects...) fetched nothing: the page is given
        up and its cash goes to the virtual page. A page no longer in flight is left alone."""
        raise NotImplementedError

    @staticmethod
    def _gives_up(exception: BaseException) -> bool:
        return isinstance(exception, IgnoreRequest) and not isinstance(exception, HttpError)

    def status_line(self) -> str:
        """The periodic OPIC log line (:class:`~scrapy_opic.logstats.OpicLogStats`)."""
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------
    def _slot(self, request: Request) -> Any:
        return self.crawler.engine.downloader.get_slot_key(request)

    def _concurrency(self, slot: Any) -> int:
        downloader_slot = self.crawler.engine.downloader.slots.get(slot)
        if downloader_slot is not None:
            return downloader_slot.concurrency
        return self._slot_concurrency.get(slot, self._default_concurrency)

    def _warn_unserializable(self, request: Request, exc: BaseException, where: str) -> None:
        if not self._warned_unserializable:
            self._warned_unserializable = True
            logger.warning(
                "Unable to serialize request %s (%s): %s. (This message is logged once.)",
                request,
                exc,
                where,
            )
        self.counts["opic/unserializable"] += 1

    def _count_enqueued(self, where: str) -> None:
        self.counts["scheduler/enqueued"] += 1
        self.counts[f"scheduler/enqueued/{where}"] += 1

    def _log_duplicate(self, request: Request) -> None:
        """What Scrapy's RFPDupeFilter says of a duplicate: the ``dupefilter/filtered`` stat and
        a debug line (the first only, or all with DUPEFILTER_DEBUG)."""
        if self.df is not None:
            self.df.log(request, self.spider)
            return
        self.counts["dupefilter/filtered"] += 1
        if self._dupefilter_debug or not self._logged_duplicate:
            self._logged_duplicate = True
            logger.debug(
                "Filtered duplicate request: %(request)s"
                + ("" if self._dupefilter_debug else " - no more duplicates will be shown"),
                {"request": request},
                extra={"spider": self.spider},
            )

    def _export(self) -> None:
        """``OPIC_EXPORT``: write each target from the state just committed. A failed export is
        logged, never raised: the crawl's state is safe on disk and ``scrapy opic-export`` can
        redo it."""
        if not self.settings.export:
            return
        from .export import open_state, write_export

        for out, options in self.settings.export.items():
            target = out.replace("{spider}", self.spider.name)
            try:
                with open_state(self.state_location()) as state:
                    n = write_export(state, target, **options)
            except Exception as exc:
                logger.error("OPIC export to %s failed: %s", target, exc)
                self.stats.inc_value("opic/export_failed")
            else:
                logger.info("OPIC importance of %d rows exported to %s", n, target)

    def state_location(self) -> Any:
        """Where the export commands read this crawl's state (a path, or a Redis location)."""
        raise NotImplementedError

    def _flush_counts(self) -> None:
        counts, self.counts = self.counts, defaultdict(int)
        for name, n in counts.items():
            self.stats.inc_value(name, n)


class OpicScheduler(SchedulerBase):
    """Greedy OPIC scheduling with politeness, on the embedded sqlite store (or, with
    ``OPIC_STORE``, the scheduler of another store: see :meth:`SchedulerBase.from_crawler`)."""

    def __init__(self, crawler: Crawler, settings: OpicSettings) -> None:
        super().__init__(crawler, settings)
        self.frontier: Frontier | None = None
        self.store: SqliteStore | None = None
        self.urls: list[str] = []
        self._persist = bool(job_dir(crawler.settings))  # request rows only when resumable
        self._where = "disk" if self._persist else "memory"
        self._dequeued_where = f"scheduler/dequeued/{self._where}"
        self._cached: set[int] = set()  # pending pages whose request is also in memory (JOBDIR)
        self._last_commit = (0, time.monotonic())
        self.series = Series()
        self._elapsed_before = 0.0  # crawl time of the runs this one resumes
        self._next_point = 0  # visit count at which the next series point is due

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, spider: Spider) -> Any:
        self.spider = spider
        s = self.settings
        path = state_path(self.crawler.settings, spider.name)
        in_use = {
            other.store.path.resolve()
            for other in _RUNNING.values()
            if isinstance(other, OpicScheduler)
        }
        if path.resolve() in in_use:
            # Another crawl in this process (the same spider twice) writes that state: two
            # writers would overwrite each other's snapshots. This one gets a file of its own.
            k = 2
            while (alt := path.with_name(f"{path.stem}-{k}{path.suffix}")).resolve() in in_use:
                k += 1
            logger.warning(
                "OPIC state %s is in use by another crawl in this process; this crawl keeps its "
                "state in %s (set OPIC_STATE_PATH or JOBDIR per crawl to choose)",
                path,
                alt,
            )
            path = alt
        self.store = SqliteStore(path)
        saved = self.store.load() if job_dir(self.crawler.settings) else None
        resumed = saved is not None
        if resumed:
            self._resume(saved)
        else:
            self.store.clear()
            engine = OpicEngine(epsilon=s.epsilon, refresh=s.refresh, window=parse_window(s.window))
            self.frontier = Frontier(engine, s.strategy, s.continuous, s.seed)
        self.frontier.on_dropped = self._dropped
        _RUNNING[self.crawler] = self
        if s.logstats_interval > 0:
            self._logstats = OpicLogStats(self, s.logstats_interval)
            self._logstats.start()
        opened = self.df.open() if self.df is not None else None
        logger.info(
            "OPIC scheduler (%s, epsilon=%s, refresh=%s, window=%s, %s crawl), state %s%s",
            s.strategy,
            s.epsilon,
            s.refresh,
            s.window,
            "continuous" if s.continuous else "one-pass",
            path,
            " (resumed)" if resumed else "",
        )
        return opened

    def _resume(self, saved: Saved) -> None:
        s = self.settings
        engine, status = saved.engine, saved.status
        self.urls = saved.urls
        self.series = Series.from_list(saved.meta.get("series", []))
        self._elapsed_before = self.series.last_elapsed()
        payloads: dict[int, Any] = {}
        slots: dict[int, Any] = {}
        # The requests stay on disk: only their page ids and slots come back into memory.
        for i, (priority, slot, _data) in self.store.requests():
            payloads[i] = ON_DISK
            slots[i] = (priority, slot)
        self.frontier = Frontier.restore(
            engine, status, payloads, slots, s.strategy, s.continuous, s.seed
        )
        back = sum(1 for st in status if st == IN_FLIGHT)
        total = self.frontier.total_cash()
        logger.info(
            "OPIC state resumed: %d pages known, %d pending (%d were in flight), %d visited; "
            "total cash %.12f",
            engine.n,
            self.frontier.counts[PENDING],
            back,
            self.frontier.counts[VISITED],
            total,
        )
        if abs(total - 1.0) > 1e-6:
            logger.warning("OPIC state %s: total cash is %.12f, not 1", self.store.path, total)

    def close(self, reason: str) -> Any:
        if self._logstats is not None:
            self._logstats.stop()
        self.commit(closing=True)
        self.update_stats()
        total = self.frontier.total_cash()
        logger.info(
            "OPIC scheduler closed (%s): %d pages known, %d visited, total cash %.12f",
            reason,
            self.frontier.engine.n,
            self.frontier.counts[VISITED],
            total,
        )
        self.stats.set_value("opic/total_cash", total)
        try:
            self.store.close()
        finally:
            _RUNNING.pop(self.crawler, None)
        try:
            self._export()
        finally:
            closed = self.df.close(reason) if self.df is not None else None
        return closed

    def commit(self, closing: bool = False) -> None:
        """Write a snapshot of the OPIC state to the store (one sqlite transaction), with a point
        of the crawl's time series (what ``scrapy opic-report`` plots)."""
        self._record_point(last=closing)
        frontier, e = self.frontier, self.frontier.engine
        meta = {
            "spider": self.spider.name,
            "settings": self.settings.as_dict(),
            "series": self.series.as_list(),
        }
        # Periodic commits do not wait for the disk; the last one, at close, does.
        self.store.commit(frontier, self.urls, meta, blocking=closing)
        self._last_commit = (e.visit_count, time.monotonic())

    def _record_point(self, last: bool = False) -> None:
        """One point of the time series (O(1)); the series thins itself to a bounded length.
        ``last``: the crawl's final point, kept whatever the thinning stride."""
        frontier, e = self.frontier, self.frontier.engine
        if self.series.points and self.series.points[-1][1] == e.visit_count:
            return
        self.series.add(
            force=last,
            elapsed=self._elapsed_before + time.monotonic() - self._started,
            visits=e.visit_count,
            G=e.G,
            error_factor=e.error_factor,
            pages=e.n,
            fetched=e.n - e.n_unfetched,
            pending=frontier.counts[PENDING],
            virtual_cash=e.virtual_cash,
        )
        # About 50 points per tenfold growth of the crawl, whatever its length.
        self._next_point = e.visit_count + max(10, e.visit_count // 50)

    def _maybe_commit(self) -> None:
        visits, when = self._last_commit
        e = self.frontier.engine
        if e.visit_count >= self._next_point:
            self._record_point()
        if (
            e.visit_count - visits >= self.settings.commit_visits
            or time.monotonic() - when >= self.settings.commit_seconds
        ):
            self.commit()
            self.update_stats()

    def settle_failure(self, request: Request, exception: BaseException) -> None:
        i = self._in_flight(request)
        if i is None:
            return
        if self._gives_up(exception):
            self.frontier.forfeit(i)
            self.counts["opic/ignored"] += 1
        else:
            self.frontier.fail(i)
            self.counts["opic/failed"] += 1

    def _in_flight(self, request: Request) -> int | None:
        i = request.meta.get("opic_id")
        if i is None or self.frontier is None or self.frontier.status[i] != IN_FLIGHT:
            return None
        return i

    def settle_visit(
        self,
        request: Request,
        followed: list[Request],
        weights: list[float] | None,
        boosts: list[float] | None,
        virtual_weight: float,
    ) -> float | None:
        i = self._in_flight(request)
        if i is None:
            return None
        children = [self.page_of(o) for o in followed]
        self.frontier.complete(i, children, weights, boosts, virtual_weight)
        self.counts["opic/visits"] += 1
        return self.frontier.engine.importance_of(i) if self.settings.item_field else None

    def settle_callback_error(self, request: Request) -> None:
        i = self._in_flight(request)
        if i is not None:
            self.frontier.fail(i)
            self.counts["opic/failed"] += 1

    def status_line(self) -> str:
        frontier = self.frontier
        e = frontier.engine
        top = self.top_page()
        return (
            f"OPIC: {e.n - e.n_unfetched} pages fetched ({e.visit_count} visits), {e.n} known, "
            f"{len(frontier)} pending; G={e.G:.4f}, error factor 1/G={e.error_factor:.4f}, "
            f"virtual cash {e.virtual_cash:.4f}; top page: {top[0] if top else '-'}"
            + (f" ({top[1]:.4f})" if top else "")
        )

    def state_location(self) -> Path:
        return self.store.path

    def _dropped(self, i: int) -> None:
        """Page ``i`` will not be fetched again: forget its request."""
        self._cached.discard(i)
        if self._persist:
            self.store.del_request(i)

    # -- pages -------------------------------------------------------------------------------
    def page_of(self, request: Request) -> int:
        """The page id of ``request`` (created if new, its URL recorded)."""
        frontier = self.frontier
        before = frontier.engine.n
        i = frontier.discover(self.fingerprinter.fingerprint(request))
        if frontier.engine.n > before:
            self.urls.append(request.url)
        return i

    # -- the scheduler interface -----------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return len(self.frontier) > 0 or bool(self._extra)

    def __len__(self) -> int:
        return len(self.frontier) + len(self._extra)

    def _has_room(self, slot: Any) -> bool:
        # A slot has room while it holds fewer than two rounds of its concurrency: one round
        # downloading, one ready for the moment a download finishes, as Scrapy's own queues
        # keep; more would clog the downloader with one host while others wait. Counted by the
        # frontier from pop to outcome: the downloader's own count lags behind a run of pops,
        # since a request reaches it only after the downloader middlewares.
        return self.frontier.in_flight(slot) < 2 * self._concurrency(slot)

    def _keep(self, i: int, request: Request, slot: Any) -> None:
        """With a JOBDIR, write the pending request of page ``i`` to disk: a sqlite row
        ``(priority, slot, request dict)``. Up to ``OPIC_MEMORY_REQUESTS`` pending requests
        also stay in memory (a pop from memory is ~20x faster than a read of the row); beyond
        that the page's payload in the frontier is :data:`ON_DISK`, so that a frontier of
        millions of pending requests holds only that many in memory. Without a JOBDIR (or for
        a request that cannot be serialized) the frontier keeps the request object, as
        Scrapy's memory queues do."""
        if not self._persist:
            return
        try:
            row = (request.priority, slot, request.to_dict(spider=self.spider))
            self.store.put_request(i, row)
            if i in self._cached or len(self._cached) < self.settings.memory_requests:
                self._cached.add(i)
            else:
                self.frontier.payloads[i] = ON_DISK
        except (ValueError, TypeError, AttributeError, pickle.PicklingError) as exc:
            # to_dict refuses a callback that is not a spider method (ValueError); pickle
            # refuses a lock or a lambda in meta or cb_kwargs (TypeError, PicklingError...).
            self._warn_unserializable(request, exc, "kept in memory, it will not survive a restart")

    def enqueue_request(self, request: Request) -> bool:
        frontier = self.frontier
        if isinstance(request.errback, OutcomeErrback):  # a retry or redirect copies it
            request.errback = request.errback.original
        # The page id of the request this one came from (a retry or redirect copies its meta);
        # taken out, so that no request in a queue carries a stale id.
        source = request.meta.pop("opic_id", None)
        i = self.page_of(request)
        if source is not None and frontier.status[source] == IN_FLIGHT:
            if source == i:  # a retry of the page in flight
                slot = self._slot(request)
                frontier.retry(i, request, slot, request.priority)
                self._keep(i, request, slot)
                self.counts["opic/retried"] += 1
                self._count_enqueued(self._where)
                return True
            # A redirect: the in-flight page's cash moves to the target.
            slot = self._slot(request)
            target, scheduled = frontier.redirect(
                source, frontier.engine.key_of(i), request, slot, request.priority
            )
            self.counts["opic/redirected"] += 1
            if scheduled:
                self._keep(target, request, slot)
                self._count_enqueued(self._where)
            return scheduled
        status = frontier.status[i]
        # dont_filter: fetch even a known page, as Scrapy does. Not for start requests (Scrapy
        # marks start_urls dont_filter): a resumed crawl must not fetch its seeds again.
        again = request.dont_filter and not request.meta.get("is_start_request")
        fresh = status == DISCOVERED or (status == VISITED and (frontier.continuous or again))
        # The project's own dupefilter, if any, may refuse it (never a dont_filter request).
        if (
            fresh
            and self.df is not None
            and not request.dont_filter
            and self.df.request_seen(request)
        ):
            self.df.log(request, self.spider)
            self.counts["opic/filtered"] += 1
            if status == DISCOVERED:  # never to be fetched: its cash goes to the virtual page
                frontier.forfeit(i)
            return False
        if fresh:
            slot = self._slot(request)  # (only here: duplicates, the common case, need none)
            if frontier.schedule(
                frontier.engine.key_of(i), request, slot, request.priority, again=again
            ):
                self._keep(i, request, slot)
                self.counts["opic/enqueued"] += 1
                self._count_enqueued(self._where)
                return True
        if again:
            # Its page is pending or in flight: Scrapy would fetch it once more all the same.
            # Such a fetch pays nothing (the page's cash goes with its own fetch).
            self._extra.append(request)
            self.counts["opic/extra_fetches"] += 1
            self.counts["scheduler/enqueued"] += 1
            self.counts["scheduler/enqueued/memory"] += 1
            return True
        self.counts["opic/duplicates"] += 1
        self._log_duplicate(request)
        return False

    def next_request(self) -> Request | None:
        self._maybe_commit()
        if self._extra:  # dont_filter requests for pages already pending or in flight
            self.counts["scheduler/dequeued"] += 1
            self.counts["scheduler/dequeued/memory"] += 1
            return self._extra.popleft()
        got = self.frontier.pop(self._has_room)
        if got is None:
            return None
        i, request = got
        if not self.settings.continuous:  # (a continuous crawl keeps the request for later)
            self._cached.discard(i)
        if request is ON_DISK:
            _priority, _slot, data = self.store.get_request(i)
            request = request_from_dict(data, spider=self.spider)
        elif self.settings.continuous:
            request = request.replace()  # the stored request is fetched again later
        request.meta["opic_id"] = i
        request.errback = OutcomeErrback(self, request.errback)
        self.counts["opic/popped"] += 1
        self.counts["scheduler/dequeued"] += 1
        self.counts[self._dequeued_where] += 1
        return request

    # -- stats -----------------------------------------------------------------------------
    def update_stats(self) -> None:
        """Copy the frontier's figures and the event counters into Scrapy's stats
        (``opic/...``, ``scheduler/...``). O(pages): called at each commit and at close, not per
        request."""
        self._flush_counts()
        for name, value in self.frontier.stats().items():
            self.stats.set_value(f"opic/{name}", value)
        top = self.top_page()
        if top is not None:
            self.stats.set_value("opic/top_page", top[0])
            self.stats.set_value("opic/top_importance", top[1])

    def top_page(self) -> tuple[str, float] | None:
        """The URL and importance of the most important page now. O(pages)."""
        engine = self.frontier.engine
        if not engine.n:
            return None
        x = engine.importance()
        top = int(x.argmax())
        return (self.urls[top] if top < len(self.urls) else str(top)), float(x[top])
