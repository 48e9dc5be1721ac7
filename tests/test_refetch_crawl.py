"""Continuous crawls that refetch by freshness, judged by the server's access log: validators,
304s, content signatures, servers that lie, Scrapy's HTTP cache, pages that go away."""

from __future__ import annotations

import csv
import math
import threading
import time
import uuid
from collections.abc import Callable
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from scrapy_opic._report import build_report
from scrapy_opic.export import open_state, write_export
from scrapy_opic.opic.routing import partition_of
from tests.test_crawl import crawl

pytestmark = pytest.mark.slow  # (crawls in a subprocess)


class Hit(NamedTuple):
    path: str
    k: int  #: the how-many-th request of this path (0 first)
    status: int
    inm: str | None  #: If-None-Match sent
    ims: str | None  #: If-Modified-Since sent
    version: int  #: the content version served (or that a 304 stood for)


#: A page's behaviour: (k, request headers) -> (status, version, extra response headers). The
#: body of a 200 is the page's links and a line made of its version.
Script = Callable[[int, dict[str, str]], tuple[int, int, dict[str, str]]]


class ScriptedSite:
    """Pages ``/`` (home: links to every other page) and ``/<name>``, each answering as its
    script says; ``hits`` is the access log."""

    def __init__(
        self,
        scripts: dict[str, Script],
        links: dict[str, list[str]] | None = None,
        host: str = "127.0.0.1",
    ):
        self.scripts = scripts
        self.links = links or {"/": [p for p in scripts if p != "/"]}
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                with site.lock:
                    k = sum(1 for h in site.hits if h.path == self.path)
                    script = site.scripts.get(self.path)
                    status, version, extra = script(k, headers) if script else (404, -1, {})
                    site.hits.append(
                        Hit(
                            self.path,
                            k,
                            status,
                            headers.get("if-none-match"),
                            headers.get("if-modified-since"),
                            version,
                        )
                    )
                body = b""
                if status == 200:
                    items = "".join(
                        f'<a href="{p}">{p}</a> ' for p in site.links.get(self.path, [])
                    )
                    body = (
                        f"<html><head><title>{self.path} version {version}</title></head>"
                        f"<body><p>{self.path} version {version}</p>{items}"
                        f"<script>var t = {k};</script></body></html>"
                    ).encode()
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                if status == 200:
                    self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.host = host
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.server.server_address[1]}{path}"

    def __enter__(self) -> ScriptedSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, path: str) -> list[Hit]:
        return [h for h in self.hits if h.path == path]


