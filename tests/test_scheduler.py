"""OpicScheduler against the contract of Scrapy's own scheduler tests, one suite over every
backend: the embedded frontier without and with a JOBDIR, and the Redis frontier (on a plain
server and on a Redis Cluster). No engine runs: a stub stands in for the downloader's slots. Then
what only one backend does."""

from __future__ import annotations

import gc
import pickle
import threading
import time
import uuid
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.test import get_crawler

from scrapy_opic._backends import StoreError
from scrapy_opic._backends.sqlite_state import StateReader
from scrapy_opic._requests import (
    FOLLOW_UP_META,
    OutcomeErrback,
    RequestCodec,
    decode_request,
    encode_request,
)
from scrapy_opic._scheduler import OpicScheduler, PaidLinks
from scrapy_opic.opic.constants import DUPLICATE, NEEDS_PAYLOAD
from tests.support.frontiers import CLUSTER, redis_url_of

URLS = [f"http://host{i % 3}.example/page/{i}" for i in range(12)]
BACKENDS = ["sqlite", "sqlite-jobdir", "redis", CLUSTER]


class ContractSpider(Spider):
    name = "contract"

    def parse(self, response):
        pass


class Schedulers:
    """Builds schedulers of one backend; closes them (and empties their Redis keys) after."""

    def __init__(self, backend: str, tmp_path, redis_url: str | None) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.redis_url = redis_url
        self.key = f"opic:sched:{uuid.uuid4().hex}"
        self.open: list[OpicScheduler] = []

    def make(self, **settings) -> OpicScheduler:
        base = {"LOG_ENABLED": False, "OPIC_STATE_PATH": str(self.tmp_path / "state.sqlite")}
        if self.backend == "sqlite-jobdir":
            base["JOBDIR"] = str(self.tmp_path / "job")
        if self.backend.startswith("redis"):
            base.update(OPIC_STORE="redis", OPIC_REDIS_URL=self.redis_url, OPIC_REDIS_KEY=self.key)
        crawler = get_crawler(ContractSpider, {**base, **settings})
        crawler.engine = SimpleNamespace(
            downloader=SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
        )
        spider = ContractSpider.from_crawler(crawler)
        crawler.spider = spider
        scheduler = OpicScheduler.from_crawler(crawler)
        scheduler.open(spider)
        self.open.append(scheduler)
        return scheduler

    def close(self, scheduler: OpicScheduler, reason: str = "finished") -> None:
        self.open.remove(scheduler)
        scheduler.close(reason)

    def cleanup(self) -> None:
        for scheduler in list(self.open):
            self.close(scheduler)
        if self.backend.startswith("redis"):
            from scrapy_opic._backends.redis import RedisStore

            store = RedisStore.connect(self.redis_url, self.key)
            store.clear()
            store.client.close()


@pytest.fixture(params=BACKENDS)
def schedulers(request, tmp_path):
    factory = Schedulers(request.param, tmp_path, redis_url_of(request, request.param))
    yield factory
    factory.cleanup()


def visit(s: OpicScheduler, request: Request, links=()) -> None:
    """What the spider middleware reports for a parsed page."""
    s.settle_visit(request, list(links), None)


def total_cash(s: OpicScheduler) -> float:
    return s.frontier.total_cash()


# -- the contract, on every backend ----------------------------------------------------------------


def test_length_and_dequeue(schedulers):
    s = schedulers.make()
    assert not s.has_pending_requests() and len(s) == 0
    for url in URLS:
        assert s.enqueue_request(Request(url, callback=s.spider.parse))
    assert s.has_pending_requests() and len(s) == len(URLS)
    got = []
    while (r := s.next_request()) is not None:
        assert "opic_id" in r.meta and "opic_lease" in r.meta
        assert r.callback == s.spider.parse
        got.append(r)
    assert sorted(r.url for r in got) == sorted(URLS)
    for r in got:
        s.settle_failure(r, OSError("connection refused"))
    assert not s.has_pending_requests() and len(s) == 0
    assert s.counts["opic/failed"] == len(URLS)
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_duplicates_are_refused_and_counted(schedulers):
    s = schedulers.make()
    assert s.enqueue_request(Request(URLS[0]))
    assert not s.enqueue_request(Request(URLS[0]))  # pending
    r = s.next_request()
    assert not s.enqueue_request(Request(URLS[0]))  # in flight
    visit(s, r)
    assert not s.enqueue_request(Request(URLS[0]))  # visited, one-pass crawl
    s.report.update(s.frontier)
    assert s.stats.get_value("opic/duplicates") == 3
    assert s.stats.get_value("dupefilter/filtered") == 3


