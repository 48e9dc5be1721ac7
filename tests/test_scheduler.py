"""OpicScheduler against the contract of Scrapy's own scheduler tests: length, dequeue, dupes,
persistence across a reopen with JOBDIR (no engine running: a stub stands in for the
downloader's slots)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.test import get_crawler

from scrapy_opic.scheduler import ON_DISK, OpicScheduler

URLS = [f"http://host{i % 3}.example/page/{i}" for i in range(12)]


def make(tmp_path, jobdir: bool = False, **settings) -> OpicScheduler:
    settings = {"LOG_ENABLED": False, "OPIC_STATE_PATH": str(tmp_path / "state.sqlite"), **settings}
    if jobdir:
        settings["JOBDIR"] = str(tmp_path / "job")
    crawler = get_crawler(Spider, settings)
    crawler.engine = SimpleNamespace(
        downloader=SimpleNamespace(get_slot_key=lambda r: urlparse_cached(r).hostname, slots={})
    )
    spider = Spider.from_crawler(crawler, name="contract")
    crawler.spider = spider
    scheduler = OpicScheduler.from_crawler(crawler)
    scheduler.open(spider)
    return scheduler


def test_length_and_dequeue(tmp_path):
    s = make(tmp_path)
    assert not s.has_pending_requests() and len(s) == 0
    for url in URLS:
        assert s.enqueue_request(Request(url))
    assert s.has_pending_requests() and len(s) == len(URLS)
    got = []
    while (r := s.next_request()) is not None:
        got.append(r.url)
        assert "opic_id" in r.meta
    assert sorted(got) == sorted(URLS) and len(s) == 0
    s.close("finished")


def test_duplicates_are_refused(tmp_path):
    s = make(tmp_path)
    assert s.enqueue_request(Request(URLS[0]))
    assert not s.enqueue_request(Request(URLS[0]))  # pending
    r = s.next_request()
    assert not s.enqueue_request(Request(URLS[0]))  # in flight
    s.frontier.complete(r.meta["opic_id"], [])
    assert not s.enqueue_request(Request(URLS[0]))  # visited, one-pass crawl
    s.update_stats()
    assert s.stats.get_value("opic/duplicates") == 3
    s.close("finished")


def test_continuous_crawl_accepts_a_visited_page_again(tmp_path):
    s = make(tmp_path, OPIC_CONTINUOUS=True)
    s.enqueue_request(Request(URLS[0]))
    r = s.next_request()
    s.frontier.complete(r.meta["opic_id"], [])
    again = s.next_request()  # back in line by itself
    assert again is not None and again.url == URLS[0] and again is not r
    s.close("finished")


def test_a_retry_and_a_redirect_of_a_page_in_flight(tmp_path):
    s = make(tmp_path)
    s.enqueue_request(Request(URLS[0]))
    r = s.next_request()
    retry = r.replace(dont_filter=True)
    assert s.enqueue_request(retry)  # same fingerprint: back to pending, no cash moved
    r = s.next_request()
    cash = s.frontier.engine.cash_of(r.meta["opic_id"])
    redirected = r.replace(url=URLS[1])
    assert s.enqueue_request(redirected)
    target = s.next_request()
    assert target.url == URLS[1]
    assert s.frontier.engine.cash_of(target.meta["opic_id"]) == pytest.approx(cash)
    assert s.frontier.status_of(s.fingerprinter.fingerprint(Request(URLS[0]))) == "visited"
    s.close("finished")
    assert s.stats.get_value("opic/total_cash") == pytest.approx(1.0)


def test_jobdir_persists_pending_requests_across_reopen(tmp_path):
    s = make(tmp_path, jobdir=True, OPIC_MEMORY_REQUESTS=4)
    for url in URLS:
        s.enqueue_request(Request(url, meta={"k": url}, priority=1 if "page/3" in url else 0))
    # With a JOBDIR every pending request is a row on disk, and at most OPIC_MEMORY_REQUESTS of
    # them are also held in memory.
    payloads = list(s.frontier.payloads.values())
    assert sum(isinstance(p, Request) for p in payloads) == 4
    assert payloads.count(ON_DISK) == len(URLS) - 4
    first = s.next_request()  # in flight when the crawl stops
    assert first.url == URLS[3]  # priority first, read back from disk
    s.close("shutdown")
    again = make(tmp_path, jobdir=True, OPIC_MEMORY_REQUESTS=4)
    assert len(again) == len(URLS)  # the in-flight page is pending again
    assert all(p == ON_DISK for p in again.frontier.payloads.values())
    got = []
    while (r := again.next_request()) is not None:
        got.append(r.url)
        assert r.meta["k"] == r.url
    assert sorted(got) == sorted(URLS) and got[0] == first.url  # its priority came back too
    again.close("finished")


def test_without_jobdir_each_crawl_starts_afresh(tmp_path):
    s = make(tmp_path)
    s.enqueue_request(Request(URLS[0]))
    s.close("shutdown")
    again = make(tmp_path)
    assert len(again) == 0
    again.close("finished")


def test_unserializable_requests_stay_in_memory_with_one_warning(tmp_path, caplog):
    import threading

    s = make(tmp_path, jobdir=True)
    for url in URLS[:2]:
        assert s.enqueue_request(Request(url, callback=lambda r: None))
    # A callback Scrapy can name, but a meta value pickle refuses.
    assert s.enqueue_request(Request(URLS[2], meta={"lock": threading.Lock()}))
    assert caplog.text.count("Unable to serialize") == 1
    s.update_stats()  # (event counters reach Scrapy's stats at each commit and at close)
    assert s.stats.get_value("opic/unserializable") == 3
    assert sum(isinstance(p, Request) for p in s.frontier.payloads.values()) == 3
    assert len({s.next_request().url for _ in range(3)}) == 3
    s.close("finished")


def test_request_priority_comes_before_cash(tmp_path):
    s = make(tmp_path)
    for i, url in enumerate(URLS[:6]):
        s.enqueue_request(Request(url, priority=1 if i % 2 else 0))
    order = [s.next_request() for _ in range(6)]
    assert [r.priority for r in order] == [1, 1, 1, 0, 0, 0]
    s.close("finished")


def test_dont_filter_fetches_again_as_scrapy_does(tmp_path):
    s = make(tmp_path)
    home = URLS[0]
    assert s.enqueue_request(Request(home))
    first = s.next_request()
    assert first.meta["opic_id"] is not None
    # The same page while it is in flight: dropped, unless dont_filter says fetch it anyway.
    assert not s.enqueue_request(Request(home))
    assert s.enqueue_request(Request(home, dont_filter=True, meta={"tag": "again"}))
    assert len(s) == 1 and s.has_pending_requests()
    extra = s.next_request()
    assert extra.meta["tag"] == "again" and "opic_id" not in extra.meta  # pays nothing
    # Once visited, a plain link is a duplicate; a dont_filter request (a retry from a
    # callback, a second callback for the same URL) fetches the page again, with its cash.
    s.frontier.complete(first.meta["opic_id"], [])
    assert not s.enqueue_request(Request(home))
    assert s.enqueue_request(Request(home, dont_filter=True, priority=-1))
    again = s.next_request()
    assert again.meta["opic_id"] == first.meta["opic_id"] and again.priority == -1
    # A start request (dont_filter too, as Scrapy makes start_urls) for a known page: a resumed
    # crawl does not fetch its seeds again.
    s.frontier.complete(again.meta["opic_id"], [])
    assert not s.enqueue_request(Request(home, dont_filter=True, meta={"is_start_request": True}))
    s.update_stats()
    st = s.stats.get_stats()
    assert st["scheduler/enqueued"] == 3 and st["scheduler/dequeued"] == 3
    assert st["dupefilter/filtered"] == 3 and st["opic/duplicates"] == 3
    s.close("finished")


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


def test_a_projects_dupefilter_is_asked_and_its_refusals_pay_the_virtual_page(tmp_path):
    s = make(tmp_path, DUPEFILTER_CLASS="tests.test_scheduler.SessionDupeFilter")
    assert isinstance(s.df, SessionDupeFilter)
    assert s.enqueue_request(Request("http://a.example/"))
    parent = s.next_request().meta["opic_id"]
    kids = [s.page_of(Request(u)) for u in ("http://a.example/x", "http://a.example/session/1")]
    s.frontier.complete(parent, kids)  # the visit pays both links
    assert s.frontier.engine.cash_of(kids[1]) > 0
    assert s.enqueue_request(Request("http://a.example/x"))
    assert not s.enqueue_request(Request("http://a.example/session/1"))
    assert s.df.logged == ["http://a.example/session/1"]
    # Never to be fetched: its cash went to the virtual page, and the total is still 1.
    assert s.frontier.engine.cash_of(kids[1]) == 0
    assert abs(s.frontier.total_cash() - 1.0) < 1e-12
    assert s.enqueue_request(Request("http://a.example/session/1", dont_filter=True))
    s.close("finished")


def test_two_crawls_of_one_spider_in_a_process_do_not_share_a_state(tmp_path, caplog):
    first = make(tmp_path)
    second = make(tmp_path)
    assert first.store.path != second.store.path
    assert second.store.path.name == "state-2.sqlite"
    assert "in use by another crawl" in caplog.text
    first.enqueue_request(Request(URLS[0]))
    second.enqueue_request(Request(URLS[1]))
    assert first.next_request().url == URLS[0] and second.next_request().url == URLS[1]
    second.close("finished")
    first.close("finished")
