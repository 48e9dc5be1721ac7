"""Kept links (OPIC_KEEP_LINKS): the blob codec, the sqlite rows (committed with the snapshot,
only the pages that changed, the last visit's links), and the crawl graph the export ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_opic._backends import StoreError
from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.sqlite_state import LINKS_TABLE, StateReader
from scrapy_opic.opic.constants import CLOSED
from scrapy_opic.opic.contract import Entry
from scrapy_opic.opic.graph import from_edges
from scrapy_opic.opic.links import crawl_graph, decode_links, encode_links
from tests.support.frontiers import L, key, one, sqlite_crawl, visit


# -- the codec ---------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(st.integers(0, 300), st.integers(0, 2**32 - 1)),
            max_size=40,
        ),
        max_size=30,
    )
)
def test_blobs_round_trip_sorted_without_repeats_nor_self_links(lists):
    pages = list(range(len(lists)))
    counts, targets = decode_links(encode_links(pages, lists))
    assert counts.tolist() == [len(set(t) - {p}) for p, t in zip(pages, lists)]
    bounds = np.concatenate(([0], np.cumsum(counts)))
    for p, t in zip(pages, lists):
        assert targets[bounds[p] : bounds[p + 1]].tolist() == sorted(set(t) - {p})


def test_bad_blobs_are_errors_not_wrong_links():
    with pytest.raises(ValueError):
        decode_links([b"\x01\x81"])  # ends inside a number
    with pytest.raises(ValueError):
        decode_links([b"\xff\xff\xff\xff\xff\x01"])  # six bytes: over 32 bits
    with pytest.raises(ValueError):
        encode_links([0], [[2**32]])


def test_near_links_take_one_byte():
    blob = encode_links([1000], [list(range(1001, 1101))])[0]
    assert len(blob) == 2 + 99  # the first id takes two bytes, every gap of 1 one


# -- the crawl graph ---------------------------------------------------------------------------
def test_the_crawl_graph_follows_the_engines_rules():
    # 0 -> 1, 2, 3, 4; 1 -> 0, 3; 3 redirected to 2; 4 closed (and had links: ignored).
    n = 6
    pages = np.array([0, 1, 4])
    counts = np.array([4, 2, 1])
    targets = np.array([1, 2, 3, 4, 0, 3, 5])
    closed = np.zeros(n, bool)
    closed[4] = True
    g = crawl_graph(n, pages, counts, targets, closed, (np.array([3]), np.array([2])))
    edges = sorted(zip(g.sources().tolist(), g.indices.tolist()))
    assert edges == [(0, 1), (0, 2), (1, 0), (1, 2)]  # 0 -> 3 and 0 -> 2 are one link
    # Without redirects the rows are taken as they are (already CSR).
    g = crawl_graph(n, pages, counts, targets, closed)
    assert sorted(zip(g.sources().tolist(), g.indices.tolist())) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 3),
    ]
    with pytest.raises(ValueError):
        crawl_graph(3, pages[:1], counts[:1], targets[:4], np.zeros(3, bool))


# -- the sqlite rows ---------------------------------------------------------------------------
def frontier_at(path, resume: bool = False, **kw) -> Crawl:
    kw.setdefault("persist_requests", True)
    kw.setdefault("keep_links", True)
    return sqlite_crawl(path, resume, **kw)


def kept(path) -> dict[int, list[int] | tuple[str, int]]:
    """The committed links of a state file, by page id (a redirect: ``("to", target)``)."""
    with StateReader(path) as reader:
        pages, counts, targets, alias_pages, alias_targets = reader.links()
    bounds = np.concatenate(([0], np.cumsum(counts)))
    out: dict = {int(p): targets[bounds[k] : bounds[k + 1]].tolist() for k, p in enumerate(pages)}
    out.update({int(p): ("to", int(t)) for p, t in zip(alias_pages, alias_targets)})
    return out


def expected(f: Crawl, last: dict) -> dict:
    return {
        i: v if isinstance(v, tuple) else sorted(set(v) - {i})
        for i, v in last.items()
        if v is not None
    }


def visit_all(f: Crawl, steps: int, last: dict, seed: int = 0) -> None:
    """Pop and visit, each page linking to 4 random pages (recorded in ``last`` by id)."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        lease = f.pop()
        if lease is None:
            return
        targets = rng.integers(0, 60, 4).tolist()
        visit(f, lease, [L(key(k), f"http://h/{k}", payload=b"r%d" % k) for k in targets])
        last[one(f).engine.id_of(lease.key)] = [one(f).engine.id_of(key(k)) for k in targets]


