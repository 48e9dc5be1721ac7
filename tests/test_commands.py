"""Scrapy's and OPIC's commands as a new user runs them, in a fresh project against a local site:
which commands may touch the OPIC state, what every command prints, what the help says."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.project import Project
from tests.support.sites import Site, site_graph

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A project, a 60-page site, and the state of one crawl of it (default location)."""
    root = tmp_path_factory.mktemp("commands")
    project = Project(root / "proj")
    with Site(site_graph(60, seed=1)) as site:
        run = project.scrapy("crawl", "site", "-a", f"start_url={site.url(0)}")
        assert run.returncode == 0, run.out[-3000:]
        yield project, site


def _opic_files(project: Project) -> dict[str, str]:
    """Every OPIC state file of the project (not Scrapy's own JOBDIR files), with its hash."""
    return {k: v for k, v in project.files().items() if "opic" in k and k.endswith(".sqlite")}


@pytest.mark.parametrize(
    "command",
    [
        ["parse", "{url}", "--spider", "site", "-c", "parse"],
        ["parse", "{url}", "--spider", "site", "-c", "parse", "-s", "JOBDIR=job"],
        ["fetch", "--nolog", "{url}"],
        ["fetch", "--nolog", "{url}", "-s", "JOBDIR=job"],
        ["shell", "{url}", "-c", "response.status"],
        ["view", "--no-redirect", "{url}", "-s", "EDITOR=true"],
    ],
    ids=["parse", "parse-jobdir", "fetch", "fetch-jobdir", "shell", "view"],
)
def test_only_crawls_write_opic_state(world, command, monkeypatch):
    project, site = world
    before = _opic_files(project)
    assert list(before) == [".scrapy/opic/site.sqlite"]
    monkeypatch.setenv("BROWSER", "true")  # (scrapy view opens a browser: a no-op here)
    run = project.scrapy(*(a.replace("{url}", site.url(3)) for a in command))
    assert run.returncode == 0, run.out[-3000:]
    assert not run.errors(), run.out[-3000:]
    assert _opic_files(project) == before  # the last crawl's state as it was, no state created


MIXED = """\
from proj.spiders import SiteSpider


class MixedSpider(SiteSpider):
    name = "mixed"

    def parse(self, response):
        yield from super().parse(response)
        if response.url.endswith("/p/2.html"):
            raise ValueError("a callback that fails after yielding its links")
"""


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, (pattern, text[-2000:])
    return int(found.group(1).replace(",", ""))


def test_fetched_is_one_number_everywhere(tmp_path):
    """A continuous crawl of a site with a page that fails (500), one that is gone (404), one
    that moved (301) and one whose callback raises after yielding its links: the log, the
    stats, opic-top, opic-status, opic-export's column, the report's figure and its hosts table
    all count the same pages as fetched: those whose last fetch was parsed."""
    project = Project(tmp_path / "proj")
    (project.root / "proj" / "spiders" / "mixed.py").write_text(MIXED)
    with Site(site_graph(80, seed=2), errors={9}, gone={5}, redirects={7: 8}) as site:
        run = project.scrapy(
            "crawl", "mixed", "-a", f"start_url={site.url(0)}", "-s", "OPIC_CONTINUOUS=True",
            "-s", "CLOSESPIDER_PAGECOUNT=160", "-s", "RETRY_TIMES=0",
        )  # fmt: skip
    assert run.returncode == 0, run.out[-3000:]
    counts = {
        "log": _number(r"OPIC scheduler closed \(.*?\): \d+ pages known, (\d+) fetched", run.out),
        "stats": _number(r"'opic/fetched': (\d+)", run.out),
    }
    top = project.scrapy("opic-top", "mixed")
    counts["opic-top"] = _number(r"\d+ pages known, (\d+) fetched", top.out)
    status = project.scrapy("opic-status", "mixed")
    counts["opic-status"] = _number(r"\d+ pages known, (\d+) fetched", status.out)
    # --json: one object of the same figures as the line.
    line = project.scrapy("opic-status", "mixed", "--json").out.strip().splitlines()[-1]
    got = json.loads(line)
    assert got["fetched"] == counts["opic-status"]
    assert f"{got['pages']} pages known" in status.out and f"{got['visits']} visits" in status.out
    assert f"G={got['G']:.4f}" in status.out and got["time"].endswith("+00:00")
    export = project.scrapy("opic-export", "mixed", "-o", "pages.csv")
    assert export.returncode == 0, export.out
    with open(project.root / "pages.csv") as fh:
        rows = list(csv.DictReader(fh))
    counts["export"] = sum(r["fetched"] == "True" for r in rows)
    assert {r["url"].rsplit("/", 1)[1]: r["status"] for r in rows if "/p/" in r["url"]}[
        "2.html"
    ] == "spider_error"
    report = project.scrapy("opic-report", "mixed", "-o", "report.html")
    assert report.returncode == 0, report.out
    page = (project.root / "report.html").read_text()
    counts["report"] = _number(r"<td>pages fetched</td><td class=\"num\">([\d,]+)</td>", page)
    hosts = page.split("<h2>Top hosts</h2>", 1)[1].split("</table>", 1)[0]
    counts["report hosts"] = sum(
        int(n.replace(",", ""))
        for n in re.findall(r"<tr><td>[^<]*</td>(?:<td class=\"num\">[^<]*</td>){2}"
                            r"<td class=\"num\">([\d,]+)</td></tr>", hosts)
    )  # fmt: skip
    assert len(set(counts.values())) == 1, counts
    assert 0 < counts["export"] < len(rows)


