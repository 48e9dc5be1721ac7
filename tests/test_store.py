"""The sqlite store: snapshots round-trip, commits are atomic, a kill -9 keeps the last one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from scrapy_opic.backends.sqlite import CHUNK, SqliteStore, StateReader, StoreError
from scrapy_opic.opic import OpicEngine
from scrapy_opic.opic.frontier import IN_FLIGHT, PENDING, VISITED, Frontier


def crawl_some(f: Frontier, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        got = f.pop()
        if got is None:
            return
        i, _ = got
        kids = [f.discover(f"p{k}") for k in rng.integers(0, 60, 4)]
        for k in kids:
            f.schedule(f.engine.key_of(k), f"req-{f.engine.key_of(k)}")
        f.complete(i, kids)


def test_snapshot_round_trip_and_resume(tmp_path):
    f = Frontier(OpicEngine(window="interpolation:5"), "greedy")
    f.schedule("p0", "req-p0")
    crawl_some(f, 30)
    in_flight, _ = f.pop()
    store = SqliteStore(tmp_path / "s.sqlite")
    for i in range(f.engine.n):
        if f.status[i] in (PENDING, IN_FLIGHT):
            store.put_request(i, f.payloads[i])
    urls = [f"http://h/{f.engine.key_of(i)}" for i in range(f.engine.n)]
    store.commit(f, urls, {"spider": "x"})
    store.close()

    again = SqliteStore(tmp_path / "s.sqlite")
    saved = again.load()
    engine, status = saved.engine, saved.status
    assert saved.meta == {"spider": "x"}
    assert saved.urls == urls
    g = Frontier.restore(engine, status, dict(again.requests()))
    assert abs(g.total_cash() - 1.0) < 1e-9
    np.testing.assert_allclose(g.engine.cash(), f.engine.cash())
    np.testing.assert_allclose(g.engine.importance(), f.engine.importance())
    assert g.status[in_flight] == PENDING  # back in line, cash intact
    assert len(g) == len(f) + 1
    assert g.engine.page("p0") == f.engine.page("p0")


def test_uncommitted_changes_are_not_in_the_file(tmp_path):
    f = Frontier(OpicEngine())
    f.schedule("a", "A")
    store = SqliteStore(tmp_path / "s.sqlite")
    store.put_request(0, "A")
    store.commit(f)
    store.put_request(1, "B")  # not committed
    store.db.close(do_log=False, force=True)  # what a crash leaves
    saved = SqliteStore(tmp_path / "s.sqlite").load()
    engine, status = saved.engine, saved.status
    assert engine.n == 1 and status[0] == PENDING
    assert dict(SqliteStore(tmp_path / "s.sqlite").requests()) == {0: "A"}


def test_kill_9_mid_crawl_leaves_a_consistent_snapshot(tmp_path):
    path = tmp_path / "k.sqlite"
    script = textwrap.dedent(f"""
        import numpy as np, sys
        from scrapy_opic.opic import OpicEngine
        from scrapy_opic.opic.frontier import Frontier, PENDING, IN_FLIGHT
        from scrapy_opic.backends.sqlite import SqliteStore
        f = Frontier(OpicEngine())
        store = SqliteStore({str(path)!r})
        f.schedule("p0", "req")
        store.put_request(0, "req")
        rng = np.random.default_rng(1)
        step = 0
        while True:
            got = f.pop()
            if got is None:  # keep going forever with fresh pages
                key = f"fresh{{step}}"
                f.schedule(key, "req")
                store.put_request(f.engine.id_of(key), "req")
                step += 1
                continue
            i, _ = got
            kids = [f.discover(f"p{{k}}") for k in rng.integers(0, 5000, 5)]
            for k in kids:
                if f.schedule(f.engine.key_of(k), "req"):
                    store.put_request(k, "req")
            f.complete(i, kids)
            store.del_request(i)
            step += 1
            if step % 50 == 0:
                store.commit(f)
                if step == 200:
                    print("committed", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "committed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = SqliteStore(path)
    saved = store.load()
    engine, status = saved.engine, saved.status
    requests = dict(store.requests())
    f = Frontier.restore(engine, status, requests)
    assert abs(f.total_cash() - 1.0) < 1e-9
    assert engine.visit_count >= 200
    pending = {i for i in range(engine.n) if status[i] in (PENDING, IN_FLIGHT)}
    # The request rows and the snapshot were committed together: exactly the pending pages.
    assert pending == set(requests)
    assert all(f.status[i] in (PENDING, VISITED) for i in range(engine.n))


def test_missing_or_corrupt_state_is_one_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no OPIC state"):
        StateReader(tmp_path / "nope.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        SqliteStore(bad).load()


def test_page_rows_are_chunked_and_append_only(tmp_path):
    """Keys and URLs go in fixed chunks; a commit rewrites only the chunks that grew, and a
    reload (after several commits) has every page's key and URL in id order."""
    f = Frontier(OpicEngine())
    store = SqliteStore(tmp_path / "c.sqlite")
    urls: list[str] = []
    writes: list[str] = []
    real_set = store.db.__class__.__setitem__

    def spy(db, key, value):
        writes.append(key)
        real_set(db, key, value)

    store.db.__class__.__setitem__ = spy
    try:
        for batch in (10, CHUNK, 3):
            for _ in range(batch):
                key = f"k{len(urls)}"
                f.discover(key)
                urls.append(f"http://h/{key}")
            writes.clear()
            store.commit(f, urls)
            pages = sorted(k for k in writes if k.startswith("pages/"))
            last = (len(urls) - 1) // CHUNK
            first = (len(urls) - batch) // CHUNK
            assert pages == sorted(f"pages/{c}" for c in range(first, last + 1))
    finally:
        store.db.__class__.__setitem__ = real_set
    store.close()
    saved = SqliteStore(tmp_path / "c.sqlite").load()
    assert saved.urls == urls
    assert [saved.engine.key_of(i) for i in range(len(urls))] == [f"k{i}" for i in range(len(urls))]
    with StateReader(tmp_path / "c.sqlite") as reader:
        assert reader.n == len(urls)
        got = [url for _lo, rows in reader.page_chunks() for _k, url in rows]
        assert got == urls
        assert reader.urls_of([0, CHUNK + 1]) == {0: urls[0], CHUNK + 1: urls[CHUNK + 1]}


def test_reader_sees_one_commit_while_a_writer_goes_on(tmp_path):
    """A reader opened between two commits keeps seeing the first one (one read transaction),
    and the writer's commits are not blocked by it (WAL)."""
    path = tmp_path / "w.sqlite"
    f = Frontier(OpicEngine())
    f.schedule("a", "A")
    store = SqliteStore(path)
    store.commit(f, ["http://h/a"])
    with StateReader(path) as reader:
        for k in range(CHUNK + 5):  # more pages and a new chunk, committed twice
            f.discover(f"b{k}")
        store.commit(f, ["http://h/a"] + [f"http://h/b{k}" for k in range(CHUNK + 5)])
        store.commit(f, ["http://h/a"] + [f"http://h/b{k}" for k in range(CHUNK + 5)])
        assert reader.n == 1
        assert reader.engine().n == 1
        assert [rows for _lo, rows in reader.page_chunks()] == [[("a", "http://h/a")]]
    with StateReader(path) as reader:
        assert reader.n == CHUNK + 6
    store.close()


def test_a_crawl_starting_on_a_state_waits_for_its_reader(tmp_path):
    """A reader inside a closed state (an export) holds a read lock; a crawl that starts on the
    same state waits for it to finish instead of failing."""
    import threading
    import time

    path = tmp_path / "r.sqlite"
    f = Frontier(OpicEngine())
    f.schedule("a", "A")
    store = SqliteStore(path)
    store.commit(f, ["http://h/a"])
    store.close()
    reader = StateReader(path)  # a read transaction, open
    opened: list = []

    def start_crawl() -> None:
        t0 = time.monotonic()
        store = SqliteStore(path)  # must wait for the reader, then succeed
        opened.append((store.load().urls, time.monotonic() - t0))
        store.close()

    crawl = threading.Thread(target=start_crawl)
    crawl.start()
    time.sleep(1.0)
    assert not opened  # still waiting
    reader.close()
    crawl.join(timeout=20)
    urls, _waited = opened[0]
    assert urls == ["http://h/a"]  # opened once the reader had gone


def test_a_failed_background_commit_stops_the_crawl_with_an_error_not_a_hang(tmp_path):
    """A non-blocking commit that fails in sqlitedict's writer thread (here: the file size limit,
    as a full disk would) must surface as a StoreError at the next call, not hang it."""
    path = tmp_path / "f.sqlite"
    script = textwrap.dedent(f"""
        import os, resource, signal, time
        from scrapy_opic.opic import OpicEngine
        from scrapy_opic.opic.frontier import Frontier
        from scrapy_opic.backends.sqlite import SqliteStore, StoreError
        store = SqliteStore({str(path)!r})
        f = Frontier(OpicEngine())
        for k in range(50):
            f.schedule(f"k{{k}}", None)
        store.commit(f, [], {{}})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = os.path.getsize({str(path)!r} + "-wal") + 8192
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        for k in range(20000):
            f.schedule(f"key-{{k}}-" + "x" * 40, None)
        store.commit(f, ["u"] * f.engine.n, {{"big": "y" * 200000}}, blocking=False)
        deadline = time.monotonic() + 30  # until the writer thread has failed
        while store.db.conn.is_alive() and not store.db.conn.exception:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        for call in (lambda: store.del_request(5), lambda: store.get_request(6),
                     lambda: store.commit(f, [])):
            try:
                call()
            except StoreError as exc:
                print("StoreError", exc)
        store.close()
        print("closed")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "closed" and sum(ln.startswith("StoreError") for ln in lines) == 3