def test_links_round_trip_through_commit_and_resume(tmp_path):
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    last: dict = {}
    visit_all(f, 25, last)
    f.commit(wait=True)
    assert kept(path) == expected(f, last)
    visit_all(f, 10, last, seed=1)  # not committed: not in the file
    assert kept(path) != expected(f, last)
    f.close([])
    assert kept(path) == expected(f, last)
    g = frontier_at(path, resume=True)
    visit_all(g, 10, last, seed=2)
    g.close([])
    assert kept(path) == expected(g, last)
    with StateReader(path) as reader:
        assert reader.links_kept


def test_a_refetch_replaces_the_links_and_a_closed_page_has_none(tmp_path):
    path = tmp_path / "c.sqlite"
    f = frontier_at(path, continuous=True)
    f.schedule([Entry(key(k), f"http://h/{k}", 0, "", b"r") for k in range(3)])
    lease = f.pop()
    i = one(f).engine.id_of(lease.key)
    visit(f, lease, [L(key(k), f"http://h/{k}") for k in (10, 11, 12)])
    f.commit(wait=True)
    assert kept(path)[i] == sorted(one(f).engine.id_of(key(k)) for k in (10, 11, 12))
    while (lease := f.pop()).key != key(i):  # the others first (their cash is higher)
        visit(f, lease, [])
    visit(f, lease, [L(key(13), "http://h/13")])
    f.commit(wait=True)
    assert kept(path)[i] == [one(f).engine.id_of(key(13))]
    # A failure that does not close the page keeps the last parsed visit's links...
    while (lease := f.pop()).key != key(i):
        visit(f, lease, [])
    f.fail(lease, 503)
    f.commit(wait=True)
    assert kept(path)[i] == [one(f).engine.id_of(key(13))]
    # ...a final one (404) closes it: its links go.
    while (lease := f.pop()).key != key(i):
        visit(f, lease, [])
    f.fail(lease, 404)
    f.commit(wait=True)
    assert i not in kept(path)
    assert one(f).engine.flags[i] & CLOSED
    f.close([])


def test_two_visits_between_commits_keep_the_second(tmp_path):
    path = tmp_path / "t.sqlite"
    f = frontier_at(path, continuous=True, commit_visits=10**6, commit_seconds=3600)
    f.ready = lambda: False  # no checkpoint until close
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r")])
    visit(f, f.pop(), [L(key(1), "http://h/1")])
    while (lease := f.pop()).key != key(0):
        visit(f, lease, [])
    visit(f, lease, [L(key(2), "http://h/2")])
    assert one(f).engine.visits[0] == 2
    f.close([])
    assert kept(path)[0] == [2]


def test_links_and_snapshot_are_committed_in_one_transaction(tmp_path):
    """What sqlitedict's writer thread is asked, in order: the snapshot rows and the links
    rows, then one commit (a kill -9 between two commits would leave links that disagree
    with the snapshot)."""
    import sqlitedict

    f = frontier_at(tmp_path / "o.sqlite", commit_visits=10**6, commit_seconds=3600)
    f.ready = lambda: False  # no checkpoint but those asked for here
    f.schedule([Entry(key(k), f"http://h/{k}", 0, "", b"r") for k in range(5)])
    f.commit(wait=True)
    conn = f.store.file.db.conn
    asked: list = []
    real = conn.execute
    conn.execute = lambda req, *a, **kw: (asked.append(req), real(req, *a, **kw))[1]
    for _ in range(3):
        visit(f, f.pop(), [L(key(9), "http://h/9")])
    f.commit(wait=False)
    f.commit(wait=True)  # nothing changed since: no links row
    conn.execute = real
    commits = [k for k, req in enumerate(asked) if req in (sqlitedict._REQUEST_COMMIT, "COMMIT")]
    assert len(commits) == 2
    first = asked[: commits[0]]
    # (rows: a statement writes several, one ``(?, ?, ?)`` each)
    inserts = [req for req in first if LINKS_TABLE in req and "INSERT" in req]
    assert sum(req.count("(?, ?, ?)") for req in inserts) == 3
    assert not any("INSERT" in req for req in asked[commits[0] :])
    f.close([])


def test_a_redirect_is_kept_as_its_target(tmp_path):
    path = tmp_path / "r.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    lease = f.pop()
    f.redirect(lease, Entry(key(1), "http://h/1", 0, "", b"r1"))
    f.close([])
    assert kept(path) == {0: ("to", 1)}