def test_a_visit_files_its_links_and_the_scheduler_answers_for_them(schedulers):
    s = schedulers.make()
    s.enqueue_request(Request(URLS[0]))
    parent = s.next_request()
    kids = [Request(u) for u in URLS[1:4]] + [Request(URLS[1])]  # one link twice
    visit(s, parent, kids)
    assert [s.enqueue_request(k) for k in kids] == [True, True, True, False]
    f = s.frontier.figures()
    assert f["pending"] == 3 and f["visited"] == 1
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_a_page_links_to_another_page_once(schedulers):
    """Two requests with one fingerprint (``a#x`` and ``a#y``, a menu link and a text link) are
    one link of the page: its children get equal shares, as in PageRank's graph of pages, and
    the repeat is a duplicate. The same holds for the links it will not follow."""
    s = schedulers.make(OPIC_REFUSED_LINKS="virtual", OPIC_EPSILON=0.15)
    s.enqueue_request(Request(URLS[0]))
    parent = s.next_request()
    kids = [Request(URLS[1] + "#a"), Request(URLS[1] + "#b"), Request(URLS[2]), Request(URLS[1])]
    offsite = Request("http://elsewhere.example/x")
    cash = s.frontier.cash_of(parent.meta["opic_id"])
    s.settle_visit(parent, kids, None, refused=[(offsite, 1.0), (offsite, 1.0)])
    assert [s.enqueue_request(k) for k in kids] == [True, False, True, False]
    assert s.counts["opic/duplicates"] == 2
    one, two = (s.frontier.cash_of(s._key(Request(u))) for u in URLS[1:3])
    # Three links (two followed, one refused): a third of what the parent passes on each.
    assert one == pytest.approx(0.85 * cash / 3) and two == pytest.approx(one)
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("mode", ["ignore", "virtual"])
def test_a_link_to_a_closed_page_is_a_refused_link(schedulers, mode):
    """A page closed by its outcome (here robots.txt) is no page to link to: a later link to it
    is left out of the out-degree (``OPIC_REFUSED_LINKS = "ignore"``) or gives its share to the
    virtual page (``"virtual"``), as a link the crawl refuses does."""
    s = schedulers.make(OPIC_REFUSED_LINKS=mode, OPIC_EPSILON=0.15)
    for u in URLS[:2]:
        s.enqueue_request(Request(u))
    first = s.next_request()
    s.settle_failure(first, IgnoreRequest("Forbidden by robots.txt"))
    assert s.frontier.status_of(first.meta["opic_id"]) == "visited"
    parent = s.next_request()
    cash = s.frontier.cash_of(parent.meta["opic_id"])
    other = URLS[2]
    s.settle_visit(parent, [Request(first.url), Request(other)], None)
    got = s.frontier.cash_of(s._key(Request(other)))
    assert got == pytest.approx(0.85 * cash / (2 if mode == "virtual" else 1))
    assert s.frontier.cash_of(first.meta["opic_id"]) == 0.0
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_a_copy_of_the_popped_request_is_a_request_of_its_own(schedulers):
    """Pagination by ``response.request.replace(url=next_page)``: the copy carries the lease in
    its meta and the scheduler's errback wrapper; it must be filed, fetched and paid as any new
    page (not taken for a redirect, not refused by a serializer)."""
    s = schedulers.make()
    s.enqueue_request(Request(URLS[0], callback=s.spider.parse))
    page = s.next_request()
    following = page.replace(url=URLS[1])
    assert isinstance(following.errback, OutcomeErrback) and "opic_lease" in following.meta
    visit(s, page, [following])
    assert s.enqueue_request(following)
    assert s.counts["opic/extra_fetches"] == 0 and s.counts["opic/redirected"] == 0
    again = s.next_request()
    assert again.url == URLS[1] and "opic_lease" in again.meta
    assert s.frontier.cash_of(again.meta["opic_id"]) > 0  # the visit paid it
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("dont_filter", [False, True])
def test_a_callback_that_yields_its_own_request_again(schedulers, dont_filter):
    """``yield response.request`` (the very object, to fetch the page once more): the page's
    visit is settled all the same, its lease ends, and the request is then a link like any
    other: refused as a duplicate, or (``dont_filter``) fetched once more, as Scrapy does."""
    s = schedulers.make()
    s.enqueue_request(Request(URLS[0], callback=s.spider.parse, dont_filter=dont_filter))
    page = s.next_request()
    other = Request(URLS[1])
    visit(s, page, [page, other])
    assert s.counts["opic/visits"] == 1 and not len(s.leases)
    assert s.enqueue_request(page) is dont_filter
    assert s.enqueue_request(other)
    fetched = {s.next_request().url for _ in range(1 + dont_filter)}
    assert fetched == {URLS[1], URLS[0]} if dont_filter else fetched == {URLS[1]}
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_a_continuous_crawl_accepts_a_visited_page_again(schedulers):
    s = schedulers.make(OPIC_CONTINUOUS=True)
    s.enqueue_request(Request(URLS[0]))
    r = s.next_request()
    visit(s, r)
    again = s.next_request()  # back in line by itself
    assert again is not None and again.url == URLS[0] and again is not r


