"""The embedded frontier and the Redis frontier run the same engine, twice: in Python and in Lua.
This test applies one random sequence of every operation of the Frontier contract (schedule,
pop with full slots and the virtual page's payout, visit with weighted, boosted, refused, self and
duplicate links, fail, forfeit, drop, redirect, retry, release, and outcomes under stale leases)
to both, for every window and estimator the Redis script runs, in one-pass and continuous crawls,
and compares every number after every step: each page's stored cash, history, clock stamps,
visits, flags, status and received-cash moments; the global scalars; the figures; the importance
of every page; and the importance the visit returns (what OPIC_ITEM_FIELD writes into items).

Ties: two pages with exactly the same cash may be popped in either order by the two backends.
When the pops differ, the test checks that it is a tie, then hands the embedded page back and
pops the Redis one there too (every page has a download slot of its own, so the other slots can
be marked full): both frontiers then hold the same state again.
"""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest

from scrapy_opic.opic.constants import DNS, ERROR, FORBIDDEN, OK, STATUSES, TIMEOUT
from scrapy_opic.opic.engine import OpicEngine
from scrapy_opic.opic.frontier import Entry, Link, MemoryFrontier
from tests.frontiers import key

redis = pytest.importorskip("redis")

WINDOWS = [
    "unbounded",
    "unbounded:lemma",
    "unbounded:paper",
    "unbounded:regression",
    "interpolation:3",
    "interpolation:0.004:wall",  # a few milliseconds: visits fall inside and outside it
]
#: The embedded engine's scalars and their names in the Redis globals.
SCALARS = {
    "G": "G",
    "g_real": "greal",
    "virtual_cash": "vcash",
    "virtual_history": "vhist",
    "acc_all": "acca",
    "acc_unfetched": "accu",
    "n_unfetched": "nunf",
    "n_dead": "ndead",
    "visit_count": "visits",
    "_cash_at_visit_ema": "ema",
    "acc_credit": "accc",
    "credit_total": "ctot",
    "credit_passed": "cpass",
    "credit_dangling": "cdang",
    "b_total": "btot",
    "d_total": "dtot",
    "default_rate": "rate",
}
N_KEYS = 40
#: Outcomes of fail, forfeit and drop: final ones (forbidden, 404, 410) and others.
OUTCOME_CHOICES = (ERROR, DNS, TIMEOUT, 503, FORBIDDEN, 404, 410)


SLOTS: set[str] = set()


def slot(i: int) -> str:
    """Every page has a download slot of its own (see the module docstring: ties)."""
    name = f"s{i}"
    SLOTS.add(name)
    return name


