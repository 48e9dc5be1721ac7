"""Bad input, as a user gives it: every bad ``OPIC_*`` value, a state of another spider or made
with other settings, a damaged state, a state in use. Each run is a real ``scrapy crawl`` in a
fresh project; each must end with exit code 1 and one error line that names the problem, no
traceback, no request to the site, and not a byte of the project's files changed."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from scrapy_opic.opic.graph import power_law_graph
from tests.support.project import Project
from tests.support.sites import Site

pytestmark = pytest.mark.slow

#: (setting, bad value): each must be refused at start, naming the setting.
BAD_VALUES = [
    ("OPIC_EPSILON", "2"),
    ("OPIC_EPSILON", "abc"),
    ("OPIC_EPSILON", "0"),
    ("OPIC_EPSILON", "nan"),
    ("OPIC_INTERNAL_WEIGHT", "-1"),
    ("OPIC_EXTERNAL_WEIGHT", "nan"),
    ("OPIC_BOOST", "-1"),
    ("OPIC_BOOST", "nan"),
    ("OPIC_WINDOW", "fixed:10:wall:extra"),
    ("OPIC_WINDOW", "garbage"),
    ("OPIC_CONTINUOUS", "maybe"),
    ("OPIC_COMMIT_VISITS", "0"),
    ("OPIC_COMMIT_SECONDS", "0"),
    ("OPIC_REFRESH", "5"),
    ("OPIC_STRATEGY", "foo"),
    ("OPIC_BOOST_PATTERNS", "/p/(1"),
    ("OPIC_BOOST_PATTERNS", '["/p/1", "[x"]'),
    ("OPIC_BOOST_PATTERNS", '["/p/1"'),
    ("OPIC_REFUSED_LINKS", "drop"),
    ("OPIC_MEMORY_REQUESTS", "-1"),
    ("OPIC_SEED", "-3"),
    ("OPIC_LOGSTATS", "perhaps"),
    ("OPIC_STORE", "mongo"),
    ("OPIC_EXPORT", "out.xyz"),
    ("OPIC_EXPORT", '{"out.csv": {"top": -1}}'),
    ("OPIC_EXPORT", '{"out.csv": {"colour": "red"}}'),
    ("OPIC_REDIS_LEASE", "0"),
    ("OPIC_KEEP_LINKS", "maybe"),
    ("OPIC_BACKOFF", "-1"),
    ("OPIC_BACKOFF_MAX", "0"),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A project, a site, and the states of one good crawl: JOBDIR and default location."""
    root = tmp_path_factory.mktemp("bad-input")
    project = Project(root / "proj")
    graph = power_law_graph(150, seed=3)
    with Site(graph) as site:
        start = site.url(0)
        for extra in ((), ("-s", "JOBDIR=job")):
            run = project.scrapy("crawl", "site", "-a", f"start_url={start}", *extra)
            assert run.returncode == 0, run.out[-3000:]
        assert (project.root / "job" / "opic.sqlite").exists()
        assert (project.root / ".scrapy" / "opic" / "site.sqlite").exists()
        yield project, site, start


def refused(world, *args: str) -> str:
    """Run ``scrapy crawl`` with ``args``; assert it was refused cleanly; return the line."""
    project, site, start = world
    before, hits = project.files(), len(site.hits)
    run = project.scrapy("crawl", *args)
    errors = run.errors()
    assert run.returncode == 1, run.out[-3000:]
    assert len(errors) == 1, run.out[-3000:]
    assert "Traceback" not in run.out, run.out[-3000:]
    assert len(site.hits) == hits  # not a request made
    assert project.files() == before  # not a byte changed, no file created
    return errors[0]


def crawl_args(world, *settings: str) -> list[str]:
    args = ["site", "-a", f"start_url={world[2]}"]
    for s in settings:
        args += ["-s", s]
    return args


def test_every_bad_value_is_one_line_naming_the_setting(world):
    def check(case):
        name, value = case
        for jobdir in ((), ("JOBDIR=job",)):
            line = refused(world, *crawl_args(world, f"{name}={value}", *jobdir))
            assert f"{name}=" in line and "expected" in line, line
        return line

    with ThreadPoolExecutor(4) as pool:
        lines = list(pool.map(check, BAD_VALUES))
    assert len(set(lines)) == len(lines)  # each names its own value