def test_a_retry_and_a_redirect_of_a_page_in_flight(schedulers):
    s = schedulers.make()
    s.enqueue_request(Request(URLS[0]))
    first = s.next_request()
    retry = first.replace(priority=-1, dont_filter=True)
    assert s.enqueue_request(retry)  # same fingerprint: pending again, no cash moved
    again = s.next_request()
    assert again.url == URLS[0] and again.priority == -1
    cash = s.frontier.cash_of(again.meta["opic_id"])
    assert s.enqueue_request(again.replace(url=URLS[5]))  # a redirect
    target = s.next_request()
    assert target.url == URLS[5]
    assert s.frontier.cash_of(target.meta["opic_id"]) == pytest.approx(cash)
    assert s.frontier.status_of(s.fingerprinter.fingerprint(Request(URLS[0]))) == "visited"
    assert s.counts["opic/retried"] == 1 and s.counts["opic/redirected"] == 1
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_a_priority_adjustment_belongs_to_one_request(schedulers):
    """Scrapy's retry (-1) and redirect (+2) adjustments: the follow-up waits at its page's
    priority, so that cash orders it, and the page's later fetches never inherit them (before:
    in a continuous crawl a retried page never came back, below every refetch; a redirect
    target was refetched ahead of every page, for good)."""
    s = schedulers.make(OPIC_CONTINUOUS=True)
    for url in URLS[:4]:
        s.enqueue_request(Request(url))
    first = s.next_request()
    assert s.enqueue_request(first.replace(priority=first.priority - 1, dont_filter=True))
    fetched = []
    for _ in range(8):
        r = s.next_request()
        fetched.append(r.url)
        if r.url == first.url:
            assert r.priority == -1  # the retry itself, as Scrapy made it
            # Its follow-up, a redirect adjusted +2, then waits at priority 0 as well.
            assert s.enqueue_request(r.replace(url=URLS[5], priority=r.priority + 2))
            continue
        visit(s, r)
    assert first.url in fetched  # the retry came back among the refetches
    target = fetched.index(URLS[5]) if URLS[5] in fetched else None
    assert target is not None
    # The target, once visited, waits with the others: fetched again only as its cash says.
    assert fetched.count(URLS[5]) <= 2
    assert s.counts["opic/priority_adjustments_ignored"] == 2
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    "backend",
    ["sqlite", *(pytest.param(b, marks=pytest.mark.slow) for b in ("sqlite-jobdir", "redis"))]
    + [CLUSTER],
)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_follow_up_is_for_one_fetch_whatever_the_outcomes(backend, data, tmp_path, request):
    """Property: in a continuous crawl, after any sequence of outcomes (visits, Scrapy-made
    retries and redirects, download and callback errors), a follow-up request is fetched once as
    Scrapy made it (its priority adjustment, its ``retry_times`` or ``redirect_urls``, a retry's
    ``dont_filter``), and every later fetch of its page gets the page's own request back: base
    priority, no retry or redirect meta. Total cash stays 1 at every step."""
    factory = Schedulers(backend, tmp_path / uuid.uuid4().hex, redis_url_of(request, backend))
    factory.tmp_path.mkdir()
    try:
        # (No backoff: a page that failed is a candidate again at once, as this property wants.)
        s = factory.make(OPIC_CONTINUOUS=True, OPIC_BACKOFF=0)
        urls = URLS[:6]
        for u in urls[:3]:
            s.enqueue_request(Request(u))
        pending_follow_up: dict[bytes, Request] = {}  # page key -> the follow-up filed for it
        for _step in range(data.draw(st.integers(5, 40), label="steps")):
            r = s.next_request()
            assert r is not None  # a continuous crawl always has a page to fetch
            key = r.meta["opic_id"]
            expected = pending_follow_up.pop(key, None)
            if expected is not None:  # the follow-up itself, as Scrapy made it
                assert r.url == expected.url and r.priority == expected.priority
                assert r.dont_filter == expected.dont_filter
                for k in ("retry_times", "redirect_times", "redirect_urls"):
                    assert r.meta.get(k) == expected.meta.get(k)
            else:  # any other fetch: the page's own request
                assert r.priority == 0 and not r.dont_filter
                assert not any(k in r.meta for k in FOLLOW_UP_META), r.meta
            action = data.draw(
                st.sampled_from(["visit", "retry", "redirect", "error", "spider_error"]),
                label="outcome",
            )
            if action == "visit":
                picked = data.draw(st.lists(st.sampled_from(urls), max_size=4), label="links")
                links = [Request(u) for u in picked]
                visit(s, r, links)
                for link in links:
                    s.enqueue_request(link)
            elif action == "retry":
                retry = r.replace(priority=r.priority - 1, dont_filter=True)
                retry.meta["retry_times"] = r.meta.get("retry_times", 0) + 1
                if s.enqueue_request(retry):
                    pending_follow_up[key] = retry
            elif action == "redirect":
                target = data.draw(st.sampled_from([u for u in urls if u != r.url]), label="to")
                moved = r.replace(url=target, priority=r.priority + 2)
                moved.meta["redirect_times"] = r.meta.get("redirect_times", 0) + 1
                moved.meta["redirect_urls"] = [*r.meta.get("redirect_urls", []), r.url]
                if s.enqueue_request(moved):
                    pending_follow_up[s._key(moved)] = moved
            elif action == "error":
                s.settle_failure(r, OSError("connection reset"))
            else:
                s.settle_callback_error(r, ValueError("bad page"))
            assert total_cash(s) == pytest.approx(1.0, abs=1e-12)
    finally:
        factory.cleanup()


def test_a_continuous_crawl_orders_first_fetches_by_priority_and_refetches_by_cash(schedulers):
    """Every fetched page of a continuous crawl is pending again at once: a tier of refetches
    above 0 would never empty (before: the priority-5 page took every fetch, and the page at
    priority -1 was never fetched). A priority orders a page's first fetch; its refetches wait at
    priority 0, by cash."""
    s = schedulers.make(OPIC_CONTINUOUS=True)
    s.enqueue_request(Request(URLS[0], priority=5))
    for u in URLS[1:4]:
        s.enqueue_request(Request(u))
    s.enqueue_request(Request(URLS[4], priority=-1))
    got = []
    for _ in range(30):
        r = s.next_request()
        got.append(r.url)
        links = [Request(u) for u in URLS[:5] if u != r.url]  # five pages linking each other
        visit(s, r, links)
        for link in links:
            s.enqueue_request(link)
    assert got[0] == URLS[0]  # the first fetch by priority
    assert all(u in got for u in URLS[:5])
    assert got.count(URLS[0]) <= 10  # a fair share is 6 of 30
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(("delay", "popped"), [(0.0, 6), (1.0, 2)])
def test_a_slot_gets_no_more_requests_than_it_can_send_soon(schedulers, delay, popped):
    """Without a download delay, a host gets as many requests as its concurrency; with one, a
    request to download and one waiting for its turn (its pages stay here, to be chosen when
    the slot has room, on what the crawl knows by then)."""
    s = schedulers.make(DOWNLOAD_DELAY=delay, CONCURRENT_REQUESTS_PER_DOMAIN=6)
    for n in range(8):
        s.enqueue_request(Request(f"http://host0.example/many/{n}"))
    got = []
    while (r := s.next_request()) is not None:
        got.append(r)
    assert len(got) == popped
    s.leases.downloaded(got[0])  # (Scrapy's request_left_downloader)
    assert s.next_request() is not None and s.next_request() is None


