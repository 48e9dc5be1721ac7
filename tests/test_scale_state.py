"""The embedded store at scale, tested small: a checkpoint writes the blocks of the pages that
changed (never all of them) and reads back to the same state, and a crawl stopped and resumed
at any point ends where an uninterrupted one does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrapy_opic._backends.crawl import Crawl
from scrapy_opic._backends.sqlite_state import BLOCK, StateReader
from scrapy_opic.opic.constants import IN_FLIGHT, PENDING
from scrapy_opic.opic.contract import Entry, Link
from tests.support.frontiers import L, key, one, sqlite_crawl, visit


def open_at(path, resume=False, **kw) -> Crawl:
    kw.setdefault("persist_requests", True)
    kw.setdefault("memory_requests", 2)
    kw.setdefault("commit_visits", 10**9)  # checkpoints only when a test takes one
    kw.setdefault("commit_seconds", 1e9)
    return sqlite_crawl(path, resume, refresh=0.3, **kw)


def crash(f: Crawl) -> None:
    """What a kill leaves: no close, no last commit."""
    f.store.file.db.close(do_log=False, force=True)
    f.store.lock.release()


def live_columns(f: Crawl) -> dict[str, np.ndarray]:
    n = one(f).engine.n
    return {name: np.array(a[:n]) for name, a in f.store.columns(f.fleet.parts[0]).items()}


def saved_columns(path) -> dict[str, np.ndarray]:
    with StateReader(path) as reader:
        parts: dict[str, list] = {}
        for _lo, cols in reader.columns(batch=3):  # (several batches even for small states)
            for name, rows in cols.items():
                parts.setdefault(name, []).append(rows)
    return {name: np.concatenate(p) for name, p in parts.items()}


def assert_same(live: dict, saved: dict) -> None:
    assert set(live) == set(saved)
    for name in live:
        a, b = live[name], saved[name]
        assert a.shape == b.shape, name
        # Bit for bit: the same float64 values (NaN-free), the same codes.
        assert a.tobytes() == b.tobytes(), name


def link(k: int, rng) -> L:
    return L(
        key(k),
        f"http://h{k % 3}/{k}",
        weight=float(rng.uniform(0.5, 2.0)),
        slot=f"h{k % 3}",
        payload=b"r%d" % k,
    )


def test_a_commit_writes_the_blocks_a_visit_touched_and_the_new_pages(tmp_path):
    path = tmp_path / "d.sqlite"
    f = open_at(path)
    n = 20 * BLOCK
    f.schedule([Entry(key(k), f"http://h/{k}", 0, "h", b"r") for k in range(n)])
    f.commit(wait=True)
    assert f.store.file.last_commit["blocks"] == 20 and f.store.file.last_commit["pages"] == n
    # One visit of a page in block 3 that links to pages in blocks 7 and 12, and one new page.
    lease = f.pop()
    i = one(f).engine.id_of(lease.key)
    f.visit(lease, [Link(key(7 * BLOCK + 1), "u"), Link(key(12 * BLOCK), "u"), Link(key(n), "u")])
    f.commit(wait=True)
    blocks = {i // BLOCK, 7, 12, n // BLOCK}
    assert f.store.file.last_commit["blocks"] == len(blocks)
    assert f.store.file.last_commit["pages"] == 1
    assert_same(live_columns(f), saved_columns(path))
    # Nothing changed: nothing but the scalars is written.
    f.commit(wait=True)
    assert f.store.file.last_commit["blocks"] == 0 and f.store.file.last_commit["pages"] == 0
    f.close([])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    continuous=st.booleans(),
    window=st.sampled_from(["unbounded", "interpolation:5", "fixed:3"]),
    steps=st.integers(5, 120),
)
def test_every_commit_reads_back_as_the_live_state(
    tmp_path_factory, seed, continuous, window, steps
):
    """Random operations of every kind, a checkpoint at random moments: each reads back to the
    live frontier's per-page arrays bit for bit, and a frontier resumed from the last one has
    the same cash and importance."""
    path = tmp_path_factory.mktemp("p") / "s.sqlite"
    rng = np.random.default_rng(seed)
    f = open_at(path, continuous=continuous, window=window)
    f.schedule([Entry(key(0), "http://h0/0", 0, "h0", b"r0")])
    held = []
    for _ in range(steps):
        op = rng.random()
        if op < 0.45 or not held:
            lease = f.pop()
            if lease is not None:
                held.append(lease)
        else:
            lease = held.pop(int(rng.integers(len(held))))
            kind = rng.random()
            if kind < 0.6:
                targets = rng.integers(0, 3 * BLOCK, int(rng.integers(0, 6)))
                visit(f, lease, [link(int(k), rng) for k in targets])
            elif kind < 0.7:
                f.fail(lease, 404 if rng.random() < 0.5 else 503)
            elif kind < 0.78:
                f.forfeit(lease)
            elif kind < 0.86:
                f.retry(lease, Entry(lease.key, "u", int(rng.integers(-1, 2)), "h1", b"again"))
            elif kind < 0.94:
                k = int(rng.integers(0, 3 * BLOCK))
                f.redirect(
                    lease,
                    Entry(key(k), f"http://h/{k}", 0, "h2", b"moved"),
                    permanent=bool(rng.random() < 0.5),
                )
            else:
                f.release([lease])
        if rng.random() < 0.1:
            f.drop(key(int(rng.integers(0, 3 * BLOCK))))
        if rng.random() < 0.15:
            f.commit(wait=True)
            assert_same(live_columns(f), saved_columns(path))
    f.commit(wait=True)
    assert_same(live_columns(f), saved_columns(path))
    cash, imp, n = one(f).engine.cash(), one(f).engine.importance(), one(f).engine.n
    in_flight = {lease.key for lease in held}
    urls = [one(f).url_of(i) for i in range(n)]
    crash(f)
    g = open_at(path, resume=True, continuous=continuous, window=window)
    assert one(g).engine.n == n
    assert one(g).engine.cash().tobytes() == cash.tobytes()
    assert one(g).engine.importance().tobytes() == imp.tobytes()
    assert [one(g).url_of(i) for i in range(n)] == urls
    assert not one(g).rows.payloads  # nothing per page in Python objects
    assert g.total_cash() == pytest.approx(1.0, abs=1e-9)
    for k in in_flight:  # in flight when it stopped: pending again
        assert g.status_of(k) == "pending"
    st_ = np.frombuffer(one(g).status, np.uint8)[:n]
    assert not (st_ == IN_FLIGHT).any()
    assert len(g) == int((st_ == PENDING).sum())
    g.close([])


def crawl(f: Crawl, visits: int, graph, rng_seed: int) -> int:
    """``visits`` pops and visits of a fixed random graph (link weights make every page's cash
    distinct: the greedy order has no ties to break differently)."""
    done = 0
    while done < visits:
        lease = f.pop()
        if lease is None:
            break
        i = int(lease.payload[1:])
        visit(
            f,
            lease,
            [L(key(j), f"http://h/{j}", weight=w, payload=b"r%d" % j) for j, w in graph[i]],
        )
        done += 1
    return done


def site(n: int, seed: int) -> dict[int, list[tuple[int, float]]]:
    rng = np.random.default_rng(seed)
    return {
        i: [(int(j), float(w)) for j, w in zip(rng.integers(0, n, 5), rng.uniform(0.5, 2, 5))]
        for i in range(n)
    }


@pytest.mark.parametrize(
    "continuous, stop",
    [
        (False, "close"),
        (True, "kill"),
        pytest.param(False, "kill", marks=pytest.mark.slow),  # (the full suite: every pair)
        pytest.param(True, "close", marks=pytest.mark.slow),
    ],
)
def test_a_crawl_stopped_and_resumed_ends_as_an_uninterrupted_one(tmp_path, stop, continuous):
    graph = site(300, 7)
    total = 600 if continuous else 250
    whole = open_at(tmp_path / "whole.sqlite", continuous=continuous, discovery=0.5)
    whole.schedule([Entry(key(0), "http://h/0", 0, "h", b"r0")])
    crawl(whole, total, graph, 0)
    want_cash, want_imp = one(whole).engine.cash(), one(whole).engine.importance()
    want_status = bytes(one(whole).status[: one(whole).engine.n])
    whole.close([])

    path = tmp_path / "parts.sqlite"
    rng = np.random.default_rng(3)
    f = open_at(path, continuous=continuous, discovery=0.5)
    f.schedule([Entry(key(0), "http://h/0", 0, "h", b"r0")])
    done = 0
    while done < total:
        step = min(total - done, int(rng.integers(1, 120)))
        done += crawl(f, step, graph, 0)
        if stop == "close":
            f.close([])
        else:  # a kill just after a checkpoint: nothing after it was done
            f.commit(wait=True)
            crash(f)
        f = open_at(path, resume=True, continuous=continuous, discovery=0.5)
    assert one(f).engine.n == len(want_cash)
    np.testing.assert_array_equal(one(f).engine.cash(), want_cash)
    np.testing.assert_array_equal(one(f).engine.importance(), want_imp)
    assert bytes(one(f).status[: one(f).engine.n]) == want_status
    f.close([])


def test_a_large_state_is_checked_table_by_table(tmp_path, monkeypatch):
    """Beyond CHECK_WHOLE_BYTES a resume checks the tables it reads, not the whole file: the
    state resumes, and a block damaged on disk is still refused."""
    import sqlite3

    from scrapy_opic._backends import StoreError
    from scrapy_opic._backends import sqlite_state as store

    monkeypatch.setattr(store, "CHECK_WHOLE_BYTES", 0)
    path = tmp_path / "big.sqlite"
    f = open_at(path)
    f.schedule([Entry(key(k), f"http://h/{k}", 0, "h", b"r") for k in range(3 * BLOCK)])
    f.close([])
    g = open_at(path, resume=True)
    assert len(g) == 3 * BLOCK
    g.close([])
    con = sqlite3.connect(path)
    (blob,) = con.execute("SELECT data FROM opic_blocks WHERE b = 1").fetchone()
    con.execute("UPDATE opic_blocks SET data = ? WHERE b = 1", (blob[:-1] + b"\x01",))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="damaged"):
        open_at(path, resume=True)
