"""Exporting importance: the Python API, the commands, OPIC_EXPORT, importance in items, the log
line, reading a state while a crawl writes it, and one-line errors that never touch the state."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scrapy

from scrapy_opic._backends.sqlite_state import CHUNK, StateReader
from scrapy_opic.export import (
    CHANGE_COLUMNS,
    PAGE_COLUMNS,
    SITE_COLUMNS,
    _fast_page_lines,
    host_of,
    open_state,
    registered_domain,
    write_export,
)
from scrapy_opic.opic.constants import FETCHED
from scrapy_opic.opic.contract import Entry
from tests.support.frontiers import L, one, sqlite_crawl, visit
from tests.support.sites import Site
from tests.test_crawl import RUNNER, crawl, graph  # noqa: F401  (graph is a fixture)


def scrapy_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["scrapy", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# -- a state built without Scrapy: several hosts, some pages fetched, more than one chunk -------
HOSTS = [
    "http://a.example.com",
    "https://b.example.com:8443",
    "http://news.bbc.co.uk",
    "http://127.0.0.1:8000",
    "http://user@[::1]:8080",
]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, list[str]]:
    """A frontier crawled for a while on a random graph over 5 hosts, committed to a store."""
    rng = np.random.default_rng(3)
    n = CHUNK + 900  # two chunks of page rows
    urls = [f"{HOSTS[k % len(HOSTS)]}/page/{k}" for k in range(n)]
    path = tmp_path_factory.mktemp("synthetic") / "s.sqlite"
    f = sqlite_crawl(path, refresh=1.0, meta={"spider": "synthetic"})
    for k in range(n):
        one(f).page(f"k{k}", urls[k])
    f.schedule([Entry("k0", urls[0], payload="r")])
    for _ in range(1500):
        lease = f.pop()
        if lease is None:
            break
        kids = [int(k) for k in rng.integers(0, n, 6)]
        visit(f, lease, [L(f"k{k}", urls[k], payload="r") for k in kids])
    f.close([])
    return path, urls


def test_pages_stream_every_column_consistently(synthetic):
    path, urls = synthetic
    with open_state(path) as state:
        pages = list(state.pages())
        with StateReader(path) as reader:
            e = reader.engine()  # every page in memory: the reference
        assert [p.url for p in pages] == urls
        assert sum(p.importance for p in pages) == pytest.approx(1.0)
        np.testing.assert_allclose([p.importance for p in pages], e.importance())
        assert sum(p.cash for p in pages) + e.virtual_cash == pytest.approx(1.0, abs=1e-12)
        fetched = (e.flags[: e.n] & FETCHED) != 0
        assert [p.fetched for p in pages] == fetched.tolist()
        assert 0 < fetched.sum() < e.n  # the fixture leaves both kinds
        assert all((p.visits > 0) == p.fetched and (p.last_visit > 0) == p.fetched for p in pages)
        assert all(p.history == 0 for p in pages if not p.fetched)
        assert [p.host for p in pages[:5]] == [
            "a.example.com",
            "b.example.com",
            "news.bbc.co.uk",
            "127.0.0.1",
            "::1",
        ]
        only = list(state.pages(fetched_only=True))
        assert len(only) == fetched.sum() and all(p.fetched for p in only)


def test_top_is_the_largest_importance_in_order(synthetic):
    path, urls = synthetic
    with open_state(path) as state:
        x = state.importance()
        top = state.top(25)
        assert [p.url for p in top] == [urls[i] for i in np.argsort(-x, kind="stable")[:25]]
        fetched_top = state.top(25, fetched_only=True)
        assert all(p.fetched for p in fetched_top)
        mask = state.fetched_mask()
        best = np.sort(x[mask])[::-1][:25]
        np.testing.assert_allclose([p.importance for p in fetched_top], best)
        assert len(state.top(10**9)) == state.n


def test_by_site_sums_per_host_and_registered_domain(synthetic):
    path, urls = synthetic
    with open_state(path) as state:
        pages = list(state.pages())
        sites = state.by_site()
    per_host: dict[str, float] = {}
    for p in pages:
        per_host[p.host] = per_host.get(p.host, 0.0) + p.importance
    hosts = {s.site: s for s in sites if s.level == "host"}
    domains = {s.site: s for s in sites if s.level == "domain"}
    assert set(hosts) == {"a.example.com", "b.example.com", "news.bbc.co.uk", "127.0.0.1", "::1"}
    for h, imp in per_host.items():
        assert hosts[h].importance == pytest.approx(imp)
        assert hosts[h].pages == sum(p.host == h for p in pages)
        assert hosts[h].fetched == sum(p.host == h and p.fetched for p in pages)
    assert set(domains) == {"example.com", "bbc.co.uk", "127.0.0.1", "::1"}
    assert domains["example.com"].importance == pytest.approx(
        per_host["a.example.com"] + per_host["b.example.com"]
    )
    assert (
        domains["example.com"].pages == hosts["a.example.com"].pages + hosts["b.example.com"].pages
    )
    for level in (hosts, domains):
        assert sum(s.importance for s in level.values()) == pytest.approx(1.0)
        assert sum(s.pages for s in level.values()) == len(urls)
    imps = [s.importance for s in sites if s.level == "host"]
    assert imps == sorted(imps, reverse=True)


def test_host_and_domain_helpers():
    assert host_of("http://User@WWW.Example.COM:8080/a?b#c") == "www.example.com"
    assert host_of("https://[2001:db8::1]:443/") == "2001:db8::1"
    assert host_of("http://h?x=1/2") == "h"
    assert registered_domain("news.bbc.co.uk") == "bbc.co.uk"
    assert registered_domain("a.b.example.com") == "example.com"
    assert registered_domain("127.0.0.1") == "127.0.0.1"
    assert registered_domain("localhost") == "localhost"


def test_csv_and_jsonl_hold_the_same_rows(synthetic, tmp_path):
    path, _ = synthetic
    with open_state(path) as state:
        assert write_export(state, str(tmp_path / "p.csv")) == state.n
        assert write_export(state, str(tmp_path / "p.jsonl")) == state.n
        n_sites = write_export(state, str(tmp_path / "s.jl"), by_site=True, top=2)
    rows = read_csv(tmp_path / "p.csv")
    lines = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert list(rows[0]) == list(PAGE_COLUMNS) and list(lines[0]) == list(PAGE_COLUMNS)
    for r, j in zip(rows, lines):
        assert r["url"] == j["url"] and float(r["importance"]) == j["importance"]
        assert float(r["cash"]) == j["cash"] and int(r["visits"]) == j["visits"]
        assert (r["fetched"] == "True") == j["fetched"]
    sites = [json.loads(x) for x in (tmp_path / "s.jl").read_text().splitlines()]
    assert n_sites == 4 and list(sites[0]) == list(SITE_COLUMNS)
    assert [s["level"] for s in sites] == ["host", "host", "domain", "domain"]
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_export_streams_in_chunks(synthetic):
    """Pages are built one stored chunk at a time: taking the first chunk has read one row of
    page URLs, not all of them."""
    path, _ = synthetic
    with open_state(path) as state:
        sql: list[str] = []
        state._reader._con.set_trace_callback(sql.append)

        def reads() -> int:  # statements that read page rows
            return sum("opic_pages" in q for q in sql)

        chunks = state.page_chunks()
        first = next(chunks)
        assert len(first) == CHUNK and reads() == 1
        assert [len(c) for c in chunks] == [900] and reads() == 2


# -- a real crawl: commands, OPIC_EXPORT, item field, log line --------------------------------
@pytest.fixture(scope="module")
def crawled(tmp_path_factory, graph):  # noqa: F811
    tmp = tmp_path_factory.mktemp("crawled")
    with Site(graph, delay=0.003) as site:
        items, stats = crawl(
            tmp,
            site.url(0),
            CONCURRENT_REQUESTS=4,
            OPIC_EXPORT={"end.csv": {}, "top-{spider}.jsonl": {"top": 10}},
            OPIC_ITEM_FIELD="importance",
            LOGSTATS_INTERVAL=0.2,
        )
    return tmp, items, stats


@pytest.mark.slow
def test_export_command_writes_every_column(crawled, graph):  # noqa: F811
    tmp, _items, stats = crawled
    proc = scrapy_cmd("opic-export", "site", "-o", "imp.csv", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"{graph.n} pages written to imp.csv"
    rows = read_csv(tmp / "imp.csv")
    assert list(rows[0]) == list(PAGE_COLUMNS) and len(rows) == graph.n
    assert sum(float(r["importance"]) for r in rows) == pytest.approx(1.0)
    cash = sum(float(r["cash"]) for r in rows)
    assert cash + stats["opic/virtual_cash"] == pytest.approx(1.0, abs=1e-9)
    assert all(r["fetched"] == "True" and r["visits"] == "1" for r in rows)
    assert {r["host"] for r in rows} == {"127.0.0.1"}
    assert all(float(r["last_visit"]) > 0 for r in rows)
    # The history is the link credit a page absorbed at its visit: every page but the start
    # page, visited before any link to it was followed, received some first.
    assert [r["url"] for r in rows if not float(r["history"]) > 0] == [rows[0]["url"]]
    assert rows[0]["url"].endswith("/p/0.html")
    # OPIC_EXPORT wrote the same file at the end of the crawl.
    assert (tmp / "end.csv").read_text() == (tmp / "imp.csv").read_text()
    top = [json.loads(x) for x in (tmp / "top-site.jsonl").read_text().splitlines()]
    by_importance = sorted(rows, key=lambda r: -float(r["importance"]))
    assert [t["url"] for t in top] == [r["url"] for r in by_importance[:10]]


@pytest.mark.slow
def test_export_command_options(crawled):
    tmp, _items, _stats = crawled
    full = read_csv(tmp / "end.csv")
    proc = scrapy_cmd("opic-export", "site", "-o", "-", "--top", "5", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    top = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["url"] for r in top] == [
        r["url"] for r in sorted(full, key=lambda r: -float(r["importance"]))[:5]
    ]
    proc = scrapy_cmd(
        "opic-export", "site", "-o", "-", "--format", "jsonl", "--fetched-only", cwd=tmp
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == len(full)
    proc = scrapy_cmd("opic-export", "site", "-o", "sites.csv", "--by-site", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    sites = read_csv(tmp / "sites.csv")
    assert [(s["level"], s["site"], s["pages"]) for s in sites] == [
        ("host", "127.0.0.1", str(len(full))),
        ("domain", "127.0.0.1", str(len(full))),
    ]
    assert float(sites[0]["importance"]) == pytest.approx(1.0)


@pytest.mark.slow
def test_top_command_prints_a_table(crawled):
    tmp, _items, _stats = crawled
    full = sorted(read_csv(tmp / "end.csv"), key=lambda r: -float(r["importance"]))
    proc = scrapy_cmd("opic-top", "site", "-n", "3", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "pages known" in lines[0] and lines[1].split()[:2] == ["rank", "importance"]
    assert len(lines) == 5
    assert [ln.split()[-1] for ln in lines[2:]] == [r["url"] for r in full[:3]]


@pytest.mark.slow
def test_items_carry_their_pages_importance(crawled):
    _tmp, items, _stats = crawled
    values = [r["importance"] for r in items]
    assert len(values) == len(items) and all(0 < v < 1 for v in values)
    # The start page held all the cash at its visit, but cash is not importance: with nothing
    # linking to it yet, its items report its teleport share, well below the pages that links
    # pointed to (it reported the largest importance of all when importance was cash).
    assert values[0] < 0.5 * max(values)


@pytest.mark.slow
def test_periodic_log_line(crawled):
    tmp, _items, _stats = crawled
    lines = [ln for ln in (tmp / "crawl.log").read_text().splitlines() if "OPIC: " in ln]
    assert lines, "no OPIC log line"
    assert all("pages fetched" in ln and "G=" in ln and "top page: http" in ln for ln in lines)


# -- bad input: one line, non-zero exit, nothing modified -------------------------------------
def snapshot_dir(d: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.iterdir())
        if p.is_file()
    }


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int = 1) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.slow
def test_bad_input_is_one_clear_error_and_touches_nothing(synthetic, tmp_path):
    good, _ = synthetic
    d = tmp_path / "states"
    d.mkdir()
    (d / "garbage.sqlite").write_bytes(b"not a database at all\n" * 50)
    data = good.read_bytes()
    (d / "truncated.sqlite").write_bytes(data[: len(data) // 3])
    con = sqlite3.connect(d / "other.sqlite")  # a sqlite file of somebody else's
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    (d / "good.sqlite").write_bytes(data)
    before = snapshot_dir(d)

    cases = [
        ("opic-export", "nospider", "-o", str(tmp_path / "o.csv")),  # spider with no state
        ("opic-export", "--state", str(d / "missing.sqlite"), "-o", str(tmp_path / "o.csv")),
        ("opic-export", "--state", str(d / "garbage.sqlite"), "-o", str(tmp_path / "o.csv")),
        ("opic-export", "--state", str(d / "truncated.sqlite"), "-o", str(tmp_path / "o.csv")),
        ("opic-export", "--state", str(d / "other.sqlite"), "-o", str(tmp_path / "o.csv")),
        ("opic-export", "--state", str(d / "good.sqlite"), "-o", str(tmp_path / "o.xml")),
        ("opic-export", "--state", str(d / "good.sqlite"), "-o", str(tmp_path / "no/such/o.csv")),
        ("opic-top", "nospider"),
        ("opic-top", "--state", str(d / "garbage.sqlite")),
        ("opic-report", "--state", str(d / "other.sqlite"), "-o", str(tmp_path / "r.html")),
    ]
    for args in cases:
        assert_one_line_error(scrapy_cmd(*args, cwd=tmp_path))
    assert_one_line_error(scrapy_cmd("opic-export", "-o", "x.csv", cwd=tmp_path), code=2)
    assert snapshot_dir(d) == before  # no state modified, no -wal/-shm file left
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "o.xml").exists()
    assert not list(tmp_path.glob(".*"))  # no temporary output left behind
    assert not (tmp_path / ".scrapy").exists()  # looking for a state creates no directory
    # Inside a Scrapy project too (where Scrapy's data_path would create .scrapy/).
    project = tmp_path / "proj"
    (project / "proj").mkdir(parents=True)
    (project / "proj" / "__init__.py").write_text("")
    (project / "proj" / "settings.py").write_text("BOT_NAME = 'proj'\n")
    (project / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    assert_one_line_error(scrapy_cmd("opic-export", "nospider", "-o", "o.csv", cwd=project))
    assert_one_line_error(scrapy_cmd("opic-top", "nospider", cwd=project))
    assert not (project / ".scrapy").exists()


# -- reading while a crawl writes ---------------------------------------------------------------
@pytest.mark.slow
def test_reading_a_state_while_the_crawl_commits(tmp_path, graph):  # noqa: F811
    """Open the state again and again during a crawl that commits every few visits: every read
    is one consistent snapshot (cash 1, importance 1, a URL per page), and the crawl is neither
    blocked nor corrupted by the readers."""
    state_file = tmp_path / ".scrapy" / "opic" / "site.sqlite"
    with Site(graph, delay=0.01) as site:
        config = {
            "start_url": site.url(0),
            "settings": {"CONCURRENT_REQUESTS": 2, "OPIC_COMMIT_VISITS": 3},
            "items": str(tmp_path / "items.jsonl"),
            "stats": str(tmp_path / "stats.json"),
        }
        (tmp_path / "config.json").write_text(json.dumps(config))
        proc = subprocess.Popen(
            [sys.executable, str(RUNNER), str(tmp_path / "config.json")],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen = set()
        reads = 0
        while proc.poll() is None:
            if not state_file.exists():
                time.sleep(0.01)
                continue
            try:
                state = open_state(state_file)
            except Exception as exc:  # the crawl may not have committed its first snapshot
                assert "holds no OPIC state" in str(exc) or "no such table" in str(exc), exc
                continue
            with state:
                pages = list(state.pages())
                assert len(pages) == state.n and all(p.url.startswith("http") for p in pages)
                assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
                if state.n:
                    assert sum(p.importance for p in pages) == pytest.approx(1.0)
                seen.add(int(state.stats()["visits"]))
                reads += 1
        _out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["opic/total_cash"] == pytest.approx(1.0, abs=1e-9)
    assert stats["opic/visited"] == graph.n
    assert len(seen) >= 5, (reads, sorted(seen))  # the reads saw the crawl progress


def test_urls_that_need_quoting_round_trip(tmp_path):
    """URLs with commas, quotes, backslashes or non-ASCII text leave the fast row paths for the
    quoting writers, and read back exactly in both formats."""
    urls = [
        "http://a.example/plain",
        'http://a.example/q?x="1",y=2',
        "http://a.example/back\\slash",
        "http://b.example/caf\u00e9/\u65e5\u672c",
    ]
    f = sqlite_crawl(tmp_path / "q.sqlite", refresh=1.0)
    f.schedule([Entry(f"k{k}", url, payload="r") for k, url in enumerate(urls)])
    lease = f.pop()
    visit(f, lease, [L(f"k{k}", urls[k]) for k in (1, 2, 3)])
    f.close([])
    with open_state(tmp_path / "q.sqlite") as state:
        write_export(state, str(tmp_path / "q.csv"))
        write_export(state, str(tmp_path / "q.jsonl"))
        expected = list(state.pages())
    with open(tmp_path / "q.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    lines = [json.loads(x) for x in (tmp_path / "q.jsonl").read_text("utf-8").splitlines()]
    assert [r["url"] for r in rows] == [j["url"] for j in lines] == urls
    for r, j, p in zip(rows, lines, expected):
        assert float(r["importance"]) == j["importance"] == p.importance
        assert r["host"] == j["host"] == p.host


@pytest.mark.slow
def test_export_finds_a_jobdir_state(tmp_path, graph):  # noqa: F811
    with Site(graph) as site:
        crawl(tmp_path, site.url(0), CONCURRENT_REQUESTS=4, JOBDIR="job")
    assert (tmp_path / "job" / "opic.sqlite").exists()
    assert not (tmp_path / ".scrapy" / "opic" / "site.sqlite").exists()
    proc = scrapy_cmd("opic-export", "site", "-o", "x.csv", "-s", "JOBDIR=job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(read_csv(tmp_path / "x.csv")) == graph.n
    # Without the JOBDIR the default location is read, and there is no state there.
    assert_one_line_error(scrapy_cmd("opic-export", "site", "-o", "y.csv", cwd=tmp_path))


def test_item_field_fills_dicts_and_warns_once_for_items_without_it(caplog):
    import scrapy
    from scrapy.utils.test import get_crawler

    from scrapy_opic._middlewares import OpicSpiderMiddleware

    class Declared(scrapy.Item):
        url = scrapy.Field()
        importance = scrapy.Field()

    class Undeclared(scrapy.Item):
        url = scrapy.Field()

    crawler = get_crawler(settings_dict={"OPIC_ITEM_FIELD": "importance"})
    mw = OpicSpiderMiddleware.from_crawler(crawler)
    out = [
        {"url": "a"},
        Declared(url="b"),
        Undeclared(url="c"),
        Undeclared(url="d"),
        scrapy.Request("http://x/"),
    ]
    with caplog.at_level("WARNING"):
        mw._stamp(out, 0.25)
    assert out[0]["importance"] == 0.25 and out[1]["importance"] == 0.25
    assert "importance" not in out[2]
    warnings = [r for r in caplog.records if "OPIC_ITEM_FIELD" in r.getMessage()]
    assert len(warnings) == 1


def test_report_links_only_web_urls():
    from scrapy_opic._report import _link

    assert _link("https://a.example/?q=<x>") == (
        '<a href="https://a.example/?q=&lt;x&gt;">https://a.example/?q=&lt;x&gt;</a>'
    )
    assert _link("javascript:alert(document.cookie)") == "javascript:alert(document.cookie)"
    assert "<a" not in _link("JavaScript:void(0)") and "<a" not in _link("data:text/html,x")


def test_callback_output_before_an_exception_still_goes_on():
    from scrapy.utils.test import get_crawler

    from scrapy_opic._middlewares import OpicSpiderMiddleware

    mw = OpicSpiderMiddleware.from_crawler(get_crawler())

    def callback():
        yield {"n": 1}
        yield {"n": 2}
        raise RuntimeError("boom")

    response = type("R", (), {"request": scrapy.Request("http://x/")})()
    got = []
    with pytest.raises(RuntimeError):
        for o in mw.process_spider_output(response, callback()):
            got.append(o)
    assert got == [{"n": 1}, {"n": 2}]


def test_frozen_items_keep_flowing_with_one_warning(caplog):
    import dataclasses

    from scrapy.utils.test import get_crawler

    from scrapy_opic._middlewares import OpicSpiderMiddleware

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        url: str
        importance: float = 0.0

    mw = OpicSpiderMiddleware.from_crawler(
        get_crawler(settings_dict={"OPIC_ITEM_FIELD": "importance"})
    )
    out = [Frozen("a"), Frozen("b"), {"url": "c"}]
    with caplog.at_level("WARNING"):
        mw._stamp(out, 0.5)
    assert out[2]["importance"] == 0.5 and out[0].importance == 0.0
    assert sum("OPIC_ITEM_FIELD" in r.getMessage() for r in caplog.records) == 1


def test_display_url_shows_characters_and_keeps_ascii_escapes():
    from scrapy_opic._commands.top import display_url

    assert display_url("http://xn--caf-dma.example/%C3%A9t%C3%A9%20x%2F?q=%E4%B8%AD") == (
        "http://café.example/été%20x%2F?q=中"
    )
    assert display_url("http://h/%FF%FE") == "http://h/%FF%FE"  # not UTF-8: as it was


@pytest.mark.parametrize("keep_links", [True, False])
def test_the_change_columns_are_written_and_read_back_in_both_formats(tmp_path, keep_links):
    """A crawl that refetched by freshness: its change columns (a rate for every page, a
    last change for a page seen to change, none for the others) take the fast row paths and
    read back as the pages say; a URL that needs quoting takes the general writers. Without
    kept links there is no PageRank: an empty CSV field, JSON's null."""
    t = [1_700_000_000.0]
    f = sqlite_crawl(
        tmp_path / "c.sqlite",
        refresh=1.0,
        continuous=True,
        keep_links=keep_links,
        refetch="freshness",
        time_fn=lambda: t[0],
    )
    urls = ["http://a.example/", "http://a.example/b", 'http://a.example/q?x="1",y']
    f.schedule([Entry(f"k{k}", url, payload="r") for k, url in enumerate(urls)])
    for changed in (None, True, False):  # (rounds: each page once, in whatever order)
        left = set(range(len(urls)))
        for _ in range(40):
            lease = f.pop()
            t[0] += 3600.0
            k = int(lease.key[1:])
            if k not in left:  # (refetched again within the round: unchanged)
                assert f.unchanged(lease) is not None
                continue
            left.discard(k)
            visit(f, lease, [L("k0", urls[0])], changed=None if changed is None else k == 1)
            if not left:
                break
        assert not left
    f.close([])
    with open_state(tmp_path / "c.sqlite") as state:
        assert state.page_columns == CHANGE_COLUMNS
        expected = list(state.pages())
        write_export(state, str(tmp_path / "c.csv"))
        write_export(state, str(tmp_path / "c.jsonl"))
    assert [p.last_changed is None for p in expected] == [True, False, True]
    with open(tmp_path / "c.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    lines = [json.loads(x) for x in (tmp_path / "c.jsonl").read_text("utf-8").splitlines()]
    assert [r["url"] for r in rows] == [j["url"] for j in lines] == urls
    for row, j, p in zip(rows, lines, expected):
        assert float(row["change_rate"]) == j["change_rate"] == p.change_rate > 0
        assert (row["last_changed"] or None) == j["last_changed"] == p.last_changed
        assert (float(row["pagerank"]) if row["pagerank"] else None) == j["pagerank"]
        assert j["pagerank"] == p.pagerank and (p.pagerank is None) is not keep_links
    fast = _fast_page_lines(expected[:2], "jsonl", True, True)
    assert fast is not None and [json.loads(x) for x in fast] == lines[:2]


def test_the_report_does_not_call_a_briefly_watched_page_never_seen_to_change_fresh(tmp_path):
    """A page seen to change at every look beside two never seen to change, watched for a few
    looks: the report's expected freshness is below what the pages' point rates say (the
    unchanged pages could change at a rate their few looks could not show), and it comes
    near that figure once those pages have been watched unchanged for long."""

    def report(rounds: int) -> tuple[float, float]:
        t = [1_700_000_000.0]
        path = tmp_path / f"r{rounds}.sqlite"
        f = sqlite_crawl(
            path, refresh=1.0, continuous=True, refetch="freshness", time_fn=lambda: t[0]
        )
        urls = ["http://a.example/", "http://a.example/b", "http://a.example/c"]
        f.schedule([Entry(f"k{k}", url, payload="r") for k, url in enumerate(urls)])
        seen: dict[int, float] = {}  # page -> its last look
        for r in range(rounds):
            left = set(range(len(urls)))
            for _ in range(40):
                lease = f.pop()
                t[0] += 60.0
                k = int(lease.key[1:])
                if k not in left:
                    assert f.unchanged(lease) is not None
                else:
                    left.discard(k)
                    changed = None if r == 0 else k == 0
                    visit(f, lease, [L(f"k{j}", urls[j]) for j in range(3)], changed=changed)
                seen[k] = t[0]
                if not left:
                    break
        f.close([])
        with open_state(path) as state:
            at = max(seen.values())
            point = [
                (p.importance, math.exp(-p.change_rate / 86400.0 * (at - seen[int(k)])))
                for k, p in enumerate(state.pages())
            ]
            got = state.change_summary()["freshness"]
        return got, sum(w * x for w, x in point) / sum(w for w, _ in point)

    brief, brief_point = report(3)
    assert brief < brief_point - 0.005, (brief, brief_point)
    long, long_point = report(20)
    assert long == pytest.approx(long_point, abs=0.005) and long > brief, (long, long_point)