SECRET = "SeCrEt-pw-25"


def test_no_command_prints_a_password(tmp_path):
    """A password in OPIC_REDIS_URL (here beside an embedded JOBDIR state, and in --state
    locations) appears in no output of any command: the crawl's log, every scrapy opic-*
    command's output, and every file they write (state, exports, report)."""
    project = Project(tmp_path / "proj")
    url = f"redis://opic:{SECRET}@127.0.0.1:1/0"
    secret_settings = ["-s", f"OPIC_REDIS_URL={url}", "-s", "JOBDIR=job"]
    outputs = []
    with Site(site_graph(40, seed=4)) as site:
        run = project.scrapy(
            "crawl", "site", "-a", f"start_url={site.url(0)}", *secret_settings,
            "-s", "OPIC_EXPORT=at-close.csv", "-s", "LOG_LEVEL=DEBUG",
        )  # fmt: skip
        assert run.returncode == 0, run.out[-3000:]
        outputs.append(run.out)
        # The Redis store on a server that does not answer: refused in one line, masked.
        run = project.scrapy(
            "crawl", "site", "-a", f"start_url={site.url(0)}", "-s", "OPIC_STORE=redis",
            "-s", f"OPIC_REDIS_URL={url}",
        )  # fmt: skip
        assert run.returncode == 1 and "***@127.0.0.1:1" in run.out, run.out[-3000:]
        outputs.append(run.out)
    commands = [
        ["opic-top", "site"],
        ["opic-status", "site"],
        ["opic-export", "site", "-o", "pages.csv"],
        ["opic-export", "site", "-o", "pages.jsonl"],
        ["opic-export", "site", "-o", "sites.csv", "--by-site"],
        ["opic-export", "site", "-o", "-", "--top", "5"],
        ["opic-report", "site", "-o", "report.html"],
    ]
    for command in commands:
        for where in (
            secret_settings,
            ["--state", "job/opic.sqlite", "-s", f"OPIC_REDIS_URL={url}"],
        ):
            run = project.scrapy(*command, *where)
            assert run.returncode == 0, (command, run.out)
            outputs.append(run.out)
        # A crawl in Redis named by its location, on a server that does not answer.
        run = project.scrapy(*command, "--state", f"{url}#opic:site")
        assert run.returncode == 1 and "error: " in run.out, (command, run.out)
        outputs.append(run.out)
    assert (project.root / "report.html").exists() and (project.root / "at-close.csv").exists()
    for text in outputs:
        assert SECRET not in text, text[-3000:]
    for path in project.root.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.filterwarnings("error")  # (nor a warning for a crawl without a visit yet)
def test_the_report_header_masks_a_redis_password(tmp_path):
    from scrapy_opic._report import build_report
    from scrapy_opic.export import open_state
    from scrapy_opic.opic.contract import Entry
    from tests.support.frontiers import sqlite_crawl

    path = tmp_path / "s.sqlite"
    f = sqlite_crawl(path)
    f.schedule([Entry(b"k", "http://h/", 0, "h", b"req")])
    f.close([])
    with open_state(path) as state:
        state.path = f"redis://opic:{SECRET}@crawl-redis.internal:6379/0#opic:site"
        page = build_report(state)
    assert SECRET not in page and "redis://***@crawl-redis.internal:6379/0#opic:site" in page


