"""``RedisScheduler``: the OPIC scheduler of ``OPIC_STORE = "redis"``, one frontier shared by
every Scrapy process that runs the crawl, on one machine or many.

Set ``OPIC_STORE = "redis"`` (with ``SCHEDULER = "scrapy_opic.OpicScheduler"`` or the add-on, as
usual) and ``OPIC_REDIS_URL``; every process started with the same ``OPIC_REDIS_KEY`` joins the
same crawl. The frontier is a :class:`~scrapy_opic.backends.redis.RedisFrontier`: each pop,
visit and transfer is one atomic Lua call on the server.

Contract with Scrapy's engine (differences from :class:`~scrapy_opic.scheduler.OpicScheduler`):

* ``next_request()`` leases the best page of the whole crawl among download slots this process
  has room for (politeness per process, as each Scrapy process has its own downloader). The
  lease is renewed every ``OPIC_REDIS_LEASE / 3`` seconds while the page is in flight; a process
  killed with SIGKILL stops renewing, and its pages go back to the frontier, cash intact, once
  their leases expire.
* The spider middleware's visit pays the page's links *and* schedules them in the same atomic
  call (it carries their serialized requests), so a process killed right after a visit loses
  nothing, and ``enqueue_request`` answers for those requests from the visit's codes without
  another round trip. A fetched page costs two round trips: its pop and its visit.
* Requests that do not come from a visit (start requests, requests from ``spider_idle``, retries,
  redirects) cost one round trip each.
* ``has_pending_requests()`` is true while any page of the crawl is pending or leased (by any
  process): a process stays open while others still fetch pages that may link to new ones, and
  the crawl ends when the frontier is empty and no lease is out (a continuous crawl never ends
  by itself).
* ``close()`` hands the pages this process still holds back to the frontier: a process can leave
  a running crawl at any time (``CLOSESPIDER_*``, Ctrl-C) and others go on.

Requests travel through Redis as pickled ``Request.to_dict()``, like Scrapy's disk queues, so
their callbacks must be spider methods. A request that cannot be serialized (a lambda callback)
cannot be shared: this process fetches it itself, outside the OPIC order, and its page's cash
stays where it is (it is never lost, but that page does not pay its links).
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy.utils.request import request_from_dict
from twisted.internet import task

from .backends.redis import (
    DUPLICATE,
    NEEDS_REQUEST,
    SCHEDULED,
    Link,
    RedisFrontier,
    masked_url,
)
from .logstats import OpicLogStats
from .scheduler import _RUNNING, OutcomeErrback, SchedulerBase

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Request, Spider

logger = logging.getLogger(__name__)

#: Fingerprints a process remembers as no longer new (scheduled or fetched by someone): a visit
#: sends no request bytes for them. Bounded: the set is emptied when it reaches this size
#: (~85 bytes per entry), which only costs some serialization afterwards.
KNOWN_LIMIT = 500_000


class RedisScheduler(SchedulerBase):
    """Greedy OPIC scheduling over a frontier in Redis (see the module docstring)."""

    def __init__(self, crawler: Any, settings: Any) -> None:
        super().__init__(crawler, settings)
        self.frontier: RedisFrontier | None = None
        #: This process in the crawl: host, pid and a random tag (a pid can be reused).
        self._tag = uuid.uuid4().hex[:8]
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{self._tag}"
        self._seq = 0  # lease tokens are <tag>.<seq>: short, since a page keeps its last one
        self._leased: dict[bytes, tuple[str, Any]] = {}  # fp -> (lease token, download slot)
        self._slot_leases: dict[Any, int] = {}  # download slot -> pages leased here
        #: The schedule code of each request the visit that paid it already decided.
        self._codes: WeakKeyDictionary[Request, int] = WeakKeyDictionary()
        self._known: set[bytes] = set()
        self._figures: dict[str, float] = {}
        self._heartbeat: task.LoopingCall | None = None
        self._last_point = 0.0
        self._crawl_started = 0.0

    @classmethod
    def from_crawler(cls, crawler: Any) -> RedisScheduler:
        try:
            import redis  # noqa: F401
        except ImportError:
            raise ImportError(
                "OPIC_STORE = 'redis' needs the redis package: pip install 'scrapy-opic[redis]'"
            ) from None
        return super().from_crawler(crawler)

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, spider: Spider) -> Any:
        import redis

        self.spider = spider
        s = self.settings
        if s.strategy != "greedy":
            raise ValueError(
                f"OPIC_STORE = 'redis' selects pages greedily: OPIC_STRATEGY {s.strategy!r} "
                "is embedded-store only"
            )
        key = s.redis_key.replace("{spider}", spider.name)
        client = redis.Redis.from_url(s.redis_url)
        self.frontier = RedisFrontier(client, key, lease=s.redis_lease)
        if s.redis_reset:
            n = self.frontier.clear()
            logger.info("OPIC_REDIS_RESET: deleted the %d keys of the crawl %r", n, key)
        created = self.frontier.open(
            epsilon=s.epsilon, refresh=s.refresh, continuous=s.continuous, window=s.window
        )
        if s.item_field and not s.window.startswith("unbounded"):
            logger.warning(
                "OPIC_ITEM_FIELD with the Redis store needs an unbounded window (a windowed "
                "estimate is normalised over all pages): items will not carry importance"
            )
        if created:
            self.frontier.set_meta(
                {"spider": spider.name, "settings": s.as_dict(), "started": time.time()}
            )
        self._crawl_started = float(self.frontier.meta().get("started", time.time()))
        self._figures = self.frontier.status()
        self.frontier.heartbeat(self.worker)
        _RUNNING[self.crawler] = self
        # Renew the leases well before they expire (and report figures now and then).
        self._heartbeat = task.LoopingCall(self._beat)
        self._heartbeat.start(min(s.redis_lease / 3.0, s.commit_seconds), now=False)
        if s.logstats_interval > 0:
            self._logstats = OpicLogStats(self, s.logstats_interval)
            self._logstats.start()
        opened = self.df.open() if self.df is not None else None
        logger.info(
            "OPIC scheduler on Redis %s, crawl %r (%s, epsilon=%s, refresh=%s, window=%s, %s "
            "crawl), worker %s: %s; %d pages known, %d pending, %d leased",
            masked_url(s.redis_url),
            key,
            s.strategy,
            s.epsilon,
            s.refresh,
            s.window,
            "continuous" if s.continuous else "one-pass",
            self.worker,
            "started the crawl" if created else "joined the crawl",
            self._figures["pages"],
            self._figures["pending"],
            self._figures["leases"],
        )
        return opened

    def close(self, reason: str) -> Any:
        if self._logstats is not None:
            self._logstats.stop()
        if self._heartbeat is not None and self._heartbeat.running:
            self._heartbeat.stop()
        frontier = self.frontier
        try:
            self._leave(reason)
        finally:
            _RUNNING.pop(self.crawler, None)
            try:
                self._export()
            finally:
                closed = self.df.close(reason) if self.df is not None else None
                frontier.client.close()
        return closed

    def _leave(self, reason: str) -> None:
        """Hand this process's leases back, record its stats and leave the crawl. (A Redis
        error here still lets ``close`` run the export and close the dupefilter.)"""
        frontier = self.frontier
        if self._leased:  # leaving: what this process still holds goes back, cash intact
            back = frontier.release((fp, token) for fp, (token, _slot) in self._leased.items())
            self._leased.clear()
            self._slot_leases.clear()
            logger.info("OPIC: %d leased pages handed back to the crawl", back)
        self.update_stats()
        frontier.leave(self.worker)
        f = self._figures
        logger.info(
            "OPIC scheduler closed (%s): the crawl has %d pages known, %d visited, %d "
            "pending, %d leased; this process made %d Redis round trips",
            reason,
            f["pages"],
            f["visits"],
            f["pending"],
            f["leases"],
            frontier.round_trips,
        )

    def state_location(self) -> str:
        return f"{self.settings.redis_url}#{self.frontier.key}"

    def _beat(self) -> None:
        """Every ``min(lease / 3, OPIC_COMMIT_SECONDS)``: renew this process's leases, and every
        ``OPIC_COMMIT_SECONDS`` update the stats and add a point to the crawl's time series."""
        try:
            if self._leased:
                self.frontier.renew((fp, token) for fp, (token, _slot) in self._leased.items())
            self.frontier.heartbeat(self.worker)
            now = time.monotonic()
            if now - self._last_point >= self.settings.commit_seconds:
                self._last_point = now
                self.update_stats()
                f = self._figures
                self.frontier.add_point(
                    {
                        "elapsed": time.time() - self._crawl_started,
                        "visits": f["visits"],
                        "G": f["G"],
                        "error_factor": f["error_factor"],
                        "pages": f["pages"],
                        "fetched": f["fetched"],
                        "pending": f["pending"],
                        "virtual_cash": f["virtual_cash"],
                    }
                )
        except Exception:  # a Redis hiccup must not stop the loop: the next beat retries
            logger.exception("OPIC: lease renewal failed (will retry)")

    # -- requests to and from Redis -----------------------------------------------------------
    def _serialize(self, request: Request) -> bytes | None:
        try:
            return pickle.dumps(request.to_dict(spider=self.spider), protocol=4)
        except (ValueError, TypeError, AttributeError, pickle.PicklingError) as exc:
            # to_dict refuses a callback that is not a spider method (ValueError); pickle
            # refuses a lock or a lambda in meta or cb_kwargs (TypeError, PicklingError...).
            self._warn_unserializable(
                request, exc, "it cannot be shared through Redis; this process fetches it itself"
            )
            return None

    def _remember(self, fp: bytes) -> None:
        if len(self._known) >= KNOWN_LIMIT:
            self._known.clear()
        self._known.add(fp)

    def _end(self, fp: bytes) -> tuple[str, Any] | None:
        """This process's lease of ``fp`` ends (outcome reported): returns (token, slot)."""
        lease = self._leased.pop(fp, None)
        if lease is not None:
            slot = lease[1]
            n = self._slot_leases.get(slot, 0) - 1
            if n > 0:
                self._slot_leases[slot] = n
            else:
                self._slot_leases.pop(slot, None)
        return lease

    def _lease_of(self, request: Request) -> tuple[bytes, str] | None:
        """(fingerprint, token) of the lease ``request`` was handed out under, if this process
        still holds it. A request whose lease lapsed, and whose page this process then popped
        again under a new token, is not the holder: its outcome is ignored here."""
        fp = request.meta.get("opic_id")
        lease = self._leased.get(fp) if isinstance(fp, bytes) else None
        if lease is None or lease[0] != request.meta.get("opic_lease"):
            return None
        return fp, lease[0]

    # -- outcomes -------------------------------------------------------------------------------
    def settle_visit(
        self,
        request: Request,
        followed: list[Request],
        weights: list[float] | None,
        boosts: list[float] | None,
        virtual_weight: float,
    ) -> float | None:
        held = self._lease_of(request)
        if held is None:
            return None
        fp, token = held
        links = []
        for k, o in enumerate(followed):
            cfp = self.fingerprinter.fingerprint(o)
            again = bool(o.dont_filter and not o.meta.get("is_start_request"))
            data = b""
            slot = ""
            if again or cfp not in self._known:
                data = self._serialize(o) or b""
                slot = self._slot(o) if data else ""
            links.append(
                Link(
                    cfp,
                    o.url,
                    weights[k] if weights is not None else 1.0,
                    boosts[k] if boosts is not None else 0.0,
                    again,
                    o.priority,
                    slot,
                    data,
                )
            )
        # The lease ends here whatever the call does: if Redis fails now, the page is not renewed
        # any more and goes back to the frontier when its lease expires.
        self._end(fp)
        visited = self.frontier.visit(
            fp, token, links, weights is None, boosts is not None, virtual_weight
        )
        if not visited.ok:  # the lease had expired: another process fetches the page
            self.counts["opic/stale"] += 1
            return None
        self.counts["opic/visits"] += 1
        for o, link, code in zip(followed, links, visited.codes):
            self._codes[o] = code
            if code != NEEDS_REQUEST:
                self._remember(link.fp)
        return visited.importance if self.settings.item_field else None

    def settle_callback_error(self, request: Request) -> None:
        held = self._lease_of(request)
        if held is not None:
            self._end(held[0])
            if self.frontier.fail(*held):
                self.counts["opic/failed"] += 1

    def settle_failure(self, request: Request, exception: BaseException) -> None:
        held = self._lease_of(request)
        if held is None:
            return
        self._end(held[0])
        if self._gives_up(exception):
            if self.frontier.forfeit(*held):
                self.counts["opic/ignored"] += 1
        elif self.frontier.fail(*held):
            self.counts["opic/failed"] += 1

    # -- the scheduler interface -----------------------------------------------------------
    def has_pending_requests(self) -> bool:
        if self._extra:
            return True
        self._figures = f = self.frontier.status()
        return f["pending"] > 0 or f["leases"] > 0

    def __len__(self) -> int:
        """Pages pending in the whole crawl, as of the last figures read (plus this process's
        own extra fetches)."""
        return int(self._figures.get("pending", 0)) + len(self._extra)

    def enqueue_request(self, request: Request) -> bool:
        frontier = self.frontier
        if isinstance(request.errback, OutcomeErrback):  # a retry or redirect copies it
            request.errback = request.errback.original
        held = self._lease_of(request)
        source = request.meta.pop("opic_id", None)
        request.meta.pop("opic_lease", None)
        fp = self.fingerprinter.fingerprint(request)
        if held is not None:
            return self._follow_up(request, source, held[1], fp)
        code = self._codes.pop(request, None)
        again = bool(request.dont_filter and not request.meta.get("is_start_request"))
        if code == SCHEDULED:  # scheduled by the visit that paid it
            if self.df is not None and not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.spider)
                self.counts["opic/filtered"] += 1
                frontier.forfeit(fp, "", pending=True)
                return False
            self.counts["opic/enqueued"] += 1
            self._count_enqueued("redis")
            return True
        if code is None or code == NEEDS_REQUEST:
            # Not from a visit (a start request, spider_idle...): schedule it now.
            if self.df is not None and not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.spider)
                self.counts["opic/filtered"] += 1
                frontier.forfeit(fp, "")  # only if it is new: its cash to the virtual page
                return False
            data = self._serialize(request)
            if data is None:
                self._extra.append(request)
                self._count_enqueued("memory")
                return True
            code = frontier.schedule(
                [(fp, request.url, request.priority, self._slot(request), data)], again=again
            )[0]
            self._remember(fp)
            if code == SCHEDULED:
                self.counts["opic/enqueued"] += 1
                self._count_enqueued("redis")
                return True
        if again and code == DUPLICATE:
            # Its page is pending or in flight: Scrapy would fetch it once more all the same.
            # Such a fetch pays nothing (the page's cash goes with its own fetch).
            self._extra.append(request)
            self.counts["opic/extra_fetches"] += 1
            self._count_enqueued("memory")
            return True
        self.counts["opic/duplicates"] += 1
        self._log_duplicate(request)
        return False

    def _follow_up(self, request: Request, source: bytes, token: str, fp: bytes) -> bool:
        """A retry (same fingerprint) or a redirect (another one) of a page leased here."""
        data = self._serialize(request)
        self._end(source)
        if data is None:  # cannot go back to Redis: fetched here, the page's cash forfeited
            self.frontier.forfeit(source, token)
            self._extra.append(request)
            self._count_enqueued("memory")
            return True
        slot = self._slot(request)
        if source == fp:
            ok = self.frontier.retry(fp, token, request.priority, slot, data)
            if ok:
                self.counts["opic/retried"] += 1
                self._count_enqueued("redis")
            return ok
        ok, code = self.frontier.redirect(
            source, token, fp, request.url, request.priority, slot, data
        )
        if ok:
            self.counts["opic/redirected"] += 1
        self._remember(fp)
        if code == SCHEDULED:
            self._count_enqueued("redis")
            return True
        return False

    def next_request(self) -> Request | None:
        if self._extra:  # dont_filter requests for pages already pending or in flight
            self.counts["scheduler/dequeued"] += 1
            self.counts["scheduler/dequeued/memory"] += 1
            return self._extra.popleft()
        full = [slot for slot, n in self._slot_leases.items() if n >= 2 * self._concurrency(slot)]
        for _attempt in range(10):
            self._seq += 1
            token = f"{self._tag}.{self._seq:x}"
            got = self.frontier.pop(token, full)
            if got is None:
                return None
            try:
                request = request_from_dict(pickle.loads(got.data), spider=self.spider)
            except Exception as exc:
                # Written by a process running other spider code (a renamed callback...):
                # this page cannot be fetched here; its cash goes to the virtual page.
                logger.error("OPIC: cannot rebuild a request from Redis (%s): page given up", exc)
                self.frontier.forfeit(got.fp, token)
                self.counts["opic/undecodable"] += 1
                continue
            self._end(got.fp)  # a page whose lease lapsed here, popped again: one lease
            self._leased[got.fp] = (token, got.slot)
            self._slot_leases[got.slot] = self._slot_leases.get(got.slot, 0) + 1
            request.meta["opic_id"] = got.fp
            request.meta["opic_lease"] = token
            request.errback = OutcomeErrback(self, request.errback)
            self.counts["opic/popped"] += 1
            self.counts["scheduler/dequeued"] += 1
            self.counts["scheduler/dequeued/redis"] += 1
            return request
        return None

    # -- stats -----------------------------------------------------------------------------
    def update_stats(self) -> None:
        """This process's event counters (``opic/visits``, ``opic/popped``...) and the whole
        crawl's figures (``opic/crawl/pages``, ``opic/crawl/visits``...) into Scrapy's stats
        (one round trip: called by the heartbeat and at close, not per request)."""
        self._flush_counts()
        self._figures = self.frontier.status()
        # The whole crawl's figures (every process) apart from this process's own counters.
        for name, value in self._figures.items():
            self.stats.set_value(f"opic/crawl/{name}", value)
        self.stats.set_value("opic/round_trips", self.frontier.round_trips)

    def status_line(self) -> str:
        f = self._figures = self.frontier.status()
        workers = self.frontier.workers()
        return (
            f"OPIC (Redis, {workers} processes): {f['fetched']} pages fetched ({f['visits']} "
            f"visits), {f['pages']} known, {f['pending']} pending, {f['leases']} leased; "
            f"G={f['G']:.4f}, error factor 1/G={f['error_factor']:.4f}, virtual cash "
            f"{f['virtual_cash']:.4f}; this process: {len(self._leased)} in flight, "
            f"{self.frontier.round_trips} round trips"
        )


__all__ = ["RedisScheduler"]