def test_an_unreachable_redis_server_is_one_line(world):
    line = refused(
        world,
        *crawl_args(world, "OPIC_STORE=redis", "OPIC_REDIS_URL=redis://:secret@127.0.0.1:1/0"),
    )
    assert "OPIC_REDIS_URL" in line and "secret" not in line, line


def test_a_redis_cluster_that_is_down_is_one_line(world, redis_cluster_binaries, tmp_path):
    """A Redis Cluster of its own (this test breaks it), OPIC_REDIS_URL naming a node that
    stays up: the node serving the crawl's slot is killed (its slot is down: the connection to
    it is refused), then the others mark it failed (the cluster answers CLUSTERDOWN for every
    slot, the seed's own too), then every node is stopped (unreachable). Each start is refused
    with one line naming OPIC_REDIS_URL."""
    import time

    import redis

    from tests.support.sites import RedisCluster

    cluster = RedisCluster(tmp_path / "cluster", node_timeout=500)
    with cluster as url:
        client = redis.RedisCluster.from_url(url)
        try:
            seed = cluster.ports[0]
            nodes = {port: [] for port in cluster.ports}
            for i in range(1000):
                name = f"opic:down:{i}"
                nodes[client.get_node_from_key("{" + name + "}").port].append(name)
        finally:
            client.close()
        doomed = cluster.ports[1]
        cluster.stop(doomed)

        def line_of(key: str) -> str:
            args = crawl_args(world, "OPIC_STORE=redis", f"OPIC_REDIS_URL={url}")
            return refused(world, *args, "-s", f"OPIC_REDIS_KEY={key}")

        slot_down = line_of(nodes[doomed][0])
        deadline = time.monotonic() + 120
        while "cluster_state:fail" not in cluster.cli(seed, "cluster", "info"):
            assert time.monotonic() < deadline, "the cluster never noticed its dead node"
            time.sleep(0.05)
        cluster_down = line_of(nodes[seed][0])
        for port in cluster.ports:
            cluster.stop(port)
        unreachable = line_of(nodes[seed][0])
    for line, why in (
        (slot_down, f"127.0.0.1:{doomed}"),
        (cluster_down, "cluster is down"),
        (unreachable, f"127.0.0.1:{seed}"),
    ):
        assert f"OPIC_REDIS_URL={url!r}" in line and why in line, line


def test_kept_links_with_the_redis_store_is_one_line(world):
    line = refused(world, *crawl_args(world, "OPIC_STORE=redis", "OPIC_KEEP_LINKS=True"))
    assert "OPIC_KEEP_LINKS=True is not valid with OPIC_STORE='redis'" in line, line


def test_a_jobdir_of_another_spider_is_refused(world):
    line = refused(world, "other", "-a", f"start_url={world[2]}", "-s", "JOBDIR=job")
    assert "spider 'site', not 'other'" in line, line


@pytest.mark.parametrize(
    "settings, named",
    [
        (("OPIC_EPSILON=0.3",), "OPIC_EPSILON=0.15 there, 0.3 here"),
        (("OPIC_CONTINUOUS=True",), "OPIC_CONTINUOUS=False there, True here"),
        (("OPIC_WINDOW=interpolation:10",), "OPIC_WINDOW='unbounded' there"),
        (("OPIC_KEEP_LINKS=True",), "OPIC_KEEP_LINKS=False there, True here"),
    ],
)
def test_resuming_with_other_settings_is_refused(world, settings, named):
    line = refused(world, *crawl_args(world, "JOBDIR=job", *settings))
    assert named in line, line