def test_a_commit_writes_only_the_pages_whose_links_changed(tmp_path):
    path = tmp_path / "d.sqlite"
    f = frontier_at(path, commit_visits=10**6, commit_seconds=3600)
    f.schedule([Entry(key(k), f"http://h/{k}", 0, "", b"r") for k in range(200)])
    for _ in range(150):
        visit(f, f.pop(), [L(key(k), f"http://h/{k}") for k in range(5)])
    f.commit(wait=True)
    writes: list = []
    conn = f.store.file.db.conn
    real = conn.execute
    conn.execute = lambda req, *a, **kw: (writes.append(req), real(req, *a, **kw))[1]
    for _ in range(3):
        visit(f, f.pop(), [L(key(7), "http://h/7")])
    f.commit(wait=True)
    conn.execute = real
    inserts = [w for w in writes if LINKS_TABLE in w and "INSERT" in w]
    assert sum(w.count("(?, ?, ?)") for w in inserts) == 3  # (a row is one "(?, ?, ?)")
    assert len(kept(path)) == 153
    f.close([])


def test_a_resume_with_another_keep_links_is_refused_and_changes_nothing(tmp_path):
    path = tmp_path / "k.sqlite"
    f = frontier_at(path, keep_links=False)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    visit_all(f, 5, {})
    f.close([])
    before = path.read_bytes()
    with pytest.raises(StoreError, match="OPIC_KEEP_LINKS=False there, True here"):
        frontier_at(path, resume=True, keep_links=True)
    assert path.read_bytes() == before
    g = frontier_at(path, keep_links=True)  # afresh: fine
    g.close([])
    with StateReader(path) as reader:
        assert reader.links_kept


def test_a_fresh_crawl_without_links_drops_the_previous_crawls_links(tmp_path):
    path = tmp_path / "f.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    visit_all(f, 5, {})
    f.close([])
    assert kept(path)
    g = frontier_at(path, keep_links=False)
    g.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    g.close([])
    with StateReader(path) as reader:
        assert not reader.links_kept
    assert kept(path) == {}


