"""A reference for the float error of the engine's cash, teleport credit and importance over a
long continuous crawl, without and with a rebase of its accumulators (``tests/test_engine.py``).

The engine stores a page's cash and teleport credit relative to accumulators that grow as long
as the crawl runs. The crawl: a power-law graph, refresh 1, Greedy one visit at a time through
``payout`` and ``visit`` (a pass: n visits), against :class:`Direct`, the same crawl with every
value stored directly in ``numpy.longdouble`` (``Direct(np.float64)``: what float64 does at
best). :func:`growing_crawl`: a crawl from one seed, which alone gets the endowment (the
accumulator is 1 while the pages' cash falls to 1/n).
"""

from __future__ import annotations

import numpy as np

from scrapy_opic.opic import GreedySelection, OpicEngine
from scrapy_opic.opic.constants import BLEND_LEMMA, SLOPE_NOISE
from scrapy_opic.opic.graph import Graph

CHECKPOINTS = (1, 10, 100, 1_000, 10_000)
EPSILON = 0.15
QUANTITIES = {"cash": "cash", "teleport": "teleport credit", "importance": "importance"}
QUANTITIES["age"] = "G - last_g"
KEYS = (*QUANTITIES, "total")  # the values compared: per page, then the total cash


class Direct:
    """The engine's default model, every per-page value stored directly in ``dtype``."""

    def __init__(self, n: int, dtype=np.longdouble) -> None:
        z, self.t, self.eps = np.zeros(n, dtype=dtype), dtype, dtype(EPSILON)
        self.C = z + dtype(1) / dtype(n)  # cash: the uniform start
        self.T = z + dtype(1)  # teleport credit held: the endowment, every page's prior
        self.LC, self.H, self.b, self.d, self.last_g = (z.copy() for _ in range(5))
        self.V = self.G = self.passed = self.dangling = dtype(0)

    def payout(self) -> None:
        self.C += self.V / self.C.size
        self.T += self.V
        self.G += self.V
        self.V = self.t(0)

    def visit(self, i: int, kids: list[int]) -> None:
        c, k = self.C[i], self.T[i] + self.LC[i]
        self.H[i] += self.LC[i]
        self.C[i] = self.T[i] = self.LC[i] = 0
        self.last_g[i], self.G = self.G, self.G + c
        self.passed += k
        if not kids:
            self.V += c
            self.dangling += k
            return
        y, t = (k - self.eps * k) / len(kids), self.G
        self.C[kids] += (c - self.eps * c) / len(kids)
        self.LC[kids] += y
        self.b[kids] += y * t
        self.d[kids] += y * t * t
        self.V += self.eps * c

    def values(self) -> dict:
        """The measured quantities; importance is the engine's default estimate (blend)."""
        G, b, received = self.G, self.b, self.H + self.LC
        spread, total = G * b - self.d, G * b.sum() - self.d.sum()
        slope = np.where(spread > SLOPE_NOISE * G * b, 6 * spread / G**3, 0)
        slopes = 6 * total / G**3 if total > SLOPE_NOISE * G * b.sum() else 0
        est = BLEND_LEMMA * received / received.sum()
        est += (1 - BLEND_LEMMA) * (slope / slopes if slopes > 0 else slope)
        a = self.eps + (1 - self.eps) * self.dangling / self.passed
        importance = a / b.size + (1 - a) * est / est.sum()
        return dict(zip(KEYS, (self.C, self.T, importance, G - self.last_g, self.C.sum() + self.V)))


def errors(got: dict, ref: dict) -> dict:
    """Per quantity, the (max, mean) relative error over pages; the total cash's absolute."""
    out = {"total": float(abs(got["total"] - 1))}
    for q in QUANTITIES:
        diff, r = np.abs(got[q].astype(np.longdouble) - ref[q]), np.abs(ref[q])
        rel = np.divide(diff, r, out=np.where(diff > 0, np.inf, 0).astype(r.dtype), where=r > 0)
        out[q] = (float(rel.max()), float(rel.mean()))
    return out


def run(graph: Graph, passes: int, runs: dict[str, float | None]) -> dict[str, dict[int, dict]]:
    """Each run (an engine rebasing at ``rebase_at``; ``None``: never) and ``direct float64``
    after ``passes`` passes and at each checkpoint before: its errors, accumulator, rebases."""
    n, ref, flat = graph.n, Direct(graph.n), Direct(graph.n, np.float64)
    kids = [graph.children(i).tolist() for i in range(n)]
    engines = {k: OpicEngine(epsilon=EPSILON, capacity=n, rebase_at=at) for k, at in runs.items()}
    for e in engines.values():
        e.add_pages(n)
        e.init_uniform()
    models, done, out = [ref, flat, *engines.values()], 0, {k: {} for k in runs}
    for p in sorted({c for c in CHECKPOINTS if c < passes} | {passes}):
        for _ in range((p - done) * n):
            for m in models:
                m.payout()
            i = int(np.argmax(ref.C))  # Greedy: the most cash, the lowest id on a tie
            for m in models:
                m.visit(i, kids[i])
        done, want = p, ref.values()
        for name, e in engines.items():
            got = (e.cash(), e.acc_credit - e.baseline[:n], e.importance(), e.G - e.last_g[:n])
            got = dict(zip(KEYS, (*got, e.total_cash())))
            out[name][p] = errors(got, want) | {"acc_credit": e.acc_credit, "rebases": e.rebases}
        out.setdefault("direct float64", {})[p] = errors(flat.values(), want)
    return out


def growing_crawl(pages: int, rebase_at: float | None, refresh: float, seed: int = 0) -> dict:
    """A crawl from one seed to ``pages`` pages (3 new ones per visit, 2 links to known ones) in
    2 * ``pages`` visits, Greedy per event: the error of its total cash, and its rebases."""
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=EPSILON, refresh=refresh, rebase_at=rebase_at, capacity=pages + 3)
    sel = GreedySelection(e)
    sel.push(e.add_page())
    for _ in range(2 * pages):
        i = sel.pop()
        new = [e.add_page() for _ in range(3)] if e.n < pages else []
        kids = sorted(set(new + rng.integers(0, e.n, 2).tolist()) - {i})
        e.visit(i, kids)
        for j in [*kids, i]:  # a continuous crawl: a visited page waits again
            sel.push(j)  # (no-op for a page that is a candidate already)
    e.payout()
    return {"pages": e.n, "rebases": e.rebases, "total": abs(e.total_cash() - 1.0)}