def test_the_example_spider_reads_pages_that_are_not_html():
    import importlib.util

    from scrapy.http import HtmlResponse, JsonResponse, Response

    path = Path(__file__).resolve().parent.parent / "example_project/example/spiders/site.py"
    spec = importlib.util.spec_from_file_location("example_site", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    spider = module.SiteSpider(start_url="http://127.0.0.1:8000/")
    json_page = JsonResponse("http://127.0.0.1:8000/a.json", body=b'{"a": 1}')
    image = Response("http://127.0.0.1:8000/a.png", body=b"\x89PNG")
    for response in (json_page, image):
        assert list(spider.parse(response)) == [{"url": response.url, "title": None}]
    html = HtmlResponse(
        "http://127.0.0.1:8000/",
        body=b"<title>t</title><a href='/b.html'>b</a>",
        encoding="utf-8",
    )
    out = list(spider.parse(html))
    assert out[0] == {"url": html.url, "title": "t"} and out[1].url.endswith("/b.html")


def test_the_state_commands_say_what_a_new_user_needs(tmp_path):
    """--help keeps --state's text whole; --state takes a JOBDIR; counts agree with their
    nouns; outside a project the error says so; the report tells pages not fetched yet from
    pages that failed or were refused."""
    from scrapy_opic.export import open_state

    project = Project(tmp_path / "proj")
    with Site(site_graph(30, seed=6), gone={4}, errors={6}) as site:
        run = project.scrapy(
            "crawl", "site", "-a", f"start_url={site.url(0)}", "-s", "JOBDIR=job",
            "-s", "CLOSESPIDER_PAGECOUNT=12", "-s", "RETRY_TIMES=0",
        )  # fmt: skip
    assert run.returncode == 0, run.out[-3000:]

    helped = project.scrapy("opic-export", "-h")
    assert "a state file, a JOBDIR, or redis://HOST:PORT/DB#KEY" in helped.out, helped.out
    underlines = [ln for ln in helped.lines if ln and set(ln) == {"="}]
    assert len(underlines) == 2, helped.out  # "Usage" and "Options": no heading made of help

    one = project.scrapy("opic-export", "--state", "job", "--top", "1", "-o", "one.csv")
    assert one.returncode == 0 and "1 page written to one.csv" in one.out, one.out
    two = project.scrapy("opic-export", "--state", "job/", "--top", "2", "-o", "two.csv")
    assert two.returncode == 0 and "2 pages written to two.csv" in two.out, two.out
    empty = project.root / "empty-dir"
    empty.mkdir()
    none = project.scrapy("opic-top", "--state", "empty-dir")
    assert none.returncode == 1 and "a directory with no OPIC state" in none.out, none.out

    elsewhere = subprocess.run(
        [sys.executable, "-m", "scrapy", "opic-top", "site"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert elsewhere.returncode == 1, elsewhere.stderr
    assert "this is not a Scrapy project" in elsewhere.stderr, elsewhere.stderr
    assert "spiders: none" not in elsewhere.stderr

    with open_state(project.root / "job" / "opic.sqlite") as state:
        statuses = [p.status for p in state.pages()]
        _edges, fetched, not_yet, other = state.distribution()
    assert fetched.sum() == statuses.count("ok") and not_yet.sum() == statuses.count("")
    assert other.sum() == len(statuses) - statuses.count("ok") - statuses.count("") > 0
    report = project.scrapy("opic-report", "--state", "job", "-o", "report.html")
    assert report.returncode == 0, report.out
    assert (
        "pages whose fetch failed, that are gone or were refused"
        in (project.root / "report.html").read_text()
    )


def test_items_join_the_final_importance_and_sort_by_it(tmp_path):
    """OPIC_ITEM_FIELD stamps an item with its page's importance just after the visit (crawl
    order: the first pages' estimates are inflated); opic-export --items joins a feed's items
    with the final importance of their pages, most important first."""
    project = Project(tmp_path / "proj")
    with Site(site_graph(80, seed=7)) as site:
        run = project.scrapy(
            "crawl", "site", "-a", f"start_url={site.url(0)}", "-O", "items.jsonl",
            "-s", "OPIC_ITEM_FIELD=at_visit",
        )  # fmt: skip
    assert run.returncode == 0, run.out[-3000:]
    n = len((project.root / "items.jsonl").read_text().splitlines())
    joined = project.scrapy("opic-export", "site", "--items", "items.jsonl", "-o", "ranked.jsonl")
    assert joined.returncode == 0, joined.out
    assert f"{n} items written to ranked.jsonl" in joined.out, joined.out
    pages = project.scrapy("opic-export", "site", "-o", "pages.csv")
    assert pages.returncode == 0, pages.out
    with open(project.root / "pages.csv") as fh:
        final = {r["url"]: float(r["importance"]) for r in csv.DictReader(fh)}
    ranked = [json.loads(line) for line in (project.root / "ranked.jsonl").read_text().splitlines()]
    assert len(ranked) == n > 50 and {r["url"] for r in ranked} == set(final)
    assert all(r["importance"] == final[r["url"]] for r in ranked)  # the final importance
    values = [r["importance"] for r in ranked]
    assert values == sorted(values, reverse=True)  # most important first
    # What the items carried from the crawl is another order: the visit-time estimate.
    assert [r["url"] for r in sorted(ranked, key=lambda r: -r["at_visit"])] != [
        r["url"] for r in ranked
    ]
    as_csv = project.scrapy(
        "opic-export", "site", "--items", "items.jsonl", "-o", "top.csv", "--top", "5"
    )
    assert as_csv.returncode == 0 and "5 items written" in as_csv.out, as_csv.out
    with open(project.root / "top.csv") as fh:
        top = list(csv.DictReader(fh))
    assert [r["url"] for r in top] == [r["url"] for r in ranked[:5]]
