"""The embedded backend's sqlite file: checkpoints round-trip, commits are atomic, a kill -9 keeps
the last one, readers see one commit, and a failing disk is an error, not a hang."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from scrapy_opic._backends import StoreError
from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.sqlite import Checkpoint, SqliteFile
from scrapy_opic._backends.sqlite_state import CHUNK, StateReader
from scrapy_opic.opic.contract import Entry
from tests.support.frontiers import L, key, one, sqlite_crawl, visit


def frontier_at(
    path, resume: bool = False, window: str = "interpolation:5", refresh: float = 0.0, **kw
) -> Crawl:
    kw.setdefault("persist_requests", True)
    return sqlite_crawl(path, resume, refresh=refresh, window=window, **kw)


def entry(i: int) -> Entry:
    return Entry(key(i), f"http://h/{i}", 0, f"h{i % 3}", b"req%d" % i)


def crawl_some(f, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        lease = f.pop()
        if lease is None:
            return
        visit(
            f,
            lease,
            [L(key(k), f"http://h/{k}", payload=b"req%d" % k) for k in rng.integers(0, 60, 4)],
        )


def crash(f: Crawl) -> None:
    """What a kill leaves: no close, no last commit."""
    f.store.file.db.close(do_log=False, force=True)
    f.store.lock.release()  # (the kernel's part of a kill)


def test_a_checkpoint_round_trips_and_resumes(tmp_path):
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([entry(0)])
    crawl_some(f, 30)
    in_flight = f.pop()
    f.commit(wait=True)
    cash, importance = one(f).engine.cash(), one(f).engine.importance()
    pending = len(f)
    urls = [one(f).url_of(i) for i in range(one(f).engine.n)]
    crash(f)

    g = frontier_at(path, resume=True)
    assert g.total_cash() == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(one(g).engine.cash(), cash)
    np.testing.assert_allclose(one(g).engine.importance(), importance)
    assert g.status_of(in_flight.key) == "pending"  # back in line, cash intact
    assert len(g) == pending + 1
    assert [one(g).url_of(i) for i in range(one(g).engine.n)] == urls
    assert one(g).engine.id_of(key(0)) == 0
    got = {lease.key: lease.payload for lease in iter(g.pop, None)}
    assert got[in_flight.key] == in_flight.payload  # read back from its row
    g.close([])


def test_verdicts_on_validators_are_kept_with_a_checkpoint(tmp_path):
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([entry(0)])
    crawl_some(f, 3)
    f.judge("liar.example", {"false_304": True})
    f.commit(wait=True)
    crash(f)
    g = frontier_at(path, resume=True)
    assert g.verdicts() == {"liar.example": {"false_304": True}}
    g.close([])


def test_the_adaptive_window_resumes_where_a_kill_left_it(tmp_path):
    """The adaptive window's watch (the change it saw, its running mean) is saved with each
    commit: a crawl killed after a change resumes with the window it had, not a full one."""
    path = tmp_path / "s.sqlite"
    f = frontier_at(path, window="adaptive:30", refresh=1.0, continuous=True)
    f.schedule([entry(0)])
    crawl_some(f, 40)
    for _ in range(20):
        one(f).engine.links_changed(0.5)
    crawl_some(f, 10, seed=1)
    f.commit(wait=True)
    watch, importance = one(f).engine.window.scalars(), one(f).engine.importance()
    assert watch["changed_at"] is not None
    crash(f)
    g = frontier_at(path, resume=True, window="adaptive:30", refresh=1.0, continuous=True)
    assert one(g).engine.window.spec() == "adaptive:30" and one(g).engine.window.scalars() == watch
    np.testing.assert_allclose(one(g).engine.importance(), importance)
    g.close([])


def test_uncommitted_changes_are_not_in_the_file(tmp_path):
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([entry(0)])
    f.commit(wait=True)
    f.schedule([entry(1)])  # its request row is written, not committed
    crash(f)
    g = frontier_at(path, resume=True)
    assert one(g).engine.n == 1 and g.status_of(key(0)) == "pending"
    with StateReader(path) as reader:
        assert list(reader.requests()) == [(0, key(0), b"req0")]
    g.close([])


def test_kill_9_mid_crawl_leaves_a_consistent_checkpoint(tmp_path):
    path = tmp_path / "k.sqlite"
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(os.getcwd())!r})
        from scrapy_opic.opic.contract import Entry, Link
        from tests.support.frontiers import one, sqlite_crawl
        f = sqlite_crawl({str(path)!r}, persist_requests=True, commit_visits=50)
        rng = np.random.default_rng(1)
        step = 0
        while True:
            lease = f.pop()
            if lease is None:  # keep going forever with fresh pages
                f.schedule([Entry(b"fresh%d" % step, "u", 0, "s", b"req")])
                step += 1
                continue
            links = [Link(b"p%d" % k, "u") for k in rng.integers(0, 5000, 5)]
            f.visit(lease, links)
            f.schedule([Entry(link.key, "u", 0, "s", b"req") for link in links])
            step += 1
            if one(f).engine.visit_count == 200:  # a checkpoint that waits for the disk
                f.commit(wait=True)
                print("committed", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "committed"  # then killed while it goes on
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    f = frontier_at(path, resume=True, window="unbounded")
    assert f.total_cash() == pytest.approx(1.0, abs=1e-9)
    assert one(f).engine.visit_count >= 200  # what was committed before the kill is there
    # The request rows and the snapshot were committed together: exactly the pending pages.
    pending = {i for i in range(one(f).engine.n) if one(f).status[i] == 1}
    with StateReader(path) as reader:
        assert pending == {i for i, _key, _data in reader.requests()}
    assert f.figures()["in_flight"] == 0
    f.close([])


def test_missing_or_corrupt_state_is_one_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no OPIC state"):
        StateReader(tmp_path / "nope.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        frontier_at(bad, resume=True)


def test_page_rows_are_written_once_and_read_back_in_order(tmp_path):
    """Keys and URLs are rows written at the commit after their page appeared (a commit writes
    the new ones only), and a reload (after several commits) has every page's key and URL in
    id order, in chunks."""
    path = tmp_path / "c.sqlite"
    f = frontier_at(path)
    urls: list[str] = []
    for batch in (10, CHUNK, 3, 0):
        for _ in range(batch):
            url = f"http://h/{len(urls)}"
            one(f).page(f"k{len(urls)}", url)
            urls.append(url)
        f.commit(wait=True)
        assert f.store.file.last_commit["pages"] == batch
    assert [one(f).url_of(i) for i in range(len(urls))] == urls  # read back from their rows
    assert [one(f).engine.key_of(i) for i in (0, CHUNK + 2)] == ["k0", f"k{CHUNK + 2}"]
    f.close([])
    with StateReader(path) as reader:
        assert reader.n == len(urls)
        chunks = list(reader.page_chunks())
        assert [len(rows) for _lo, rows in chunks] == [CHUNK, 13]
        assert [url for _lo, rows in chunks for _k, url in rows] == urls
        assert [k for _lo, rows in chunks for k, _url in rows] == [
            f"k{i}" for i in range(len(urls))
        ]
        assert reader.urls_of([0, CHUNK + 1]) == {0: urls[0], CHUNK + 1: urls[CHUNK + 1]}


def test_a_reader_sees_one_commit_while_a_writer_goes_on(tmp_path):
    """A reader opened between two commits keeps seeing the first one (one read transaction),
    and the writer's commits are not blocked by it (WAL)."""
    path = tmp_path / "w.sqlite"
    f = frontier_at(path)
    f.schedule([Entry("a", "http://h/a", 0, "", b"A")])
    f.commit(wait=True)
    with StateReader(path) as reader:
        for k in range(CHUNK + 5):  # more pages and a new chunk, committed twice
            one(f).page(f"b{k}", f"http://h/b{k}")
        f.commit(wait=True)
        f.commit(wait=True)
        assert reader.n == 1
        assert reader.engine().n == 1
        assert [rows for _lo, rows in reader.page_chunks()] == [[("a", "http://h/a")]]
    with StateReader(path) as reader:
        assert reader.n == CHUNK + 6
    f.close([])