def test_settings_from_the_command_line_take_json(world, tmp_path):
    """-s takes JSON lists and dicts (as Scrapy does for FEEDS): a list of patterns is a list,
    a regex with a comma is one pattern, an export dict is a dict; the patterns are logged."""
    project, site, start = world
    out = tmp_path / "top.jsonl"
    run = project.scrapy(
        "crawl",
        *crawl_args(
            world,
            'OPIC_BOOST_PATTERNS=["/p/1\\\\.html", "/p/\\\\d{1,2}\\\\.html"]',
            "OPIC_EXPORT=" + json.dumps({str(out): {"top": 3}}),
            f"OPIC_STATE_PATH={tmp_path / 'json.sqlite'}",
        ),
    )
    assert run.returncode == 0, run.out[-3000:]
    assert "OPIC boosts URLs matching '/p/1\\\\.html', '/p/\\\\d{1,2}\\\\.html'" in run.out, run.out
    assert len(out.read_text().splitlines()) == 3


CORPUS = """
import json, shutil, sys, time
from pathlib import Path
from scrapy_opic._backends import StoreError
from tests.support.frontiers import one, sqlite_crawl

src, work = Path(sys.argv[1]), Path(sys.argv[2])
size = src.stat().st_size
variants = [("header", 0, 100), ("truncated", None, size // 2)]
variants += [(f"page {p}", p * 4096 + 60, 4000) for p in range(size // 4096)]
for name, offset, length in variants:
    path = work / "opic.sqlite"
    shutil.copyfile(src, path)
    with open(path, "r+b") as fh:
        if offset is None:
            fh.truncate(length)
        else:
            fh.seek(offset)
            fh.write(b"\\xff" * length)
    before = path.read_bytes()
    t0 = time.monotonic()
    try:
        f = sqlite_crawl(path, True, persist_requests=True)
    except StoreError as exc:
        out = {"refused": str(exc), "unchanged": path.read_bytes() == before,
               "others": sorted(p.name for p in work.iterdir() if p != path)}
    else:
        out = {"opened": one(f).engine.n, "cash": f.total_cash(), "pending": len(f)}
        f.close([])
    out.update(name=name, seconds=time.monotonic() - t0)
    print(json.dumps(out), flush=True)
    for p in work.iterdir():
        p.unlink()
"""


@pytest.fixture(scope="module")
def stopped_job(world):
    """A JOBDIR crawl stopped half-way (pending pages with their request rows)."""
    project, site, start = world
    run = project.scrapy("crawl", *crawl_args(world, "JOBDIR=job2", "CLOSESPIDER_PAGECOUNT=30"))
    assert run.returncode == 0, run.out[-3000:]
    return project.root / "job2" / "opic.sqlite"


def test_every_damaged_page_of_a_state_is_refused_or_harmless(stopped_job, tmp_path):
    """Each page of a small state overwritten in turn (and its header, and the file cut in
    half): opening it for a resume either refuses it, one line, file unchanged, nothing
    created beside it, or (a page holding no live data) resumes the very same crawl."""
    import subprocess
    import sys

    with SqliteFrontierOf(stopped_job) as (n, pending):
        pass
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", CORPUS, str(stopped_job), str(work)],
        capture_output=True,
        text=True,
        timeout=120,  # a hang fails here
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcomes = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(outcomes) >= 5
    refused = [o for o in outcomes if "refused" in o]
    assert {o["name"] for o in refused} >= {"header", "truncated", "page 0"}
    for o in refused:
        assert o["unchanged"] and o["others"] == [], o
        assert "\n" not in o["refused"] and str(work) in o["refused"], o
    for o in outcomes:
        if "opened" in o:
            assert (o["opened"], o["pending"]) == (n, pending), o
            assert o["cash"] == pytest.approx(1.0, abs=1e-9), o


class SqliteFrontierOf:
    """The intact state's page count and pending count (a copy opened and closed)."""

    def __init__(self, path) -> None:
        self.path = path

    def __enter__(self):
        import shutil
        import tempfile

        from scrapy_opic._backends.sqlite_state import StateReader

        with tempfile.TemporaryDirectory() as d:
            copy = shutil.copyfile(self.path, f"{d}/s.sqlite")
            with StateReader(copy, check=True) as reader:
                pending = sum(1 for _ in reader.requests())
                return reader.n, pending

    def __exit__(self, *exc) -> None:
        pass