def test_request_priority_comes_before_cash(schedulers):
    s = schedulers.make()
    for i, url in enumerate(URLS[:6]):
        s.enqueue_request(Request(url, priority=1 if i % 2 else 0))
    order = [s.next_request() for _ in range(6)]
    assert [r.priority for r in order] == [1, 1, 1, 0, 0, 0]


def test_in_a_host_start_requests_come_first_then_the_pages_most_fetched_pages_link_to(
    schedulers,
):
    """The web order inside one host: the start requests (``is_start_request``, as Scrapy's
    start middleware marks them) before any link, a late one too; then, among the links, the
    page that two fetched pages link to before the pages only one links to."""
    s = schedulers.make()
    site = "http://one.example/"
    starts = [Request(f"{site}start/{i}", meta={"is_start_request": True}) for i in range(3)]
    for r in starts:
        assert s.enqueue_request(r)
    popped = [s.next_request() for _ in range(3)]
    assert sorted(r.url for r in popped) == sorted(r.url for r in starts)
    hub = Request(site + "hub")
    for n, parent in enumerate(popped):
        kids = [Request(f"{site}leaf/{n}/{j}") for j in range(3)]
        if n:  # (the hub is linked from the last two starts only: found after leaf/0/*)
            kids.append(hub)
        visit(s, parent, kids)
        for k in kids:
            s.enqueue_request(k)
    # A late start request still comes before every link.
    assert s.enqueue_request(Request(site + "start/late", meta={"is_start_request": True}))
    assert s.next_request().url == site + "start/late"
    assert s.next_request().url == hub.url
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_dont_filter_fetches_again_as_scrapy_does(schedulers):
    s = schedulers.make()
    home = URLS[0]
    assert s.enqueue_request(Request(home))
    first = s.next_request()
    # The same page while it is in flight: dropped, unless dont_filter says fetch it anyway.
    assert not s.enqueue_request(Request(home))
    assert s.enqueue_request(Request(home, dont_filter=True, meta={"tag": "again"}))
    assert len(s) == 1 and s.has_pending_requests()
    extra = s.next_request()
    assert extra.meta["tag"] == "again" and "opic_id" not in extra.meta  # pays nothing
    # Once visited, a plain link is a duplicate; a dont_filter request (a retry from a
    # callback, a second callback for the same URL) fetches the page again, with its cash.
    visit(s, first)
    assert not s.enqueue_request(Request(home))
    assert s.enqueue_request(Request(home, dont_filter=True, priority=-1))
    again = s.next_request()
    assert again.meta["opic_id"] == first.meta["opic_id"] and again.priority == -1
    # A start request (dont_filter too, as Scrapy makes start_urls) for a known page: a resumed
    # crawl does not fetch its seeds again.
    visit(s, again)
    assert not s.enqueue_request(Request(home, dont_filter=True, meta={"is_start_request": True}))
    s.report.update(s.frontier)
    st = s.stats.get_stats()
    assert st["scheduler/enqueued"] == 3 and st["scheduler/dequeued"] == 3
    assert st["dupefilter/filtered"] == 3 and st["opic/duplicates"] == 3


class SessionDupeFilter:
    """A project's dupefilter: refuses every URL with /session/ in it."""

    def __init__(self) -> None:
        self.logged: list[str] = []

    def request_seen(self, request) -> bool:
        return "/session/" in request.url

    def open(self) -> None:
        pass

    def close(self, reason: str) -> None:
        pass

    def log(self, request, spider) -> None:
        self.logged.append(request.url)