@pytest.mark.slow  # (waits a second on purpose)
def test_a_crawl_starting_on_a_state_waits_for_its_reader(tmp_path):
    """A reader inside a closed state (an export) holds a read lock; a crawl that starts on the
    same state waits for it to finish instead of failing."""
    import threading
    import time

    path = tmp_path / "r.sqlite"
    f = frontier_at(path)
    one(f).page("a", "http://h/a")
    f.close([])
    reader = StateReader(path)  # a read transaction, open
    opened: list = []

    def start_crawl() -> None:
        store = SqliteFile(path)  # must wait for the reader, then succeed
        with StateReader(path) as saved:
            opened.append([url for _lo, rows in saved.page_chunks() for _k, url in rows])
        store.close()

    crawl = threading.Thread(target=start_crawl)
    crawl.start()
    time.sleep(1.0)
    assert not opened  # still waiting
    reader.close()
    crawl.join(timeout=30)
    assert opened == [["http://h/a"]]  # opened once the reader had gone


def test_a_failed_background_commit_stops_the_crawl_with_an_error_not_a_hang(tmp_path):
    """A non-blocking commit that fails in sqlitedict's writer thread (here: the file size limit,
    as a full disk would) must surface as a StoreError at the next call, not hang it."""
    path = tmp_path / "f.sqlite"
    script = textwrap.dedent(f"""
        import os, resource, signal, sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from scrapy_opic._backends import StoreError
        from tests.support.frontiers import one, sqlite_crawl
        f = sqlite_crawl({str(path)!r})
        file = f.store.file
        for k in range(50):
            one(f).page(f"k{{k}}", "u")
        f.commit(wait=True)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = os.path.getsize({str(path)!r} + "-wal") + 8192
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        for k in range(20000):
            one(f).page(f"key-{{k}}-" + "x" * 40, "u")
        f.store.meta["big"] = "y" * 200000
        early = False
        try:  # (the writer may fail while this call still queues the snapshot's rows)
            f.commit(wait=False)
        except StoreError as exc:
            early = True
            print("early", exc)
        deadline = time.monotonic() + 30  # until the writer thread has failed
        while not early and file.db.conn.is_alive() and not file.db.conn.exception:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        for call in (lambda: file.get_page(5), lambda: file.get_request(6),
                     lambda: f.commit(wait=True)):
            try:
                call()
            except StoreError as exc:
                print("StoreError", exc)
        f.store.close()
        print("closed")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "closed" and sum(ln.startswith("StoreError") for ln in lines) == 3


def test_a_row_changed_on_disk_fails_its_checksum(tmp_path):
    """A byte of a row changed in place (a URL's character: still valid UTF-8, the file's
    structure intact) is refused by every read of that row, never handed out as a wrong URL.
    (A resume reads no page row: it finds the damage when the row is read, an export too.)"""
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/unique-marker", 0, "h", b"req")])
    f.close([])
    data = path.read_bytes()
    assert data.count(b"unique-marker") == 1
    path.write_bytes(data.replace(b"unique-marker", b"unique-markes"))
    with StateReader(path) as reader:
        with pytest.raises(StoreError, match="damaged .*checksum"):
            list(reader.page_chunks())
        with pytest.raises(StoreError, match="checksum"):
            reader.urls_of([0])
    g = frontier_at(path, resume=True)
    with pytest.raises(StoreError, match="damaged row .*checksum"):
        g.store.file.get_page(0)
    # Mid-crawl a page's URL is only named (the log, the top page): unknown, said once.
    assert one(g).url_of(0) is None and g.figures()["damaged_rows"] == 1
    g.close([])


def test_a_block_changed_on_disk_is_refused_at_resume(tmp_path):
    """A byte of a page block changed in place is refused at load, before anything is
    written: the file is left as it was."""
    path = tmp_path / "s.sqlite"
    f = frontier_at(path)
    f.schedule([Entry(key(0), "http://h/0", 0, "h", b"req")])
    f.close([])
    con = sqlite3.connect(path)
    (blob,) = con.execute("SELECT data FROM opic_blocks WHERE b = 0").fetchone()
    blob = bytearray(blob)
    blob[40] ^= 1
    con.execute("UPDATE opic_blocks SET data = ? WHERE b = 0", (bytes(blob),))
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="damaged .*checksum"):
        frontier_at(path, resume=True)
    assert path.read_bytes() == before


def test_a_state_is_locked_against_a_second_writer(tmp_path):
    """Another process holding the state (here: a lock taken in a subprocess) makes the open
    fail at once with StateInUse; a kill -9 of the holder frees it."""
    from scrapy_opic._backends.sqlite_state import StateInUse

    path = tmp_path / "l.sqlite"
    frontier_at(path).close([])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, time; sys.path.insert(0, {os.getcwd()!r});"
            "from scrapy_opic._backends.sqlite_state import StateLock;"
            f"lock = StateLock({str(path)!r}); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateInUse, match="in use by another running crawl"):
            frontier_at(path, resume=True)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    frontier_at(path, resume=True).close([])  # the kernel dropped the lock with its holder


def test_a_fresh_crawl_keeps_the_previous_state_until_its_first_commit(tmp_path):
    path = tmp_path / "p.sqlite"
    f = frontier_at(path, persist_requests=False)
    f.schedule([entry(0)])
    f.close([])
    g = frontier_at(path, persist_requests=False)  # a new crawl: not a resume
    g.schedule([entry(5), entry(6)])
    with StateReader(path) as reader:
        assert reader.n == 1  # still the previous crawl's
    crash(g)  # killed before its first commit
    with StateReader(path) as reader:
        assert reader.n == 1
    h = frontier_at(path, persist_requests=False)
    h.schedule([entry(5), entry(6)])
    lease = h.pop()
    visit(h, lease, [])  # the first visit makes a checkpoint due...
    assert h.pop() is not None  # ...taken at the next call, once its links are filed
    h.store.file.db.commit(blocking=True)
    with StateReader(path) as reader:
        assert reader.n == 2
    h.close([])


def test_the_first_checkpoints_come_after_1_2_4_visits(tmp_path):
    f = frontier_at(tmp_path / "c.sqlite", commit_visits=10, commit_seconds=3600)
    f.schedule([entry(i) for i in range(40)])
    commits = []
    real = f.commit
    f.commit = lambda wait=False: (commits.append(one(f).engine.visit_count), real(wait))
    for _ in range(40):
        visit(f, f.pop(), [])
    assert commits == [1, 2, 4, 8, 16, 26, 36]
    f.close([])


def empty_checkpoint() -> Checkpoint:
    """A checkpoint that writes no engine, page or link: the commit of the request rows."""
    return Checkpoint(engine={}, frontier={}, blocks=[], pages=[], links=None, meta={}, seconds=0.0)


def test_a_request_row_reads_what_was_last_written_before_and_after_its_commit_lands(
    tmp_path, monkeypatch
):
    """Request rows are read on a connection of the crawl's own, which sees committed rows
    only. Whatever the writer thread has run (here it is kept busy), a read gives the row last
    written: a queued change before its commit lands, the file's row after; a fresh state
    never the previous crawl's rows."""
    from scrapy_opic._backends import sqlite as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "REQUEST_BATCH", 2)  # (queued two by two)
    path = tmp_path / "q.sqlite"
    point = empty_checkpoint()
    old = SqliteFile(path)
    old.put_request(5, b"k5", b"old crawl", new=True)
    old.put_request(6, b"k6", b"old crawl", new=True)
    old.commit(point)
    old.close()

    f = SqliteFile(path, fresh=True)
    # The writer thread runs statements in order: this one keeps it busy while the rows below
    # are queued behind it, and read.
    busy = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) "
        "SELECT count(*) FROM c"
    )
    f.db.conn.execute(busy)
    # The previous crawl's row, deleted by a commit still to come, is not read.
    assert f.get_request(5) is None
    f.put_request(1, b"k1", b"one", new=True)
    f.put_request(2, b"k2", b"two", new=True)  # queued (a batch of 2)
    f.put_request(3, b"k3", b"three", new=True)
    f.commit(point, blocking=False)  # queued, cannot land yet
    f.put_request(1, b"k1", b"one again")
    f.del_request(2)  # (1 and 2 queued again)
    f.put_request(4, b"k4", b"four", new=True)  # in memory only
    assert [f.get_request(i) for i in (1, 2, 3, 4)] == [
        (b"k1", b"one again"),
        None,
        (b"k3", b"three"),
        (b"k4", b"four"),
    ]
    f.commit(point)  # blocking: everything has landed
    f.put_request(3, b"k3", b"three again")  # (in memory)
    assert [f.get_request(i) for i in (1, 2, 3, 4, 5, 6)] == [
        (b"k1", b"one again"),
        None,
        (b"k3", b"three again"),
        (b"k4", b"four"),
        None,
        None,
    ]
    # Once the file is readable: what was queued after the last commit that landed.
    f.db.conn.execute(busy)
    f.del_request(1)
    f.put_request(7, b"k7", b"seven", new=True)  # (1 and 7 queued)
    f.commit(point, blocking=False)
    f.put_request(3, b"k3", b"three, third")
    f.put_request(8, b"k8", b"eight", new=True)  # (3 and 8 queued)
    want = [None, (b"k3", b"three, third"), (b"k4", b"four"), (b"k7", b"seven")]
    assert [f.get_request(i) for i in (1, 3, 4, 7)] == want
    f.commit(point, blocking=False)
    for _ in range(500):  # until the commits land (then read from the file)
        f.get_request(99)
        if not f._landing:
            break
        time.sleep(0.01)
    assert not f._landing and not f._queued and not f._requests
    assert [f.get_request(i) for i in (1, 3, 4, 7)] == want
    f.close()


