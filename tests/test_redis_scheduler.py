"""RedisScheduler (OPIC_STORE = "redis") against the contract of Scrapy's scheduler, with no engine
running (a stub stands in for the downloader's slots), on a real redis-server."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.test import get_crawler

from scrapy_opic.scheduler import OpicScheduler

redis = pytest.importorskip("redis")

URLS = [f"http://host{i % 3}.example/page/{i}" for i in range(12)]


class ContractSpider(Spider):
    name = "contract"

    def parse(self, response):
        pass


def make(redis_url, key=None, **settings):
    settings = {
        "LOG_ENABLED": False,
        "OPIC_STORE": "redis",
        "OPIC_REDIS_URL": redis_url,
        "OPIC_REDIS_KEY": key or f"opic:sched:{uuid.uuid4().hex}",
        **settings,
    }
    crawler = get_crawler(ContractSpider, settings)
    crawler.engine = SimpleNamespace(
        downloader=SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
    )
    spider = ContractSpider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = OpicScheduler.from_crawler(crawler)
    scheduler.open(spider)
    return scheduler


@pytest.fixture
def scheduler(redis_url):
    s = make(redis_url)
    yield s
    s.close("finished")
    s.frontier.clear()


def test_opic_store_picks_the_redis_scheduler(scheduler):
    from scrapy_opic.redis_scheduler import RedisScheduler

    assert type(scheduler) is RedisScheduler
    assert OpicScheduler.of(scheduler.crawler) is scheduler


def test_a_bad_store_is_refused(redis_url):
    with pytest.raises(ValueError, match="OPIC_STORE"):
        make(redis_url, OPIC_STORE="scrapy_opic.settings.OpicSettings")


def test_length_dequeue_and_duplicates(scheduler):
    assert not scheduler.has_pending_requests()
    for url in URLS:
        assert scheduler.enqueue_request(Request(url, callback=scheduler.spider.parse))
    assert not scheduler.enqueue_request(Request(URLS[0]))  # a duplicate
    assert scheduler.has_pending_requests() and len(scheduler) == len(URLS)
    got = []
    while (r := scheduler.next_request()) is not None:
        assert isinstance(r.meta["opic_id"], bytes) and r.callback == scheduler.spider.parse
        got.append(r)
    assert sorted(r.url for r in got) == sorted(URLS)
    assert scheduler.has_pending_requests()  # all leased: the crawl is not over
    for r in got:
        scheduler.settle_failure(r, OSError())
    assert not scheduler.has_pending_requests()
    assert scheduler.counts["opic/failed"] == len(URLS)
    assert scheduler.frontier.total_cash() == pytest.approx(1.0, abs=1e-12)


def test_a_visit_schedules_its_links_and_answers_for_them(scheduler):
    scheduler.enqueue_request(Request(URLS[0]))
    parent = scheduler.next_request()
    kids = [Request(u) for u in URLS[1:4]] + [Request(URLS[1])]  # one link twice
    trips = scheduler.frontier.round_trips
    scheduler.settle_visit(parent, kids, None, None, 0.0)
    assert scheduler.frontier.round_trips == trips + 1  # the visit, and nothing more:
    assert [scheduler.enqueue_request(k) for k in kids] == [True, True, True, False]
    assert scheduler.frontier.round_trips == trips + 1  # answered from the visit's codes
    status = scheduler.frontier.status()
    assert status["pending"] == 3 and status["visited"] == 1
    assert scheduler.frontier.check() == []


def test_retry_and_redirect_of_a_leased_page(scheduler):
    scheduler.enqueue_request(Request(URLS[0]))
    first = scheduler.next_request()
    retry = first.replace(priority=-1)
    assert scheduler.enqueue_request(retry)  # same fingerprint: pending again
    again = scheduler.next_request()
    assert again.url == URLS[0] and again.priority == -1
    redirect = again.replace(url=URLS[5])
    assert scheduler.enqueue_request(redirect)
    target = scheduler.next_request()
    assert target.url == URLS[5]
    f = scheduler.frontier
    assert f.status()["visited"] == 1  # the redirected page is retired, its cash moved on
    assert scheduler.counts["opic/retried"] == 1 and scheduler.counts["opic/redirected"] == 1
    assert f.total_cash() == pytest.approx(1.0, abs=1e-12)


def test_dont_filter_fetches_again_and_unserializable_requests_stay_local(scheduler):
    scheduler.enqueue_request(Request(URLS[0]))
    r = scheduler.next_request()
    scheduler.settle_visit(r, [], None, None, 0.0)
    assert scheduler.enqueue_request(Request(URLS[0], dont_filter=True))  # visited: again
    assert scheduler.next_request().url == URLS[0]
    local = Request(URLS[1], callback=lambda response: None)  # cannot be pickled
    assert scheduler.enqueue_request(local)
    assert scheduler.next_request() is local
    assert scheduler.counts["opic/unserializable"] == 1


def test_a_closing_process_hands_its_leases_back(redis_url):
    key = f"opic:sched:{uuid.uuid4().hex}"
    a = make(redis_url, key)
    for url in URLS[:4]:
        a.enqueue_request(Request(url))
    assert a.next_request() is not None and a.next_request() is not None
    assert a.frontier.status()["leases"] == 2
    a.close("shutdown")
    b = make(redis_url, key)  # joins: sees the pages again, with no lease to wait for
    try:
        status = b.frontier.status()
        assert status["leases"] == 0 and status["pending"] == 4
        assert len([r for r in iter(b.next_request, None)]) == 4
    finally:
        b.close("finished")
        b.frontier.clear()


def test_a_process_with_other_parameters_cannot_join(redis_url):
    key = f"opic:sched:{uuid.uuid4().hex}"
    a = make(redis_url, key)
    try:
        with pytest.raises(ValueError, match="other parameters"):
            make(redis_url, key, OPIC_EPSILON=0.3)
        with pytest.raises(ValueError, match="embedded-store only"):
            make(redis_url, f"opic:sched:{uuid.uuid4().hex}", OPIC_WINDOW="fixed:10")
        with pytest.raises(ValueError, match="embedded-store only"):
            make(redis_url, f"opic:sched:{uuid.uuid4().hex}", OPIC_STRATEGY="random")
    finally:
        a.close("finished")
        a.frontier.clear()


def test_a_redis_error_during_a_visit_lets_the_lease_lapse(redis_url):
    s = make(redis_url, OPIC_REDIS_LEASE=0.3)
    try:
        s.enqueue_request(Request(URLS[0]))
        r = s.next_request()
        script = s.frontier._script

        def broken(keys, args):
            if args[0] == "visit":
                raise redis.ConnectionError("connection reset")
            return script(keys=keys, args=args)

        s.frontier._script = broken
        with pytest.raises(redis.ConnectionError):
            s.settle_visit(r, [], None, None, 0.0)
        s.frontier._script = script
        assert not s._leased and not s._slot_leases  # no longer renewed by this process
        time.sleep(0.4)
        s._beat()
        other = s.frontier.__class__(s.frontier.client, s.frontier.key)
        assert other.pop("other") is not None  # back in the frontier for anyone
    finally:
        s.close("finished")
        s.frontier.clear()


def test_a_page_popped_again_after_its_lease_lapsed_is_held_once(redis_url):
    s = make(redis_url, OPIC_REDIS_LEASE=0.2)
    try:
        s.enqueue_request(Request(URLS[0]))
        first = s.next_request()
        time.sleep(0.3)  # a blocked reactor: no renewal for a whole lease
        second = s.next_request()  # reclaimed and handed back to this process
        assert second.url == first.url and s._slot_leases == {"host0.example": 1}
        s.settle_visit(first, [], None, None, 0.0)  # the lapsed lease answers: ignored
        assert s.frontier.status()["visits"] == 0 and len(s._leased) == 1
        s.settle_visit(second, [], None, None, 0.0)
        assert s.frontier.status()["visits"] == 1 and not s._leased and not s._slot_leases
    finally:
        s.close("finished")
        s.frontier.clear()