@pytest.mark.parametrize("damage", ["header", "middle", "truncated"])
def test_a_damaged_jobdir_is_one_line_and_left_as_it_was(world, stopped_job, damage):
    project = world[0]
    job = project.root / f"damaged-{damage}"
    job.mkdir()
    data = bytearray(stopped_job.read_bytes())
    if damage == "header":
        data[:100] = b"\xff" * 100
    elif damage == "middle":
        mid = len(data) // 2 // 4096 * 4096
        data[mid : mid + 4000] = b"\xff" * 4000
    else:
        data = data[: len(data) // 2]
    (job / "opic.sqlite").write_bytes(bytes(data))
    line = refused(world, *crawl_args(world, f"JOBDIR={job}"))
    assert "opic.sqlite" in line and ("damaged" in line or "not an OPIC state" in line), line


def hold(path):
    """A process holding the lock of the state ``path`` (a crawl running elsewhere)."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from scrapy_opic._backends.sqlite_state import StateLock;"
            f"lock = StateLock({str(path)!r}); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_jobdir_in_use_by_another_crawl_is_refused(world):
    holder = hold(world[0].root / "job" / "opic.sqlite")
    try:
        line = refused(world, *crawl_args(world, "JOBDIR=job"))
    finally:
        holder.kill()
        holder.wait()
    assert "in use by another running crawl" in line and "another JOBDIR" in line, line


def test_a_default_state_in_use_gives_this_crawl_its_own_file(world):
    project = world[0]
    state = project.root / ".scrapy" / "opic" / "site.sqlite"
    before = project.files(".scrapy/opic/site.sqlite")
    holder = hold(state)
    try:
        run = project.scrapy("crawl", *crawl_args(world, "CLOSESPIDER_PAGECOUNT=5"))
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 0, run.out[-3000:]
    assert "is in use by another running crawl; this crawl keeps its state in" in run.out
    assert (state.parent / "site-2.sqlite").exists()
    assert project.files(".scrapy/opic/site.sqlite") == before


# -- the commands, as a hostile user runs them ------------------------------------------------
def test_commands_name_an_unknown_spider_and_refuse_bad_counts(world):
    project = world[0]
    run = project.scrapy("opic-export", "nosuch", "-o", "x.csv")
    assert run.returncode == 1 and "unknown spider 'nosuch'" in run.out, run.out
    assert "site" in run.out  # the spiders it has
    for args in (("opic-top", "site", "-n", "-3"), ("opic-export", "site", "-o", "x.csv/")):
        run = project.scrapy(*args)
        assert run.returncode == 2 and run.out.startswith("error: "), run.out
        assert "Traceback" not in run.out
    assert not (project.root / "x.csv").exists()


@pytest.mark.parametrize("args", [("opic-top", "site"), ("opic-export", "site", "-o", "-")])
def test_a_reader_that_goes_away_ends_the_command_quietly(world, args):
    """``scrapy opic-top site | head``: the reader closes the pipe before the command writes;
    the command ends with 0 and says nothing."""
    import subprocess
    import sys

    project = world[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "scrapy", *args],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == "", err


def test_export_writes_through_special_files_and_follows_symlinks(world, tmp_path):
    import threading

    project = world[0]
    # /dev/full: a device stays a device; the error names it, one line.
    run = project.scrapy("opic-export", "site", "-o", "/dev/full", "--format", "csv")
    assert run.returncode == 1 and run.out.strip() == (
        "error: cannot write /dev/full: No space left on device"
    ), run.out
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")
    # A symlink: its target gets the rows, the link stays a link.
    target, link = tmp_path / "real.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    run = project.scrapy("opic-export", "site", "-o", str(link))
    assert run.returncode == 0, run.out
    assert link.is_symlink() and target.read_text().startswith("url,importance")
    # A FIFO: written through to its reader (which would block for good on a replaced file).
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    run = project.scrapy("opic-export", "site", "-o", str(fifo), "--format", "jsonl")
    reader.join(timeout=60)
    assert run.returncode == 0, run.out
    assert fifo.is_fifo() and len(got[0].splitlines()) > 10
    # A directory that does not exist: the error names the file asked for, no temporary name.
    run = project.scrapy("opic-export", "site", "-o", str(tmp_path / "nope" / "x.csv"))
    assert run.returncode == 1 and run.out.count("\n") == 1, run.out
    assert "nope/x.csv" in run.out and ".x.csv." not in run.out