def test_a_request_row_read_before_the_files_tables_are_committed(tmp_path):
    """A new file whose tables are still in the writer's open transaction: a read of a row it
    does not hold asks the writer (no error from a table the reading connection cannot see)."""
    f = SqliteFile(tmp_path / "new.sqlite")
    f.put_request(1, b"k1", b"one", new=True)
    assert f.get_request(2) is None
    assert f.get_request(1) == (b"k1", b"one")
    f.close()


def test_commits_that_landed_are_forgotten_without_a_read(tmp_path):
    """A crawl that never reads a request row from the file (its pops come from memory) keeps
    no record of its landed commits: at most the ones still on their way."""
    f = SqliteFile(tmp_path / "c.sqlite")
    point = empty_checkpoint()
    for n in range(50):
        f.put_request(n, b"k", b"data", new=True)
        f.commit(point, blocking=False)
    f.db.conn.select_one("SELECT 1")  # (the writer has run every statement queued so far)
    f.commit(point, blocking=False)
    assert len(f._landing) == 1  # (this last one, which may not have landed yet)
    f.close()


def test_rows_written_and_deleted_in_batches_larger_than_a_statement_holds(tmp_path):
    """Request and page rows go to the writer as multi-row statements of at most
    ``ROWS_PER_STATEMENT`` rows: batches of several statements and a remainder land whole, the
    last change of each row winning, deletions as well."""
    from scrapy_opic._backends.sqlite import ROWS_PER_STATEMENT as ROWS

    n = 3 * ROWS + 7
    path = tmp_path / "b.sqlite"
    f = SqliteFile(path)
    for i in range(n):
        f.put_request(i, b"k%d" % i, b"first", new=True)
    f.commit(empty_checkpoint())  # (the rows are queued: not new any more)
    for i in range(n):
        f.put_request(i, b"k%d" % i, b"second")
    gone = set(range(0, n, 3)) | set(range(n - ROWS - 1, n))
    for i in gone:
        f.del_request(i)
    pages = [(i, b"p%d" % i, f"http://h/{i}") for i in range(2 * ROWS - 1)]
    point = empty_checkpoint()._replace(pages=pages)
    f.commit(point)
    f.close()
    with sqlite3.connect(path) as db:
        requests = dict(db.execute("SELECT id, data FROM opic_requests"))
        urls = dict(db.execute("SELECT id, url FROM opic_pages"))
    assert requests == {i: b"second" for i in range(n) if i not in gone}
    assert urls == {i: u for i, _k, u in pages}


def test_rows_are_written_by_statements_of_a_few_sizes():
    """Every count of rows is cut into consecutive statements covering it exactly, none over
    ``ROWS_PER_STATEMENT`` rows, of a handful of sizes in all (sqlite keeps a compiled program
    per distinct statement)."""
    from scrapy_opic._backends.sqlite import ROWS_PER_STATEMENT, _chunks

    sizes = set()
    for n in range(0, 5 * ROWS_PER_STATEMENT):
        chunks = list(_chunks(n))
        assert [start for start, _size in chunks] == [
            sum(size for _start, size in chunks[:k]) for k in range(len(chunks))
        ]
        assert sum(size for _start, size in chunks) == n
        assert all(0 < size <= ROWS_PER_STATEMENT for _start, size in chunks)
        sizes.update(size for _start, size in chunks)
    assert len(sizes) <= ROWS_PER_STATEMENT.bit_length()
