"""A state store that fails under a running crawl, as a user meets it: a full disk, a damaged
row. Real ``scrapy crawl`` runs in a fresh project, judged by the test server's access log.

* A disk that fills up mid-crawl (a small tmpfs the test mounts, when it may; and always a
  simulated one: a file size limit, past which a write fails as on a full disk)
  ends the crawl with one error line and exit code 1 (a hang fails the test by its timeout),
  leaves the state of the last checkpoint, and a rerun with the same JOBDIR, room made, resumes
  from it and fetches the rest.
* A request row damaged on disk, met when its page is popped, gives that page up as
  ``damaged`` and says so once; the crawl goes on and ends, the total cash 1.
* A JOBDIR whose state file is empty (0 bytes) is damage, refused with one line, not a fresh
  start.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from scrapy_opic._backends.sqlite_state import StateReader
from scrapy_opic.export import open_state
from tests.support.project import Project
from tests.support.sites import Site, reachable, site_graph

pytestmark = pytest.mark.slow

N = 300


@pytest.fixture(scope="module")
def graph():
    return site_graph(N, seed=3)


def _mount(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    run = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return run.returncode == 0


@contextlib.contextmanager
def small_disk(kind: str, root: Path):
    """``(jobdir, extra scrapy arguments, run options, make_room)``: a JOBDIR on a disk that
    fills up early in a crawl of the site, and the call that makes room again."""
    if kind == "tmpfs":
        mount = root / "small"
        if not _mount(mount, "96k"):
            pytest.skip("cannot mount a tmpfs here (not root, or no mount privilege)")
        try:
            # Scrapy's own SpiderState extension writes JOBDIR/spider.state at close: on a full
            # disk it fails with a traceback of its own (Scrapy's, not OPIC's); left out here.
            extra = ["-s", 'EXTENSIONS={"scrapy.extensions.spiderstate.SpiderState": null}']

            def make_room() -> None:
                subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)

            yield mount / "job", extra, {}, make_room
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    else:
        # No file of the crawl process may grow past 64 KiB: the state's write-ahead log, which
        # grows with each checkpoint, soon cannot.
        yield root / "job", [], {"file_size_limit": 64 * 1024}, lambda: None


@pytest.mark.parametrize("kind", ["tmpfs", "file-size-limit"])
def test_a_full_disk_ends_the_crawl_with_one_line_and_the_state_resumes(tmp_path, graph, kind):
    project = Project(tmp_path / "proj")
    pages = reachable(graph)
    with small_disk(kind, tmp_path) as (jobdir, extra, options, make_room), Site(graph) as site:
        args = ["crawl", "site", "-a", f"start_url={site.url(0)}", "-s", f"JOBDIR={jobdir}"]
        args += ["-s", "OPIC_COMMIT_VISITS=10", *extra]
        run = project.scrapy(*args, timeout=90, **options)  # a hang fails here
        first = Counter(site.hits)
        assert run.returncode == 1, run.out[-4000:]
        errors = run.errors()
        assert len(errors) == 1, run.out[-4000:]
        # (A full disk is SQLite's "database or disk is full"; a write past the file size
        # limit, its "disk I/O error".)
        assert "[scrapy_opic" in errors[0], errors
        assert "database or disk is full" in errors[0] or "disk I/O error" in errors[0], errors
        assert "the crawl stops" in errors[0] and "resume it with the same JOBDIR" in errors[0]
        assert "Traceback" not in run.out, run.out[-4000:]
        assert "'finish_reason': 'opic_store_failed'" in run.out
        fetched_first = {p for p in first if p.startswith("/p/")}
        assert 0 < len(fetched_first) < len(pages)  # the disk filled up mid-crawl

        make_room()
        # The state on disk is the last checkpoint's, whole: it checks clean and holds cash 1.
        with StateReader(jobdir / "opic.sqlite", check=True) as reader:
            saved = reader.saved()
        assert 0 < saved.engine.n and saved.engine.total_cash() == pytest.approx(1.0, abs=1e-9)

        again = project.scrapy(*args, timeout=120)
        assert again.returncode == 0, again.out[-4000:]
        assert not again.errors(), again.out[-4000:]
        assert "OPIC state resumed" in again.out
        with open_state(jobdir / "opic.sqlite") as state:
            assert state.total_cash() == pytest.approx(1.0, abs=1e-9)
            assert {p.status for p in state.pages()} == {"ok"}
    hits = Counter(p for p in site.hits if p.startswith("/p/"))
    assert {f"/p/{i}.html" for i in pages} == set(hits)  # every page fetched
    # Pages fetched after the last checkpoint are fetched again, none more than twice.
    assert max(hits.values()) <= 2


def test_a_damaged_request_row_gives_its_page_up_and_says_so_once(tmp_path, graph):
    project = Project(tmp_path / "proj")
    job = tmp_path / "job"
    with Site(graph) as site:
        args = ["crawl", "site", "-a", f"start_url={site.url(0)}", "-s", f"JOBDIR={job}"]
        run = project.scrapy(*args, "-s", "CLOSESPIDER_PAGECOUNT=40")
        assert run.returncode == 0, run.out[-3000:]
        # Damage two stored requests of pending pages: bytes of their data changed in place (the
        # file's structure intact, each row's checksum now wrong).
        con = sqlite3.connect(job / "opic.sqlite")
        rows = con.execute("SELECT id, data FROM opic_requests ORDER BY id LIMIT 2").fetchall()
        assert len(rows) == 2
        for i, data in rows:
            bad = bytes(data[:-1]) + bytes([data[-1] ^ 0xFF])
            con.execute("UPDATE opic_requests SET data = ? WHERE id = ?", (bad, i))
        con.commit()
        con.close()
        with StateReader(job / "opic.sqlite") as reader:
            urls = reader.urls_of([i for i, _ in rows])
        before = len(site.hits)
        again = project.scrapy(*args)
        second = set(site.hits[before:])
    assert again.returncode == 0, again.out[-3000:]
    assert not again.errors(), again.out[-3000:]
    warned = [ln for ln in again.lines if "damaged row" in ln]
    assert len(warned) == 1 and " WARNING: " in warned[0], warned  # said once
    assert "given up with the status 'damaged'" in warned[0]
    assert "nothing was changed" not in again.out
    with open_state(job / "opic.sqlite") as state:
        status = {p.url: p.status for p in state.pages()}
        assert state.total_cash() == pytest.approx(1.0, abs=1e-9)  # their cash went somewhere
    assert [status[u] for u in urls.values()] == ["damaged", "damaged"]
    assert not {"/p/" + u.rsplit("/p/", 1)[1] for u in urls.values()} & second  # never fetched
    assert len(second) > 100  # the rest of the crawl went on
    assert "'opic/damaged_rows': 2" in again.out


def test_an_empty_state_file_is_damage_not_a_fresh_start(tmp_path, graph):
    project = Project(tmp_path / "proj")
    job = tmp_path / "job"
    job.mkdir()
    (job / "opic.sqlite").write_bytes(b"")
    with Site(graph) as site:
        run = project.scrapy(
            "crawl", "site", "-a", f"start_url={site.url(0)}", "-s", f"JOBDIR={job}"
        )
        assert not site.hits  # not a request made
    assert run.returncode == 1, run.out[-3000:]
    errors = run.errors()
    assert len(errors) == 1 and "is damaged (the file is empty, 0 bytes)" in errors[0], errors
    assert (job / "opic.sqlite").stat().st_size == 0  # left as it was