def honest(versions: Callable[[int], int] = lambda k: 0, weak: bool = False) -> Script:
    """A page with a strong (or weak) ETag of its version, answering If-None-Match with 304."""

    def script(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        v = versions(k)
        tag = f'"v{v}"'
        tag = "W/" + tag if weak else tag
        sent = headers.get("if-none-match")
        if sent is not None and sent.removeprefix("W/") == tag.removeprefix("W/"):
            return 304, v, {"ETag": tag}
        return 200, v, {"ETag": tag}

    return script


def plain(versions: Callable[[int], int] = lambda k: 0) -> Script:
    """A page without validators (never a 304)."""
    return lambda k, headers: (200, versions(k), {})


CONTINUOUS = {
    "OPIC_CONTINUOUS": True,
    "CONCURRENT_REQUESTS": 2,
    "LOG_LEVEL": "INFO",
}


def run(tmp_path: Path, site: ScriptedSite, responses: int, **settings: Any) -> tuple[list, dict]:
    return crawl(
        tmp_path, site.url(), CLOSESPIDER_PAGECOUNT=responses, **{**CONTINUOUS, **settings}
    )


def items_of(items: list[dict], site: ScriptedSite, path: str) -> list[dict]:
    return [r for r in items if r["url"] == site.url(path)]


def test_refetches_send_validators_and_a_304_calls_no_callback(tmp_path):
    with ScriptedSite({"/": honest(), "/a": honest(), "/b": honest()}) as site:
        items, stats = run(tmp_path, site, 40)
    for path in ("/", "/a", "/b"):
        hits = site.of(path)
        assert len(hits) >= 3, hits
        assert hits[0].inm is None and hits[0].status == 200
        # Every later request of an unchanged page is conditional and answered 304, but the
        # audits' (one refetch in 16 of a host goes without validators).
        conditional = [h for h in hits[1:] if h.inm is not None]
        assert all(h.inm == '"v0"' and h.status == 304 for h in conditional)
        assert len(conditional) >= len(hits[1:]) - 2
        # Parsed once: the 304s and the audits' unchanged 200s call no callback.
        assert len(items_of(items, site, path)) == 1
    assert stats["opic/unchanged"] >= 30
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_without_validators_the_callback_sees_changed_content_only(tmp_path):
    # /a changes at its 4th and 9th requests; /b never changes. No validators at all.
    change = {"/": plain(), "/a": plain(lambda k: (k >= 3) + (k >= 8)), "/b": plain()}
    with ScriptedSite(change) as site:
        items, stats = run(tmp_path, site, 45)
    for path in ("/", "/a", "/b"):
        hits = site.of(path)
        assert all(h.inm is None and h.ims is None for h in hits)
        versions = [h.version for h in hits]
        # One callback per version seen: the first fetch, then each fetch that found a change.
        seen_changes = 1 + sum(1 for x, y in zip(versions, versions[1:]) if x != y)
        assert len(items_of(items, site, path)) == seen_changes, versions
    assert max(h.version for h in site.of("/a")) == 2  # (the crawl saw both changes)
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_a_signature_of_the_body_sees_every_byte(tmp_path):
    # The <script> line changes at every request: "body" signatures call the callback each
    # time, "text" ones (the default) only once.
    pages = {"/": plain(), "/a": plain()}
    with ScriptedSite(pages) as site:
        items, _ = run(tmp_path / "body", site, 12, OPIC_SIGNATURE="body")
    assert len(items_of(items, site, "/a")) == len(site.of("/a"))
    with ScriptedSite(pages) as site:
        items, _ = run(tmp_path / "text", site, 12)
    assert len(items_of(items, site, "/a")) == 1 < len(site.of("/a"))


def test_the_callback_of_an_unchanged_page_can_be_asked_for(tmp_path):
    pages = {"/": plain(), "/a": plain()}
    with ScriptedSite(pages) as site:
        items, stats = run(tmp_path, site, 12, OPIC_UNCHANGED_CALLBACK=True)
    # Every fetch parsed (no validators: every answer a 200), each visit done once.
    assert len(items_of(items, site, "/a")) == len(site.of("/a")) > 1
    assert stats["opic/unchanged"] >= len(site.of("/a")) - 1
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_a_refetch_redirected_elsewhere_sends_the_target_none_of_its_validators(tmp_path):
    # /a is a page (ETag "a0") until its 3rd request, then a temporary redirect to /c (ETag
    # "v0"), which nothing else links to.
    def moving(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        if k >= 2:
            return 302, 0, {"Location": "/c"}
        if headers.get("if-none-match") == '"a0"':
            return 304, 0, {"ETag": '"a0"'}
        return 200, 0, {"ETag": '"a0"'}

    with ScriptedSite({"/": honest(), "/a": moving, "/c": honest()}) as site:
        items, stats = run(tmp_path, site, 30)
    assert [h.status for h in site.of("/a")][:3] == [200, 304, 302]
    hits = site.of("/c")
    assert hits and hits[0].inm is None  # (not /a's "a0": the validators were /a's)
    assert all(h.inm in (None, '"v0"') for h in hits)
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_weak_etags_are_sent_back_and_honoured(tmp_path):
    pages = {"/": honest(weak=True), "/a": honest(weak=True)}
    with ScriptedSite(pages) as site:
        items, _ = run(tmp_path, site, 20)
    later = [h for h in site.of("/a")[1:] if h.inm is not None]
    assert later and all(h.inm == 'W/"v0"' and h.status == 304 for h in later)
    assert len(items_of(items, site, "/a")) == 1


def test_conditional_requests_can_be_turned_off_and_a_requests_own_header_wins(tmp_path):
    with ScriptedSite({"/": honest(), "/a": honest()}) as site:
        items, _ = run(tmp_path, site, 15, OPIC_CONDITIONAL=False)
    assert all(h.inm is None for h in site.hits)
    assert all(h.status == 200 for h in site.hits)
    # Unchanged content still calls no callback (the signature sees it).
    assert len(items_of(items, site, "/a")) == 1


def test_a_last_modified_that_is_no_http_date_is_never_sent_back(tmp_path):
    def script(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        status, v, extra = honest()(k, headers)
        return status, v, {**extra, "Last-Modified": "yesterday, about noon"}

    with ScriptedSite({"/": honest(), "/a": script}) as site:
        run(tmp_path, site, 15)
    later = site.of("/a")[1:]
    assert any(h.inm == '"v0"' for h in later)  # (the ETag is sent back: conditional)
    assert all(h.ims is None for h in later)


def stale_validators() -> Script:
    """A constant ETag while the content changes at every 5th request: a conditional request
    gets a false 304."""

    def script(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        v = k // 5
        if headers.get("if-none-match") == '"same"':
            return 304, v, {"ETag": '"same"'}
        return 200, v, {"ETag": '"same"'}

    return script


def always_304() -> Script:
    """Honest ETags on full responses (one per version; the content changes at every 3rd
    request), and a 304 to every conditional request, whatever changed."""

    def script(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        v = k // 3
        if headers.get("if-none-match") is not None:
            return 304, v, {"ETag": f'"v{v}"'}
        return 200, v, {"ETag": f'"v{v}"'}

    return script


def noisy_validators() -> Script:
    """A new ETag at every response of unchanged content: never a 304."""
    return lambda k, headers: (200, 0, {"ETag": f'"r{k}"'})


@pytest.mark.parametrize("liar", ["stale", "noisy", "always-304"])
def test_a_host_whose_validators_lie_is_no_longer_sent_them(tmp_path, liar):
    script = {"stale": stale_validators, "noisy": noisy_validators, "always-304": always_304}[liar]
    with ScriptedSite({"/": script(), "/a": script(), "/b": script()}) as site:
        items, stats = run(tmp_path, site, 160)
    hits = site.hits
    # Some requests carried the validators at first; the audits' full responses showed them
    # to disagree with the content, and the last requests carry none.
    assert any(h.inm for h in hits[:60])
    assert not any(h.inm for h in hits[-30:]), [h.inm for h in hits[-30:]]
    if liar == "always-304":
        log = (tmp_path / "crawl.log").read_text()
        assert log.count("answers 304 (unchanged) to conditional requests") == 1
    if liar == "stale":
        # Once they are no longer trusted, every change is seen: the callback is called for
        # each version the server served in full after the last request with validators.
        last_conditional = max(n for n, h in enumerate(hits) if h.inm)
        for path in ("/a", "/b"):
            served = {h.version for h in hits[last_conditional + 1 :] if h.path == path}
            got = {r["title"] for r in items_of(items, site, path)}
            assert {f"{path} version {v}" for v in served} <= got
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_the_distrust_of_a_liar_survives_a_jobdir_resume_and_is_in_the_report(tmp_path):
    """A host found to answer 304 to changed pages is not trusted again by the resumed crawl
    (the verdict is kept in the state), and the report names it."""
    job = str(tmp_path / "job")
    pages = {"/": always_304(), "/a": always_304(), "/b": always_304()}
    with ScriptedSite(pages) as site:
        run(tmp_path / "first", site, 160, JOBDIR=job)
        assert not any(h.inm for h in site.hits[-30:])
        before = len(site.hits)
        run(tmp_path / "resumed", site, 230, JOBDIR=job)
        assert len(site.hits) > before and not any(h.inm for h in site.hits[before:])
    with open_state(Path(job) / "opic.sqlite") as state:
        report = build_report(state)
    assert "found lying" in report and "304 (unchanged) for pages that had changed" in report


def test_the_distrust_of_a_liar_passes_to_the_next_process_of_a_redis_crawl(tmp_path, redis_url):
    """One process finds the liar out; the next process on the crawl (its new owner) sends it
    no validator; an unreadable kept verdict is one warning, and that host is judged again."""
    redis = on_redis(redis_url, tmp_path)
    pages = {"/": always_304(), "/a": always_304(), "/b": always_304()}
    with ScriptedSite(pages) as site:
        run(tmp_path / "first", site, 160, **redis)
        assert not any(h.inm for h in site.hits[-30:])
        import redis as redis_client

        client = redis_client.Redis.from_url(redis_url)
        key = "{" + redis["OPIC_REDIS_KEY"] + "}:validators"
        assert client.hkeys(key) == [b"127.0.0.1"]
        client.hset(key, "127.0.0.9", "{not json")
        before = len(site.hits)
        run(tmp_path / "next", site, 230, **redis)
        assert len(site.hits) > before and not any(h.inm for h in site.hits[before:])
    log = (tmp_path / "next" / "crawl.log").read_text()
    assert log.count("127.0.0.9's validators is unreadable") == 1


def timed(period: float, lie: bool, modified: str | None = None) -> Script:
    """A page whose version steps every ``period`` seconds (``math.inf``: never); its ETag
    honest on full responses; ``lie``: a 304 to every conditional request (else an honest
    304); ``modified``: a ``Last-Modified`` sent with each response."""
    start = time.monotonic()
    extra = {} if modified is None else {"Last-Modified": modified}

    def script(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        v = int((time.monotonic() - start) / period)
        sent = headers.get("if-none-match")
        status = 304 if sent is not None and (lie or sent == f'"v{v}"') else 200
        return status, v, {"ETag": f'"v{v}"', **extra}

    return script


def static(lie: bool) -> Script:
    """A page that never changes, its ``Last-Modified`` a day old and true; ``lie`` as
    :func:`timed`'s."""
    return timed(math.inf, lie, formatdate(time.time() - 86400.0, usegmt=True))


def test_the_rates_a_liar_taught_are_forgotten_when_it_is_found_out(tmp_path):
    """Two hosts whose pages change alike, one answering 304 to every conditional request:
    once it is found out, what its 304s said ("unchanged") is dropped, and its pages' learned
    change rates come within 2x of the honest host's (judged by the rates in the export).
    (Here the lie lasts about 50 requests, too short for the rates to fall 2x without the
    forgetting: ``test_refresh`` checks that the lie's evidence is dropped.) Its true
    ``Last-Modified`` on full responses still dates its pages' changes: its static page is
    learned as static as the honest host's."""
    paths = ["/", "/a", "/b"]
    with (
        ScriptedSite({p: timed(1.0, False) for p in paths} | {"/s": static(False)}) as honest_site,
        ScriptedSite(
            {p: timed(1.0, True) for p in paths} | {"/s": static(True)}, host="127.0.0.2"
        ) as liar,
    ):
        honest_site.links = {"/": paths[1:] + ["/s", liar.url("/")]}
        liar.links = {"/": paths[1:] + ["/s"]}
        crawl(
            tmp_path,
            honest_site.url(),
            allowed=["127.0.0.1", "127.0.0.2"],
            CLOSESPIDER_PAGECOUNT=400,
            DOWNLOAD_DELAY=0.05,
            **CONTINUOUS,
        )
    log = (tmp_path / "crawl.log").read_text()
    assert log.count("127.0.0.2 answers 304 (unchanged)") == 1
    found = max(n for n, h in enumerate(liar.hits) if h.inm is not None)
    assert len(liar.hits) - found > 30  # (full refetches after it was found out)
    with open_state(tmp_path / ".scrapy" / "opic" / "site.sqlite") as state:
        rates = {p.url: p.change_rate for p in state.pages()}
    honest_rates = sorted(rates[honest_site.url(p)] for p in paths)
    liar_rates = sorted(rates[liar.url(p)] for p in paths)
    median_honest, median_liar = honest_rates[1], liar_rates[1]
    assert median_honest / 2 <= median_liar <= 2 * median_honest, (honest_rates, liar_rates)
    static_honest, static_liar = rates[honest_site.url("/s")], rates[liar.url("/s")]
    assert static_honest / 2 <= static_liar <= 2 * static_honest, (static_honest, static_liar)


def test_a_304_to_a_request_that_sent_no_validator_is_a_failed_fetch(tmp_path):
    def bogus(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        return (304, 0, {}) if k == 0 else (200, 0, {"ETag": '"v0"'})

    # (The crawl's 80 responses take 0.4 s at least: /a's backoff of 0.2 s is over before.)
    with ScriptedSite({"/": honest(), "/a": bogus}) as site:
        items, stats = run(tmp_path, site, 80, OPIC_BACKOFF=0.2, DOWNLOAD_DELAY=0.01)
    hits = site.of("/a")
    assert hits[0].status == 304 and hits[0].inm is None
    assert hits[1].status == 200  # fetched again (not a final outcome), then parsed once
    assert len(items_of(items, site, "/a")) == 1
    assert stats["opic/failed"] >= 1
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_a_304_for_a_page_with_no_kept_links_pays_the_virtual_page(tmp_path):
    # The start request carries its own If-None-Match: the home page answers 304 at its first
    # fetch, before it was ever parsed: an unchanged visit with no links to pay.
    with ScriptedSite({"/": honest(), "/a": honest()}) as site:
        items, stats = run(tmp_path, site, 6, DEFAULT_REQUEST_HEADERS={"If-None-Match": '"v0"'})
    assert all(h.status == 304 for h in site.hits)
    assert items == []
    assert stats["opic/unchanged"] >= 1
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_with_scrapys_http_cache_no_double_304_and_no_stale_copy(tmp_path):
    # /a changes at its 6th request. The RFC 2616 cache policy revalidates its copy with its
    # own validators; the spider never sees a 304, and sees the change.
    pages = {"/": honest(), "/a": honest(lambda k: int(k >= 5))}
    with ScriptedSite(pages) as site:
        items, stats = run(
            tmp_path,
            site,
            30,
            HTTPCACHE_ENABLED=True,
            HTTPCACHE_POLICY="scrapy.extensions.httpcache.RFC2616Policy",
            HTTPCACHE_ALWAYS_STORE=True,
            HTTPCACHE_DIR=str(tmp_path / "cache"),
        )
    hits = site.of("/a")
    assert max(h.version for h in hits) == 1
    titles = [r["title"] for r in items_of(items, site, "/a")]
    assert titles == ["/a version 0", "/a version 1"], titles
    # Each refetch sent one validator, that of the copy it then had.
    for h in hits[1:]:
        if h.inm is not None:
            assert h.inm in ('"v0"', '"v1"') and "," not in h.inm
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_a_page_that_goes_from_200_to_304_to_404_is_closed_and_holds_no_importance(tmp_path):
    def going(k: int, headers: dict[str, str]) -> tuple[int, int, dict[str, str]]:
        if k >= 3:
            return 404, -1, {}
        return honest()(k, headers)

    with ScriptedSite({"/": honest(), "/a": going, "/b": honest()}) as site:
        items, stats = run(tmp_path, site, 40)
    statuses = [h.status for h in site.of("/a")]
    assert statuses[:4] == [200, 304, 304, 404], statuses
    assert statuses.count(404) == 1  # closed for good: never asked again
    with open_state(tmp_path / ".scrapy" / "opic" / "site.sqlite") as state:
        pages = {p.url: p for p in state.pages()}
        assert pages[site.url("/a")].status == "http_404"
        assert pages[site.url("/a")].importance == 0.0
        assert sum(p.importance for p in pages.values()) == pytest.approx(1.0, abs=1e-9)
        assert "change_rate" in state.page_columns
        # Nothing changed but /a's going: every open page is "never seen to change".
        bands = state.change_summary()["bands"]
        assert bands[0][0] == "never seen to change" and bands[0][1] == 2
        assert sum(b[1] for b in bands) == 2  # (/a is closed: no refetch looks at it again)
        assert "<h2>Change</h2>" in build_report(state)
        write_export(state, str(tmp_path / "pages.csv"))
    with open(tmp_path / "pages.csv", newline="") as fh:
        rows = {r["url"]: r for r in csv.DictReader(fh)}
    assert float(rows[site.url("/b")]["change_rate"]) > 0  # (a smoothed estimate: never 0)
    assert rows[site.url("/b")]["last_changed"] == ""
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)


def test_a_resumed_crawl_refetches_with_the_validators_and_rates_it_had(tmp_path):
    jobdir = str(tmp_path / "job")
    with ScriptedSite({"/": honest(), "/a": honest(), "/b": honest()}) as site:
        items, _ = run(tmp_path / "one", site, 12, JOBDIR=jobdir)
        before = len(site.hits)
        again, stats = run(tmp_path / "two", site, 12, JOBDIR=jobdir)
        after = site.hits[before:]
    assert len(items) == 3  # every page parsed once, in the first run
    # The second run's requests carry the validators of the first run's responses, its pages
    # are unchanged (304s): no callback, no item again.
    assert after and all(h.inm == '"v0"' and h.status == 304 for h in after if h.inm)
    assert sum(1 for h in after if h.inm) >= len(after) - 1  # (an audit may go without)
    assert again == []
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)
    with open_state(Path(jobdir) / "opic.sqlite") as state:
        bands = state.change_summary()["bands"]
        assert bands[0][1] == 3  # three pages seen, none changing


def on_redis(redis_url: str, tmp_path: Path) -> dict[str, Any]:
    """A crawl of its own on the test's Redis (the key unique to the test run)."""
    key = f"{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    return {"OPIC_STORE": "redis", "OPIC_REDIS_URL": redis_url, "OPIC_REDIS_KEY": key}


def test_a_redis_crawl_refetches_by_change_as_the_embedded_store_does(tmp_path, redis_url):
    """Two processes on Redis, the pages on two hosts (so two partitions, links between them):
    validators sent, 304s paid over the kept links (those into the other host's partition by
    transfer), the callback called once per version, rates in the export, cash 1."""
    change = {"/": honest(), "/a": honest(lambda k: k >= 4), "/b": honest(), "/c": honest()}
    with ScriptedSite(change) as one, ScriptedSite(change, host="127.0.0.2") as two:
        assert partition_of(one.url(), None, 256) != partition_of(two.url(), None, 256)
        one.links = {"/": ["/a", "/b", two.url("/")], "/a": ["/c"]}
        two.links = {"/": ["/a", "/b", one.url("/c")], "/a": ["/c"]}
        redis = on_redis(redis_url, tmp_path)
        runs = [
            crawl(
                tmp_path / name,
                site.url(),
                allowed=["127.0.0.1", "127.0.0.2"],
                CLOSESPIDER_PAGECOUNT=40,
                **{**CONTINUOUS, **redis},
            )
            for name, site in (("first", one), ("second", two))
        ]
        hits = one.hits + two.hits
    items = [row for got, _ in runs for row in got]
    for site in (one, two):
        refetches = []
        for path in ("/", "/b", "/c"):
            got = site.of(path)
            assert got and got[0].inm is None and got[0].status == 200
            assert all(h.status == 304 for h in got[1:] if h.inm is not None)
            assert len(items_of(items, site, path)) == 1  # parsed once
            refetches += got[1:]
        # (Each process audits its hosts' validators: one refetch in 16 goes without.)
        audits = [h for h in refetches if h.inm is None]
        assert len(audits) <= len(refetches) / 16 + 2, audits
        versions = [h.version for h in site.of("/a")]
        seen = 1 + sum(1 for x, y in zip(versions, versions[1:]) if x != y)
        assert len(items_of(items, site, "/a")) == seen
    assert sum(h.status == 304 for h in hits) >= 20
    assert sum(stats.get("opic/unchanged", 0) for _, stats in runs) >= 20
    with open_state(f"{redis_url}#{redis['OPIC_REDIS_KEY']}") as state:
        assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
        assert "change_rate" in state.page_columns
        pages = {p.url: p for p in state.pages()}
        assert pages[one.url("/b")].change_rate > 0  # (smoothed: never 0)
        assert sum(p.importance for p in pages.values()) == pytest.approx(1.0, abs=1e-9)
        assert state.change_summary()["bands"][0][0] == "never seen to change"
        assert "<h2>Change</h2>" in build_report(state)


def test_a_redis_crawl_refetching_by_change_resumes_with_its_rates(tmp_path, redis_url):
    """A Redis crawl stopped and started again: its partitions' checkpoints and journals keep
    the kept links and change observations, its requests the validators."""
    redis = on_redis(redis_url, tmp_path)
    with ScriptedSite({"/": honest(), "/a": honest(), "/b": honest()}) as site:
        items, _ = run(tmp_path / "one", site, 12, **redis)
        before = len(site.hits)
        again, stats = run(tmp_path / "two", site, 12, **redis)
        after = site.hits[before:]
    assert len(items) == 3 and again == []  # parsed once, in the first run
    assert after and all(h.status == 304 for h in after if h.inm)
    assert sum(1 for h in after if h.inm) >= len(after) - 1
    assert stats["opic/unchanged"] >= 6
    with open_state(f"{redis_url}#{redis['OPIC_REDIS_KEY']}") as state:
        assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
        bands = state.change_summary()["bands"]
        assert bands[0][1] == 3  # three pages seen, none changing