class Pair:
    """The same operations on an embedded and a Redis frontier, checked to agree."""

    def __init__(
        self,
        redis_url: str,
        window: str,
        continuous: bool,
        rng: random.Random,
        n_keys: int = N_KEYS,
    ) -> None:
        from scrapy_opic.backends.redis import RedisFrontier

        refresh = 1.0 if continuous else rng.choice([0.0, 0.5])
        self.clock = [0.0]  # the Redis server's time of the last wall-clock window step
        engine = OpicEngine(
            epsilon=0.15, refresh=refresh, window=window, time_fn=lambda: self.clock[0]
        )
        self.mem = MemoryFrontier(engine, "greedy", continuous)
        client = redis.Redis.from_url(redis_url)
        self.red = RedisFrontier(client, f"opic:diff:{uuid.uuid4().hex}", lease=600)
        self.red.open(epsilon=0.15, refresh=refresh, continuous=continuous, window=window)
        # The discovery share (continuous crawls): a debt the two must carry alike.
        self.mem.discovery = self.red.discovery = rng.choice([0.0, 0.3, 0.5, 1.0])
        # Links to closed pages left out of the out-degree, or paying the virtual page.
        engine.closed_links_virtual = self.red.closed_links_virtual = rng.random() < 0.5
        self.rng = rng
        self.n_keys = n_keys  # keys that schedules, drops and links pick among
        self.leases: dict[bytes, tuple] = {}  # key -> (embedded lease, Redis lease)
        self.settled: list[tuple] = []  # leases already settled (for stale outcomes)
        self.steps = 0

    def close(self) -> None:
        self.red.clear()
        self.red.client.close()

    # -- applying one operation to both ------------------------------------------------------
    def both(self, op: str, *args, red_args=None, **kw):
        """Apply ``op`` to Redis, then (at the time Redis used) to the embedded frontier."""
        got_red = getattr(self.red, op)(*(args if red_args is None else red_args), **kw)
        self.clock[0] = self.red.globals()["clock"]
        got_mem = getattr(self.mem, op)(*args, **kw)
        return got_mem, got_red

    def entry(self, i: int) -> Entry:
        return Entry(
            key(i), f"http://h/{i}", self.rng.choice([0, 0, 0, 1, -1]), slot(i), b"r%d" % i
        )

    def step(self) -> None:
        rng = self.rng
        self.steps += 1
        op = rng.choices(
            ["schedule", "pop", "visit", "fail", "forfeit", "drop", "redirect", "retry",
             "release", "stale"],
            weights=[3, 6, 8, 1, 1, 1, 1, 1, 1, 1],
        )[0]  # fmt: skip
        if op in ("visit", "fail", "forfeit", "redirect", "retry", "release") and not self.leases:
            op = "pop"
        if op == "schedule":
            entries = [self.entry(rng.randrange(self.n_keys)) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.2:  # a page known only by its link, no request yet
                entries.append(entries[0]._replace(payload=None))
            again = rng.random() < 0.2
            mem, red = self.both("schedule", entries, again=again)
            assert mem == red
        elif op == "pop":
            self.pop()
        elif op == "drop":
            mem, red = self.both(
                "drop", key(rng.randrange(self.n_keys)), rng.choice(OUTCOME_CHOICES)
            )
            assert mem == red
        elif op == "stale" and self.settled:
            lease_mem, lease_red = rng.choice(self.settled)
            mem, red = self.both("visit", lease_mem, [], red_args=(lease_red, []))
            assert mem is None and red is None
            mem, red = self.both("fail", lease_mem, red_args=(lease_red,))
            assert mem is False and red is False
        elif op in ("visit", "fail", "forfeit", "redirect", "retry", "release"):
            k = rng.choice(sorted(self.leases))
            lease_mem, lease_red = self.leases.pop(k)
            self.settled.append((lease_mem, lease_red))
            if op == "visit":
                self.visit(lease_mem, lease_red)
            elif op in ("fail", "forfeit"):
                # Final outcomes close the page; the others keep it in a continuous crawl.
                o = rng.choice(OUTCOME_CHOICES)
                kw = {}
                if op == "fail" and rng.random() < 0.3:
                    kw["payload"] = b"later%d" % self.steps
                mem, red = self.both(op, lease_mem, o, red_args=(lease_red, o), **kw)
                assert mem is True and red is True
            elif op == "release":
                mem, red = self.both("release", [lease_mem], red_args=([lease_red],))
                assert mem == red == 1
            else:
                i = int(rng.choice([rng.randrange(self.n_keys), self.n_keys + self.steps]))
                target = self.entry(i)
                if op == "retry":
                    # (In its own slot: the slot of its key, as every page has; see ties.)
                    target = target._replace(key=lease_mem.key, url="retried", slot=lease_mem.slot)
                kw = {"permanent": rng.random() < 0.5} if op == "redirect" else {}
                mem, red = self.both(op, lease_mem, target, red_args=(lease_red, target), **kw)
                assert mem == red
        self.compare()

    def pop(self) -> None:
        slots = {slot(i) for i in range(self.n_keys)}
        full = set(self.rng.sample(sorted(slots), self.rng.randint(0, 8)))
        red = self.red.pop(full)
        debt = self.mem.discovery_debt
        mem = self.mem.pop(full)
        if red is None or mem is None:
            assert red is None and mem is None
            return
        if mem.key != red.key:  # a tie, broken differently: let the embedded one follow
            assert self.mem.cash_of(mem.key) == self.mem.cash_of(red.key)
            assert self.mem.release([mem]) == 1
            self.mem.discovery_debt = debt
            mem = self.mem.pop(SLOTS - {red.slot})
            assert mem.key == red.key
        assert mem.payload == red.payload and mem.slot == red.slot
        self.leases[mem.key] = (mem, red)

    def visit(self, lease_mem, lease_red) -> None:
        rng = self.rng
        weighted = rng.random() < 0.5
        links = []
        for _ in range(rng.randint(0, 6)):
            i = rng.choice(
                [rng.randrange(self.n_keys), self.n_keys + 1000 + len(links) + 7 * self.steps]
            )
            if rng.random() < 0.1:
                i = int.from_bytes(lease_mem.key[:2], "big") % self.n_keys  # maybe a self-link
                k = lease_mem.key
            else:
                k = key(i)
            links.append(
                Link(
                    k,
                    f"http://h/{i}",
                    weight=rng.uniform(0.2, 3.0) if weighted else 1.0,
                    boost=rng.choice([0.0, 0.0, 2.0]) if rng.random() < 0.3 else 0.0,
                    again=rng.random() < 0.1,
                    priority=rng.choice([0, 0, 1]),
                    slot=slot(i),
                    payload=None if rng.random() < 0.2 else b"r%d" % i,
                )
            )
        if links and rng.random() < 0.3:
            links.append(links[0])  # the same link twice
        virtual_weight = rng.uniform(0.5, 2.0) if rng.random() < 0.3 else 0.0
        # The Redis frontier sends no payload for a page it remembers as known (a transport
        # saving: the page then answers NEEDS_PAYLOAD if it is schedulable after all). Forget
        # them, so that both frontiers file the same links and their codes can be compared.
        self.red._known.clear()
        # A request for the page's later fetches (a follow-up's clean request), at times.
        later = b"later%d" % self.steps if rng.random() < 0.2 else None
        mem, red = self.both(
            "visit",
            lease_mem,
            links,
            virtual_weight,
            importance=True,
            payload=later,
            red_args=(lease_red, links, virtual_weight),
        )
        assert mem.codes == red.codes
        if red.importance is not None:  # (the Redis script tells it for unbounded windows)
            assert mem.importance == pytest.approx(red.importance, rel=1e-12, abs=1e-15)

    # -- comparing every number ---------------------------------------------------------------
    def compare(self) -> None:
        snap = self.red.snapshot()
        red = snap.engine(time_fn=lambda: self.clock[0])
        mem = self.mem.engine
        ids = [mem.id_of(k) for k in snap.keys]
        assert None not in ids and red.n == mem.n, self.steps
        where = f"after step {self.steps}"
        g = self.red.globals()
        for name, red_name in SCALARS.items():
            assert getattr(mem, name) == g[red_name], (name, where)
        assert self.mem.discovery_debt == g["debt"], where
        for name in ("_s", "hist", "_cb", "_lc", "last_g", "visits", "flags"):
            got = getattr(red, name)[: red.n]
            want = getattr(mem, name)[ids]
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {where}")
        if mem._moments:
            np.testing.assert_array_equal(red._b[: red.n], mem._b[ids], err_msg=f"b {where}")
            np.testing.assert_array_equal(red._d[: red.n], mem._d[ids], err_msg=f"d {where}")
        if mem._wall:
            np.testing.assert_array_equal(red.last_t[: red.n], mem.last_t[ids], err_msg=where)
        assert bytes(snap.status) == bytes(self.mem.status[i] for i in ids), where
        outcome = np.frombuffer(snap.outcome, np.uint16)
        assert outcome.tolist() == [self.mem.outcome[i] for i in ids], where
        mine, theirs = self.mem.figures(), self.red.figures()
        for name in ("pages", "visits", "G", "virtual_cash", *STATUSES):
            assert mine[name] == theirs[name], (name, where)
        # "fetched" is the pages whose last fetch was parsed (outcome ok) in the embedded
        # frontier; the script's figure still counts pages visited and not closed.
        assert mine["fetched"] == outcome.tolist().count(OK), where
        assert mine["cash_at_visit_x_n"] == pytest.approx(theirs["cash_at_visit_x_n"], rel=1e-12)
        np.testing.assert_allclose(
            red.importance(), mem.importance(ids), rtol=1e-12, atol=1e-300, err_msg=where
        )
        assert red.total_cash() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("continuous", [False, True], ids=["one-pass", "continuous"])
@pytest.mark.parametrize("window", WINDOWS)
def test_the_embedded_and_the_redis_frontier_agree_on_every_number(redis_url, window, continuous):
    rng = random.Random(f"{window}-{continuous}")
    pair = Pair(redis_url, window, continuous, rng)
    try:
        mem, red = pair.both("schedule", [pair.entry(0), pair.entry(1)])
        assert mem == red
        for _ in range(160):
            pair.step()
        figures = pair.red.figures()
        assert figures["visits"] > 20 and figures["pages"] > 20  # the sequence did crawl
        assert figures["closed"] > 0  # and closed pages (which links and payouts skip)
        assert pair.red.check() == []  # and Redis's queues, tiers and leases are consistent
        # The script has no rebase: the embedded engine's must not fire in a sequence this short.
        assert pair.mem.engine.rebases == 0
    finally:
        pair.close()


@pytest.mark.parametrize("continuous", [False, True], ids=["one-pass", "continuous"])
def test_they_agree_across_bucket_splits(redis_url, continuous):
    """Hundreds of pages: the Redis pages' buckets split many times over the sequence (a page
    moves to a new bucket with its request, outcome and alias entries), and every number still
    agrees, and every page is found where the structure says."""
    from scrapy_opic.backends.redis import BUCKET_LOAD, n_buckets

    rng = random.Random(f"splits-{continuous}")
    pair = Pair(redis_url, "unbounded", continuous, rng, n_keys=300)
    try:
        pair.both("schedule", [pair.entry(k) for k in range(0, 300, 3)])
        for k in range(500):
            pair.step()
            if k % 100 == 99:
                assert pair.red.check() == []
        pages = pair.red.figures()["pages"]
        assert n_buckets(pages) >= 8 and pages > 8 * BUCKET_LOAD  # three levels of splits
        assert pair.red.check() == []
    finally:
        pair.close()