def test_a_damaged_links_row_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "x.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    visit_all(f, 5, {})
    f.close([])
    con = sqlite3.connect(path)
    con.execute(f"UPDATE {LINKS_TABLE} SET links = CAST(links || x'01' AS BLOB)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="checksum"):
        kept(path)
    with pytest.raises(StoreError, match="checksum"):
        frontier_at(path, resume=True)


def test_kill_9_leaves_links_that_agree_with_the_snapshot(tmp_path):
    """A continuous crawl whose page ``p`` links, at its ``v``-th visit, to pages that are a
    function of ``(p, v)``; killed at a random moment between its non-blocking commits. The
    committed links of every page are those of its last visit in the committed snapshot."""
    path = tmp_path / "k.sqlite"

    def targets(p: int, v: int) -> list[int]:
        return [(p * 7919 + v * 104729 + j * 31) % 3000 for j in range(5)]

    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from scrapy_opic.opic.contract import Entry, Link
        from tests.support.frontiers import one, sqlite_crawl
        f = sqlite_crawl({str(path)!r}, refresh=1.0, continuous=True, commit_visits=37,
                         keep_links=True)
        f.schedule([Entry(b"p0", "u", 0, "", b"req")])
        while True:
            lease = f.pop()
            p = int(lease.key[1:])
            v = int(one(f).engine.visits[one(f).engine.id_of(lease.key)]) + 1
            links = [Link(b"p%d" % t, "u")
                     for t in [(p * 7919 + v * 104729 + j * 31) % 3000 for j in range(5)]]
            f.visit(lease, links)
            f.schedule([Entry(link.key, "u", 0, "", b"req") for link in links])
            if one(f).engine.visit_count == 300:
                f.commit(wait=True)
                print("committed", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "committed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    links = kept(path)
    with StateReader(path) as reader:
        saved = reader.saved()
        keys = [key for _lo, rows in reader.page_chunks() for key, _url in rows]
    engine = saved.engine
    assert engine.visit_count >= 300
    refetched = 0
    for i in range(engine.n):
        v = int(engine.visits[i])
        if v == 0:
            assert i not in links
            continue
        refetched += v > 1
        p = int(keys[i][1:])
        want = sorted({engine.id_of(b"p%d" % t) for t in targets(p, v)} - {i})
        assert links[i] == want, (i, v)
    assert refetched > 0  # the last of several visits is the one kept


# -- the export's pagerank column ---------------------------------------------------------------
def reference_pagerank(n: int, edges: set[tuple[int, int]], alpha: float = 0.85) -> np.ndarray:
    """PageRank written out with a dense matrix: uniform teleport, a dangling page's share
    spread uniformly (independent of scrapy_opic's graph and power iteration)."""
    a = np.zeros((n, n))
    for u, v in edges:
        a[u, v] = 1.0
    deg = a.sum(axis=1)
    p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
    x = np.full(n, 1.0 / n)
    for _ in range(10_000):
        nxt = alpha * (x @ p) + (alpha * x[deg == 0].sum() + (1 - alpha)) / n
        if np.abs(nxt - x).sum() < 1e-15:
            break
        x = nxt
    return nxt / nxt.sum()


def site_edges(graph, fetched: set[int], closed: set[int], redirects: dict[int, int]) -> set:
    """The links a crawl of ``graph`` pays, by the engine's rules: from each fetched page, to
    each child (a redirect's target for a redirecting one) that is not closed nor itself."""
    edges = set()
    for u in fetched:
        for v in graph.children(u).tolist():
            v = redirects.get(v, v)
            if v not in closed and v != u:
                edges.add((u, v))
    return edges


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_pagerank_column_is_the_crawled_graphs_pagerank(tmp_path, fmt):
    import csv
    import json

    from scrapy_opic.export import PAGERANK_COLUMNS, open_state, write_export
    from scrapy_opic.opic.graph import power_law_graph

    g0 = power_law_graph(120, seed=4)  # + page 0 links to every page: all reachable
    src = np.concatenate([g0.sources(), np.zeros(120, np.int64)])
    dst = np.concatenate([g0.indices, np.arange(120)])
    graph = from_edges(src, dst, 120)
    gone, redirects = {7, 19, 33}, {11: 12, 40: 41}
    path = tmp_path / "g.sqlite"
    f = frontier_at(path, commit_visits=17)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r")])
    fetched = set()
    node = {key(k): k for k in range(graph.n)}
    while (lease := f.pop()) is not None:
        u = node[lease.key]
        if u in gone:
            f.fail(lease, 404)
        elif u in redirects:
            f.redirect(lease, Entry(key(redirects[u]), f"http://h/{redirects[u]}", 0, "", b"r"))
        else:
            children = graph.children(u).tolist()
            visit(f, lease, [L(key(v), f"http://h/{v}", payload=b"r") for v in children])
            fetched.add(u)
    f.close([])
    ref = reference_pagerank(graph.n, site_edges(graph, fetched, gone, redirects))
    out = tmp_path / f"pages.{fmt}"
    with open_state(path) as state:
        assert state.page_columns == PAGERANK_COLUMNS and state.n == graph.n
        write_export(state, str(out))
        top = state.top(5)
    if fmt == "csv":
        with open(out, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert list(rows[0]) == list(PAGERANK_COLUMNS)
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert list(rows[0]) == list(PAGERANK_COLUMNS)
    got = {int(r["url"].rsplit("/", 1)[1]): float(r["pagerank"]) for r in rows}
    assert len(got) == graph.n
    np.testing.assert_allclose([got[u] for u in range(graph.n)], ref, rtol=0, atol=1e-9)
    assert top[0].pagerank == pytest.approx(got[int(top[0].url.rsplit("/", 1)[1])], abs=0)
    # The graph is not trivial: closed and redirecting pages hold only the teleport share.
    assert min(ref[list(gone)]) < ref.mean() / 2


@pytest.mark.slow  # (a crawl of the engine's size)
def test_a_state_without_kept_links_has_no_pagerank_column(tmp_path):
    from scrapy_opic._commands.top import format_table
    from scrapy_opic._report import build_report
    from scrapy_opic.export import PAGE_COLUMNS, open_state

    path = tmp_path / "n.sqlite"
    f = frontier_at(path, keep_links=False)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    visit_all(f, 5, {})
    f.close([])
    with open_state(path) as state:
        assert state.pagerank() is None and state.page_columns == PAGE_COLUMNS
        pages = state.top(3)
        assert all(p.pagerank is None for p in pages)
        assert "pagerank" not in format_table(pages)
    path = tmp_path / "y.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "", b"r0")])
    visit_all(f, 5, {})
    f.close([])
    with open_state(path) as state:
        assert state.pagerank().sum() == pytest.approx(1.0)
        assert "pagerank" in format_table(state.top(3)).splitlines()[0]
        assert "<th>pagerank</th>" in build_report(state)
    with open_state(tmp_path / "n.sqlite") as state:
        assert "<th>pagerank</th>" not in build_report(state)
