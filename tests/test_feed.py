"""Start URLs pushed into a crawl (its feed): a file beside the embedded state and a Redis list
give each seed until the crawl has filed it, give again what a killed process took, lose no
push that races a take, and write nothing into an emptied Redis; a seed line becomes the
request it says, or is refused with the reason; ``OPIC_MAX_IDLE_TIME`` is checked."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time

import pytest
import scrapy

from scrapy_opic._backends import CrawlGone
from scrapy_opic._backends.feed import FileFeed, RedisFeed, feed_path
from scrapy_opic._seeds import seed_bytes, seed_request
from scrapy_opic._settings import OpicSettings, OpicSettingsError


def test_a_file_feed_gives_its_seeds_until_they_are_filed_and_then_the_next_ones(tmp_path):
    feed = FileFeed(feed_path(tmp_path / "opic.sqlite"))
    assert feed.name == str(tmp_path / "opic.start_urls")
    assert feed.take([]) == []  # (no file yet)
    feed.push([b"http://a/1", b"http://a/2"])
    assert feed.take([]) == [b"http://a/1", b"http://a/2"]
    feed.push([b"http://b/1"])
    # Not filed yet (a process killed now, say): the same seeds again, the new one waits.
    assert feed.take([]) == [b"http://a/1", b"http://a/2"]
    feed.done()
    assert feed.take([]) == [b"http://b/1"]
    feed.done()
    assert feed.take([]) == []
    with pytest.raises(ValueError, match="one line"):
        feed.push([b"http://a/\nhttp://b/"])


def test_a_push_that_waited_for_a_take_lands_in_the_next_file(tmp_path):
    """A writer that opened the feed file as a take renamed it writes into the new one: its
    seed is neither read by that take nor lost."""
    feed = FileFeed(tmp_path / "opic.start_urls")
    feed.push([b"http://a/1"])
    holder = os.open(feed.path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(holder, fcntl.LOCK_EX)  # (what a take holds while it renames)
    writer = threading.Thread(target=feed.push, args=([b"http://a/2"],))
    writer.start()
    time.sleep(0.2)  # (the writer has opened the file and waits for the lock)
    os.rename(feed.path, feed.taken)
    os.close(holder)
    writer.join(timeout=10)
    assert feed.taken.read_bytes() == b"http://a/1\n"
    assert feed.path.read_bytes() == b"http://a/2\n"


def test_a_redis_feed_gives_a_dead_process_s_seeds_to_the_next_and_writes_nothing_when_emptied(
    redis_url,
):
    """What one process took and did not mark filed goes to another once the first is not
    alive (and to itself again meanwhile); the crawl's keys gone, a take raises and writes
    nothing."""
    import uuid

    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(redis_url)
    key = f"opic:feed:{uuid.uuid4().hex}"
    ns = "{" + key + "}"
    try:
        client.hset(ns + ":meta", "config", "{}")  # (the crawl exists)
        one, two = RedisFeed(client, key, "one"), RedisFeed(client, key, "two")
        assert one.push([b"http://a/1", b"http://a/2"]) == 2
        assert one.take(["one", "two"]) == [b"http://a/1", b"http://a/2"]  # oldest first
        one.push([b"http://a/3"])
        assert two.take(["one", "two"]) == [b"http://a/3"]  # one is alive: its own stay
        assert sorted(one.take(["one", "two"])) == [b"http://a/1", b"http://a/2"]
        two.done()
        got = two.take(["two"])  # one is gone: its seeds are two's now
        assert sorted(got) == [b"http://a/1", b"http://a/2"]
        assert client.hkeys(ns + ":start_urls:taken") == [b"two"]
        two.done()
        assert client.exists(ns + ":start_urls:taken") == 0 and client.llen(two.name) == 0
        client.delete(ns + ":meta")
        with pytest.raises(CrawlGone, match="gone from Redis"):
            two.take(["two"])
        assert client.keys(ns + "*") == []
    finally:
        client.delete(*(client.keys(ns + "*") or [ns]))
        client.close()


class Spider(scrapy.Spider):
    name = "s"

    def parse(self, response):
        pass

    def parse_item(self, response):
        pass

    def _hidden(self, response):
        pass


class Choosy(Spider):
    opic_seed_callbacks = ("parse_item",)


def test_a_seed_is_the_request_it_says_or_refused_with_the_reason():
    spider = Spider()
    plain = seed_request(b"  http://a.example/x \n", spider)
    assert (plain.url, plain.priority, plain.callback) == ("http://a.example/x", 0, None)
    raw = seed_bytes("http://a.example/y", priority=5, meta={"k": 1}, callback="parse_item")
    assert json.loads(raw) == {
        "url": "http://a.example/y", "priority": 5, "meta": {"k": 1}, "callback": "parse_item"
    }  # fmt: skip
    full = seed_request(raw, spider)
    assert full.priority == 5 and full.callback == spider.parse_item and full.dont_filter
    assert full.meta == {"k": 1, "is_start_request": True}
    assert seed_bytes("http://a.example/z") == b"http://a.example/z"
    for bad, why in (
        (b"{not json", "not JSON"),
        (b'{"href": "http://a/"}', '"url" string'),
        (b'{"url": "http://a/", "method": "POST"}', "unknown fields"),
        (b'{"url": "http://a/", "priority": "high"}', "priority"),
        (b'{"url": "http://a/", "priority": true}', "priority"),
        (b'{"url": "http://a/", "meta": [1]}', "meta"),
        (b'{"url": "http://a/", "callback": "nope"}', "no callback 'nope'"),
        (b'{"url": "http://a/", "callback": "_hidden"}', "no callback '_hidden'"),
        (b'{"url": "http://a/", "callback": "name"}', "no callback 'name'"),  # (not callable)
        (b"no-scheme.example/x", "scheme"),
    ):
        with pytest.raises(ValueError, match=why):
            seed_request(bad, spider)
    choosy = Choosy()
    assert seed_request(b'{"url": "http://a/", "callback": "parse_item"}', choosy).callback
    with pytest.raises(ValueError, match="no callback 'parse'"):
        seed_request(b'{"url": "http://a/", "callback": "parse"}', choosy)


def test_the_idle_time_is_seconds_or_inf_and_anything_else_is_one_line():
    assert OpicSettings.from_settings({}).max_idle_time == 0.0
    assert OpicSettings.from_settings({"OPIC_MAX_IDLE_TIME": "2.5"}).max_idle_time == 2.5
    assert OpicSettings.from_settings({"OPIC_MAX_IDLE_TIME": "inf"}).max_idle_time == float("inf")
    for bad in ("-1", "soon", "nan", True):
        with pytest.raises(OpicSettingsError, match="OPIC_MAX_IDLE_TIME.*seconds >= 0, or inf"):
            OpicSettings.from_settings({"OPIC_MAX_IDLE_TIME": bad})