def test_a_projects_dupefilter_is_asked_and_its_refusals_pay_the_virtual_page(schedulers):
    s = schedulers.make(DUPEFILTER_CLASS="tests.test_scheduler.SessionDupeFilter")
    assert isinstance(s.df, SessionDupeFilter)
    assert s.enqueue_request(Request("http://a.example/"))
    parent = s.next_request()
    kids = [Request(u) for u in ("http://a.example/x", "http://a.example/session/1")]
    visit(s, parent, kids)  # the visit pays both links
    refused = s.fingerprinter.fingerprint(kids[1])
    assert s.frontier.cash_of(refused) > 0
    assert s.enqueue_request(kids[0])
    assert not s.enqueue_request(kids[1])
    assert s.df.logged == ["http://a.example/session/1"]
    # A duplicate the frontier refuses is not one the project's dupefilter saw: Scrapy calls
    # its log() for its own refusals only (BaseDupeFilter.log warns of a deprecation).
    assert not s.enqueue_request(Request("http://a.example/x"))
    assert s.df.logged == ["http://a.example/session/1"]
    assert s.counts["dupefilter/filtered"] == 1
    # Never to be fetched: its cash went to the virtual page, and the total is still 1.
    assert s.frontier.cash_of(refused) == 0
    assert s.frontier.status_of(refused) == "visited"
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_duplicates_under_scrapys_base_dupefilter_raise_no_warning(tmp_path):
    import warnings

    s = Schedulers("sqlite", tmp_path, None).make(
        DUPEFILTER_CLASS="scrapy.dupefilters.BaseDupeFilter"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # python -W error: a warning would fail the crawl
        assert s.enqueue_request(Request(URLS[0]))
        assert not s.enqueue_request(Request(URLS[0]))
    s.close("finished")


def test_a_failure_settles_once_and_a_stale_outcome_changes_nothing(schedulers):
    s = schedulers.make()
    for url in URLS[:3]:
        s.enqueue_request(Request(url))
    a, b, c = (s.next_request() for _ in range(3))
    s.settle_failure(a, OSError("timeout"))  # a download error: a visit with no links
    from scrapy.exceptions import IgnoreRequest

    s.settle_failure(b, IgnoreRequest("robots.txt"))  # fetched nothing: given up
    s.settle_callback_error(c, ValueError("a callback that fails"))
    for r in (a, b, c):  # every outcome again: the leases are settled already
        s.settle_failure(r, OSError())
        s.settle_callback_error(r, ValueError("a callback that fails"))
        assert s.settle_visit(r, [], None) is None
    assert s.counts["opic/failed"] == 2 and s.counts["opic/ignored"] == 1
    f = s.frontier.figures()
    assert f["visits"] == 2 and f["visited"] == 3 and f["in_flight"] == 0
    assert total_cash(s) == pytest.approx(1.0, abs=1e-12)


def test_a_closing_scheduler_hands_its_pages_back(schedulers):
    s = schedulers.make()
    for url in URLS[:4]:
        s.enqueue_request(Request(url))
    assert s.next_request() is not None and s.next_request() is not None
    schedulers.close(s, "shutdown")
    if schedulers.backend == "sqlite":
        return  # without a JOBDIR each crawl starts afresh (tested below)
    again = schedulers.make()  # resumes (JOBDIR) or joins (Redis), nothing left in flight
    f = again.frontier.figures()
    assert f["pending"] == 4 and f["in_flight"] == 0
    assert len(list(iter(again.next_request, None))) == 4


def test_the_item_field_gets_the_importance_the_visit_returns(schedulers):
    s = schedulers.make(OPIC_ITEM_FIELD="importance")
    for url in URLS[:3]:
        s.enqueue_request(Request(url))
    r = s.next_request()
    importance = s.settle_visit(r, [Request(URLS[5])], None)
    assert 0 < importance <= 1


# -- what one backend does -----------------------------------------------------------------------


@pytest.fixture
def jobdir(tmp_path):
    return Schedulers("sqlite-jobdir", tmp_path, None)


def test_jobdir_persists_pending_requests_across_reopen(jobdir):
    s = jobdir.make(OPIC_MEMORY_REQUESTS=4)
    for url in URLS:
        s.enqueue_request(Request(url, meta={"k": url}, priority=1 if "page/3" in url else 0))
    # With a JOBDIR every pending request is a row on disk, and at most OPIC_MEMORY_REQUESTS of
    # them are also held in memory.
    assert len(s.frontier.store.rows._cache) == 4 and not s.frontier.store.rows.payloads
    with StateReader(s.frontier.store.path, empty_ok=True) as reader:
        assert reader.n is None  # nothing committed yet: the rows wait for the first commit
    assert sum(s.frontier.store.file.get_request(i) is not None for i in range(len(URLS))) == len(
        URLS
    )
    first = s.next_request()  # in flight when the crawl stops
    assert first.url == URLS[3]  # priority first, read back from disk
    jobdir.close(s, "shutdown")
    again = jobdir.make(OPIC_MEMORY_REQUESTS=4)
    assert len(again) == len(URLS)  # the in-flight page is pending again
    rows = again.frontier.store.rows
    assert not rows._cache and not rows.payloads  # all on disk
    got = []
    while (r := again.next_request()) is not None:
        got.append(r.url)
        assert r.meta["k"] == r.url
    assert sorted(got) == sorted(URLS) and got[0] == first.url  # its priority came back too
    jobdir.cleanup()


def test_without_jobdir_each_crawl_starts_afresh(tmp_path):
    schedulers = Schedulers("sqlite", tmp_path, None)
    s = schedulers.make()
    s.enqueue_request(Request(URLS[0]))
    schedulers.close(s, "shutdown")
    assert len(schedulers.make()) == 0
    schedulers.cleanup()


def test_unserializable_requests_stay_in_memory_with_one_warning(jobdir, caplog):
    s = jobdir.make()
    for url in URLS[:2]:
        assert s.enqueue_request(Request(url, callback=lambda r: None))
    # A callback Scrapy can name, but a meta value pickle refuses.
    assert s.enqueue_request(Request(URLS[2], meta={"lock": threading.Lock()}))
    assert s.enqueue_request(Request(URLS[3]))  # one that goes to disk
    assert caplog.text.count("Unable to serialize") == 1
    assert sum(isinstance(p, Request) for p in s.frontier.store.rows.payloads.values()) == 3
    assert all(s.frontier.store.file.get_request(i)[1] is None for i in range(3))  # (restart)
    assert len({s.next_request().url for _ in range(4)}) == 4
    # Scrapy's own stats for requests its disk queue refuses: counted, and in memory.
    s.report.update(s.frontier)
    st = s.stats.get_stats()
    assert st["scheduler/unserializable"] == 3 and "opic/unserializable" not in st
    assert st["scheduler/enqueued/memory"] == 3 and st["scheduler/dequeued/memory"] == 3
    assert st["scheduler/enqueued/disk"] == 1 and st["scheduler/dequeued/disk"] == 1
    jobdir.cleanup()


def test_two_crawls_of_one_spider_in_a_process_do_not_share_a_state(tmp_path, caplog):
    schedulers = Schedulers("sqlite", tmp_path, None)
    first = schedulers.make()
    second = schedulers.make()
    assert first.frontier.location != second.frontier.location
    assert second.frontier.location.endswith("state-2.sqlite")
    assert "in use by another running crawl" in caplog.text
    first.enqueue_request(Request(URLS[0]))
    second.enqueue_request(Request(URLS[1]))
    assert first.next_request().url == URLS[0] and second.next_request().url == URLS[1]
    schedulers.cleanup()


@pytest.fixture
def on_redis(redis_url, tmp_path):
    pytest.importorskip("redis")
    factory = Schedulers("redis", tmp_path, redis_url)
    yield factory
    factory.cleanup()


def test_a_redis_crawl_leaves_the_downloaders_slots_alone(on_redis):
    """Each host's partition is owned by one process, whose downloader keeps the host's
    delay as Scrapy does: the scheduler never touches a slot (no private attribute of it)."""
    from scrapy.core.downloader import Slot

    s = on_redis.make(DOWNLOAD_DELAY=0.25, DOWNLOAD_DELAY_JITTER=0.5)
    slot = Slot(8, 0.25, 0.5)
    slot.latercall = marker = object()
    s.crawler.engine.downloader.slots["host0.example"] = slot
    s.enqueue_request(Request(URLS[0]))
    assert s.next_request().url == URLS[0]
    assert slot.delay == 0.25 and slot.latercall is marker


def test_unserializable_requests_are_fetched_by_the_process_that_made_them(on_redis):
    s = on_redis.make()
    local = Request(URLS[1], callback=lambda response: None)  # cannot be pickled
    assert s.enqueue_request(local)
    assert s.next_request() is local
    assert s.counts["scheduler/unserializable"] == 1


def test_a_process_with_other_parameters_cannot_join(on_redis):
    on_redis.make()
    with pytest.raises(StoreError, match=r"other settings \(OPIC_EPSILON=0.15 there, 0.3 here\)"):
        on_redis.make(OPIC_EPSILON=0.3)


def test_a_redis_error_during_a_flush_loses_nothing(on_redis, caplog):
    """A visit never waits for Redis; a flush that fails (the server went away for a while)
    keeps its records, and the next one writes them: another process then reads the visit."""
    import redis

    from scrapy_opic._backends.redis import RedisStore

    s = on_redis.make()
    s.enqueue_request(Request(URLS[0]))
    r = s.next_request()
    pipeline = s.frontier.store.client.pipeline

    def broken(*args, **kw):
        pipe = pipeline(*args, **kw)

        def execute(*args, **kw):
            raise redis.ConnectionError("connection reset")

        pipe.execute = execute
        return pipe

    s.frontier.store.client.pipeline = broken
    visit(s, r, [Request(URLS[1])])
    with pytest.raises(redis.ConnectionError):  # (the scheduler's upkeep logs it, goes on)
        s.frontier.flush()
    s.frontier.store.client.pipeline = pipeline
    s.frontier.commit()
    reader = RedisStore.connect(on_redis.redis_url, on_redis.key)
    try:
        state = reader.snapshot()
        assert state.n == 2 and state.engine().visit_count == 1
        assert state.total_cash() == pytest.approx(1.0, abs=1e-12)
    finally:
        reader.client.close()


def test_a_partition_taken_over_makes_the_old_owners_outcome_stale(on_redis):
    """A process that stalled past its partition's lease lost it to another process: its
    late outcome changes nothing, and its next write of that partition is refused."""
    s = on_redis.make(OPIC_REDIS_LEASE=0.5)
    s.enqueue_request(Request(URLS[0]))
    s.frontier.commit()  # (as its upkeep does)
    first = s.next_request()
    k = next(iter(s.frontier.fleet.parts))
    held = s.frontier.held[k]
    time.sleep(0.6)  # a blocked reactor: no renewal for a whole lease
    other = on_redis.make()
    assert other.frontier._claim(k)  # another process takes the partition over
    assert other.next_request().url == first.url  # and fetches the page again
    s.frontier.flush()  # this process's write is refused: it lets the partition go
    assert k not in s.frontier.fleet.parts and held.token != other.frontier.held[k].token
    visit(s, first)  # the lapsed lease answers: ignored
    assert s.counts["opic/stale"] == 1


def test_a_page_that_never_answers_is_not_counted_fetched(tmp_path):
    """A continuous crawl of a host where nothing listens: every fetch fails, and is a visit
    (its cash goes to the virtual page), but no page was fetched: 'fetched' is the pages
    whose last fetch was parsed, as the export's column says, in the figures and the log."""
    s = Schedulers("sqlite", tmp_path, None).make(OPIC_CONTINUOUS=True, OPIC_BACKOFF=0)
    assert s.enqueue_request(Request("http://127.0.0.1:9/"))
    for _ in range(5):
        s.settle_failure(s.next_request(), ConnectionRefusedError())
    f = s.frontier.figures()
    assert (f["fetched"], f["visits"], f["failed_visits"]) == (0, 5, 5)
    assert "OPIC: 0 pages fetched (5 visits, 5 of them failed), 1 known" in s.status_line()
    s.settle_visit(s.next_request(), [], None)  # it answers at last
    assert s.frontier.figures()["fetched"] == 1
    s.close("finished")


def test_a_callback_error_is_the_spiders_whatever_it_raised(tmp_path):
    from scrapy_opic.export import open_state

    s = Schedulers("sqlite", tmp_path, None).make()
    for url in URLS[:2]:
        s.enqueue_request(Request(url))
    for r in (s.next_request(), s.next_request()):
        s.settle_callback_error(r, TimeoutError("raised by the callback, not the download"))
    s.frontier.commit(wait=True)
    with open_state(s.frontier.location) as state:
        assert {p.status for p in state.pages()} == {"spider_error"}


def test_a_page_is_known_by_its_url_without_the_fragment(schedulers):
    s = schedulers.make()
    assert s.enqueue_request(Request(URLS[0] + "#section-2"))
    assert not s.enqueue_request(Request(URLS[0] + "#other"))  # the same page
    if hasattr(s.frontier, "commit"):  # (the embedded one: a checkpoint for the reader)
        s.frontier.commit(wait=True)
    from scrapy_opic.export import open_state

    with open_state(s.frontier.location) as state:
        (page,) = state.top(5)
    assert page.url == URLS[0] and page.last_visit == 0.0  # never visited: 0


# -- how requests are stored -----------------------------------------------------------------------


class StoringSpider(Spider):
    name = "storing"

    def parse(self, response):
        pass

    def parse_item(self, response):
        pass

    def failed(self, failure):
        pass


def stored_requests(spider: StoringSpider) -> list[Request]:
    from scrapy.http import FormRequest, JsonRequest

    url = "https://www.example.org/a/b?x=1"
    return [
        Request(url, callback=spider.parse),
        Request(url),
        Request(
            url,
            callback=spider.parse_item,
            errback=spider.failed,
            method="POST",
            headers={"X-A": "1", "Accept": ["a", "b"]},
            body=b"payload",
            cookies={"session": "s"},
            meta={"depth": 2, "nested": {"k": [1, 2.5, None]}},
            encoding="latin-1",
            priority=-3,
            dont_filter=True,
            flags=["flag"],
            cb_kwargs={"page": 7},
        ),
        Request(url, dont_filter=0, priority=5),  # (0 is not False: kept as it was)
        Request(url + "#section", callback=spider.parse),
        FormRequest(url, formdata={"q": "x"}, callback=spider.parse),
        JsonRequest(url, data={"x": 1}),
        JsonRequest(url, method="GET", body=b"{}"),
    ]


def test_a_stored_request_is_rebuilt_equal_for_every_field():
    """``encode_request`` keeps only what differs from a new request, and the URL only when the
    frontier does not hand it back; ``decode_request`` rebuilds the request that
    ``request_from_dict`` makes of the same dict (every field, its class, its callbacks)."""
    spider = StoringSpider()
    for request in stored_requests(spider):
        want = request.to_dict(spider=spider)
        for kept in (request.url, None, "https://www.example.org/other"):
            data = encode_request(request, spider, kept)
            # A URL left out is the one given back; one kept wins over any given.
            back = decode_request(data, kept if kept == request.url else "http://wrong/", spider)
            assert type(back) is type(request)
            assert back.to_dict(spider=spider) == want
            assert back.callback == request.callback and back.errback == request.errback
        # Bytes encode_request did not make (a pickled dict) are refused, not unpickled.
        with pytest.raises(ValueError, match="not a stored request"):
            decode_request(pickle.dumps(want, protocol=4), None, spider)


def test_a_typical_request_is_stored_in_a_few_bytes():
    spider = StoringSpider()
    url = "https://www.example-site-7.org/section/3/page-12345.html"
    request = Request(url, callback=spider.parse)
    data = encode_request(request, spider, url)
    assert len(data) <= 16 < len(pickle.dumps(request.to_dict(spider=spider), protocol=4)) // 10
    assert decode_request(data, url, spider).callback == spider.parse
    with pytest.raises(ValueError, match="without its URL"):
        decode_request(data, None, spider)
    with pytest.raises(ValueError, match="not a stored request"):
        decode_request(b"\x07junk", url, spider)


def _logged(f):
    def wrapper(self, response):  # (no functools.wraps: named "wrapper")
        return f(self, response)

    return wrapper


class PackingSpider(StoringSpider):
    same_parse = StoringSpider.parse  # (another name for parse)
    decorated = _logged(StoringSpider.parse)


def test_a_plain_request_is_packed_untracked_and_rebuilt_equal():
    """``RequestCodec.pack`` keeps a request of Scrapy's own class whose callbacks are the
    spider's methods and whose meta and cb_kwargs hold atoms as a tuple that Python's garbage
    collector does not track; ``decode`` rebuilds it equal in every field (a new request each
    time), and its bytes are those of the request itself. Anything else is kept as it is."""
    spider = PackingSpider()
    codec = RequestCodec(spider, Counter(), lambda r: b"", shared=False)
    url = "https://www.example.org/a/b?x=1"
    every_field = next(r for r in stored_requests(spider) if r.cookies)
    packable = [
        Request(url, callback=spider.parse, meta={"depth": 3}, headers={"Referer": "x"}),
        Request(url),
        # (every field set, with atoms alone in meta and no cookies)
        every_field.replace(
            cookies=None, meta={"depth": 2, "t": (1, "a", None), "b": b"x", "f": 2.5, "ok": True}
        ),
        Request(url + "#section", callback=spider.same_parse, meta={"verbatim_url": True}),
    ]
    for request in packable:
        packed = codec.pack(request)
        assert type(packed) is tuple
        for _level in range(3):  # (the collector untracks a level of nested tuples at a time)
            gc.collect()
        assert not gc.is_tracked(packed)
        want = request.to_dict(spider=spider)
        back = codec.decode(packed, None, copy=False)
        assert type(back) is Request and back.to_dict(spider=spider) == want
        assert back.callback == request.callback and back.errback == request.errback
        assert codec.decode(packed, None, copy=False) is not back
        for kept in (request.url, None):
            assert codec.encode(packed, kept) == encode_request(request, spider, kept)
    other = StoringSpider()
    kept_as_they_are = [
        Request(url, cookies={"session": "s"}),
        Request(url, meta={"nested": {"k": [1]}}),
        Request(url, meta={"a_list": [1]}),
        Request(url, cb_kwargs={"item": {}}),
        Request(url, callback=lambda response: None),
        Request(url, callback=other.parse),  # (another spider's method)
        Request(url, callback=spider.decorated),  # (not the spider's attribute by its name)
        Request(url, errback=spider.decorated),
        *(r for r in stored_requests(spider) if type(r) is not Request),
    ]
    for request in kept_as_they_are:
        assert codec.pack(request) is request
        assert codec.decode(request, None, copy=False) is request


ORIGINS = [
    "http://a.example",
    "http://A.Example:8080",
    "https://a.example",
    "http://user:pw@a.example",
    "http://user@b.example:81",
    "http://sub.a.example",
    "http://[::1]:8000",
    "http://b.example",
    "http://elsewhere.example",
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(ORIGINS),
            st.sampled_from(["", "/", "/p/1.html", "?q=/x", "#top/y", "/a?b#c"]),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_the_middleware_answers_each_link_as_offsite_and_urlparse_would(links):
    """The spider middleware reads a link's host and OffsiteMiddleware's answer once per URL
    origin: each link gets what parsing it alone would give."""
    from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware

    from scrapy_opic._middlewares import OpicSpiderMiddleware

    class Allowed(Spider):
        name = "allowed"
        allowed_domains = ["a.example", "[::1]"]

    crawler = get_crawler(Allowed)
    crawler.spider = spider = Allowed.from_crawler(crawler)
    mw = OpicSpiderMiddleware.from_crawler(crawler)
    mw._offsite.spider_opened(spider)
    judge = OffsiteMiddleware(crawler.stats)
    judge.spider_opened(spider)
    out: list = [{"item": 1}]
    for origin, rest, dont_filter in links:
        out.append(Request(origin + rest, dont_filter=dont_filter))
    got = list(mw._requests(out))
    requests = [o for o in out if isinstance(o, Request)]
    assert [g[0] for g in got] == requests
    for o, host, follows in got:
        assert host == urlparse_cached(Request(o.url)).hostname
        assert follows == (o.dont_filter or judge.should_follow(Request(o.url), spider))


SLOT_URLS = [
    "http://Example.COM/a",
    "http://example.com:8080/b?x=1#f",
    "http://user:pw@example.com/c",
    "https://example.com/d",
    "http://[::1]:8000/e",
    "http://127.0.0.2:8000/f",
    "http://other.example/g",
    "http://example.com?q=http://third.example/",
    "http://example.com#http://fourth.example/",
    "data:text/html,<a href='http://fifth.example/'>",
    "file:///tmp/x.html",
]


@pytest.mark.filterwarnings("ignore:The CONCURRENT_REQUESTS_PER_IP setting is deprecated")
@pytest.mark.parametrize("ip_concurrency", [0, 2])
def test_slot_keys_name_the_slot_scrapys_downloader_names(ip_concurrency):
    """SlotKeys remembers a slot by URL origin only where that is the downloader's answer:
    every URL (a port, user info, capitals, IPv6, a URL in the query or fragment, no host at
    all), a ``download_slot`` in meta, asked twice in any order, gets Scrapy's slot."""
    from scrapy.core.downloader import Downloader

    from scrapy_opic._requests import SlotKeys

    crawler = get_crawler(Spider, {"CONCURRENT_REQUESTS_PER_IP": ip_concurrency})
    downloader = Downloader(crawler)
    slots = SlotKeys(downloader)
    requests = [Request(u) for u in SLOT_URLS]
    requests += [Request(u, meta={"download_slot": f"s{n}"}) for n, u in enumerate(SLOT_URLS)]
    for r in requests + requests[::-1]:
        assert slots(r) == downloader.get_slot_key(r), r.url


def test_slot_keys_ask_a_downloader_of_the_projects_own_every_time():
    """A downloader whose ``get_slot_key`` is not Scrapy's may name slots by anything: it is
    asked for every request, never remembered by origin."""
    from scrapy_opic._requests import SlotKeys

    asked = []

    def get_slot_key(request):
        asked.append(request.url)
        return request.url.rsplit("/", 1)[-1]

    slots = SlotKeys(SimpleNamespace(get_slot_key=get_slot_key))
    assert [slots(Request(f"http://example.com/{n}")) for n in "abca"] == list("abca")
    assert len(asked) == 4


def test_the_links_a_visit_paid_wait_for_their_requests_and_leave_when_dropped():
    """The codes of the requests a visit paid, until each reaches ``enqueue_request``; a
    request dropped on its way (collected) leaves by itself, so that the crawl's writes, which
    wait for the links still to be filed, never wait for it for good."""
    import gc

    paid = PaidLinks()
    kept, dropped, known = (Request(f"http://a.example/{k}") for k in range(3))
    paid.add(kept, NEEDS_PAYLOAD)
    paid.add(dropped, NEEDS_PAYLOAD)
    paid.add(known, DUPLICATE)
    paid.add(kept, NEEDS_PAYLOAD)  # (the same request yielded twice counts once)
    assert paid.unfiled == 2
    assert paid.pop(kept) == NEEDS_PAYLOAD and paid.pop(kept) is None
    assert paid.unfiled == 1
    del dropped
    gc.collect()
    assert paid.unfiled == 0 and len(paid.codes) == 1
    assert paid.pop(Request("http://a.example/2")) is None  # (an equal URL is another request)
    assert paid.pop(known) == DUPLICATE and not paid.codes
