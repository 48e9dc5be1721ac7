"""The float error of the engine's cash and credit over a long continuous crawl, without and with
a rebase of its accumulators.

    python -m benchmarks.precision [--nodes 200] [--passes 10000] [--rebase-at 1024 ...]
        [--growth-pages 20000] [--out DIR]

The engine stores each page's cash and teleport credit relative to accumulators that grow as
long as the crawl runs (:mod:`scrapy_opic.opic.engine`): a page's value is a small difference of
large numbers. The crawl: a power-law graph, the uniform start, refresh 1, Greedy one visit at a
time through :meth:`OpicEngine.payout` and :meth:`OpicEngine.visit` (the scheduler's path); a
pass is n visits. The reference, :class:`Direct`, stores every per-page value directly in
``numpy.longdouble`` (x86: 11 bits more than a float; no value a difference of large ones) and
chooses the page every run visits: rounding cannot make runs diverge. ``Direct(np.float64)`` is
what float64 does at best. Errors: relative per page (max and mean over pages; the page just
visited has no cash, and compares exactly or counts as inf) of the cash, the teleport credit
held, the importance and the age ``G - last_g`` of the last visit (what G-clock windows read);
absolute of the total cash (all pages' and the virtual page's, exactly 1).

:func:`growing_crawl`: the other way the accumulators outgrow the values, a crawl from one seed,
which alone gets the endowment (the accumulator is 1 while the pages' cash falls to 1/n).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, cell, page, table, write_results
from scrapy_opic.opic import GreedySelection, OpicEngine
from scrapy_opic.opic.constants import BLEND_LEMMA, SLOPE_NOISE
from scrapy_opic.opic.graph import Graph, power_law_graph

CHECKPOINTS = (1, 10, 100, 1_000, 10_000)
EPSILON = 0.15
QUANTITIES = {"cash": "cash", "teleport": "teleport credit", "importance": "importance"}
QUANTITIES["age"] = "G - last_g"
KEYS = (*QUANTITIES, "total")  # the values compared: per page, then the total cash


class Direct:
    """The engine's model with every per-page value stored directly in ``dtype``: the default
    window (unbounded history, blend estimator), refresh 1 and the uniform start, on a fixed
    graph; the virtual page's payout adds to every page (O(n))."""

    def __init__(self, graph: Graph, dtype=np.longdouble) -> None:
        n, z, self.t, self.eps = graph.n, np.zeros(graph.n, dtype=dtype), dtype, dtype(EPSILON)
        self.n, self.kids = n, [graph.children(i).astype(np.int64) for i in range(n)]
        self.C = z + dtype(1) / dtype(n)  # cash: the uniform start
        self.T = z + dtype(1)  # teleport credit held: the endowment, every page's prior
        self.LC, self.H, self.b, self.d, self.last_g = (z.copy() for _ in range(5))
        self.V = self.G = self.credit = self.passed = self.dangling = dtype(0)
        self.b_total = self.d_total = dtype(0)

    def payout(self) -> None:
        if self.V > 0:
            self.C += self.V / self.n
            self.T += self.V
            self.G += self.V
            self.V = self.t(0)

    def visit(self, i: int) -> None:
        c, self.C[i], self.last_g[i] = self.C[i], 0, self.G
        self.G += c
        received = self.LC[i]
        k = self.T[i] + received
        self.T[i] = self.LC[i] = 0
        self.H[i] += received
        self.passed += k
        kids = self.kids[i]
        if not kids.size:
            self.V += c
            self.dangling += k
            return
        d, t = kids.size, self.G
        y = (k - self.eps * k) / d
        self.C[kids] += (c - self.eps * c) / d
        self.LC[kids] += y
        self.b[kids] += y * t
        self.d[kids] += y * t * t
        self.credit += y * d
        self.b_total += y * d * t
        self.d_total += y * d * t * t
        self.V += self.eps * c

    def values(self) -> dict[str, np.ndarray]:
        """The measured quantities; importance is the engine's default estimate (blend)."""
        G = self.G
        spread = G * self.b - self.d
        slope = np.where(spread > SLOPE_NOISE * G * self.b, 6 * spread / G**3, 0)
        total = G * self.b_total - self.d_total
        slopes = 6 * total / G**3 if total > SLOPE_NOISE * G * self.b_total else 0
        lemma = (self.H + self.LC) / self.credit
        est = BLEND_LEMMA * lemma + (1 - BLEND_LEMMA) * (slope / slopes if slopes > 0 else slope)
        a = self.eps + (1 - self.eps) * self.dangling / self.passed
        importance = a / self.n + (1 - a) * est / est.sum()
        values = (self.C, self.T, importance, G - self.last_g, self.C.sum() + self.V)
        return dict(zip(KEYS, values))


def engine_values(e: OpicEngine) -> dict:
    """The same quantities read from an engine (true values, its accumulators applied)."""
    teleport, age = e.acc_credit - e._cb[: e.n], e.G - e.last_g[: e.n]
    return dict(zip(KEYS, (e.cash(), teleport, e.importance(), age, e.total_cash())))


def errors(got: dict, ref: dict) -> dict[str, tuple[float, float]]:
    """Per quantity, the (max, mean) relative error over pages; for the total cash, the
    absolute error of ``got`` and of ``ref``."""
    out = {"total": (float(abs(got["total"] - 1)), float(abs(ref["total"] - 1)))}
    for q in QUANTITIES:
        diff = np.abs(got[q].astype(np.longdouble) - ref[q])
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(ref[q] != 0, diff / np.abs(ref[q]), np.where(diff == 0, 0, np.inf))
        out[q] = (float(rel.max()), float(rel.mean()))
    return out


def run(graph: Graph, passes: int, runs: dict[str, float | None]) -> dict[str, dict[int, dict]]:
    """Each run (an engine rebasing at ``rebase_at``; ``None``: never) and ``direct float64``
    after ``passes`` passes and at each checkpoint before: its errors, accumulator, rebases."""
    n, ref, flat = graph.n, Direct(graph), Direct(graph, np.float64)
    engines = {
        name: OpicEngine(epsilon=EPSILON, capacity=n, rebase_at=at) for name, at in runs.items()
    }
    for e in engines.values():
        e.add_pages(n)
        e.init_uniform()
    kids, out, done = [k.tolist() for k in ref.kids], {k: {} for k in [*runs, "direct float64"]}, 0
    for p in sorted({c for c in CHECKPOINTS if c < passes} | {passes}):
        for _ in range((p - done) * n):
            ref.payout()
            flat.payout()
            i = int(np.argmax(ref.C))  # Greedy: the most cash, the lowest id on a tie
            ref.visit(i)
            flat.visit(i)
            for e in engines.values():
                e.payout()
                e.visit(i, kids[i])
        done, want = p, ref.values()
        for name, e in engines.items():
            out[name][p] = {
                "errors": errors(engine_values(e), want),
                "acc_credit": e.acc_credit,
                "rebases": e.rebases,
            }
        out["direct float64"][p] = {"errors": errors(flat.values(), want)}
    return out


def growing_crawl(pages: int, rebase_at: float | None, refresh: float, seed: int = 0) -> dict:
    """A crawl from one seed that discovers ``pages`` pages (3 new ones per visit, plus 2 links
    to pages known already) in 2 * ``pages`` visits with Greedy through the per-event path: the
    error of its total cash (exactly 1), and its rebases."""
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--passes", type=int, default=10_000)
    ap.add_argument("--rebase-at", type=float, nargs="+", default=[OpicEngine.REBASE_AT])
    ap.add_argument("--growth-pages", type=int, default=20_000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    runs: dict[str, float | None] = {"engine, no rebase": None}
    for at in args.rebase_at:
        runs[f"engine, rebase_at {at:g}" + " (the default)" * (at == OpicEngine.REBASE_AT)] = at
    graph = power_law_graph(args.nodes, seed=1)
    long = run(graph, args.passes, runs)
    growth = {
        name: [growing_crawl(args.growth_pages, at, r) for r in (1.0, 0.0)]
        for name, at in runs.items()
    }
    rows = []
    for name, by_pass in long.items():
        for p, row in by_pass.items():
            err = row["errors"]
            pairs = [f"{cell(err[q][0])} / {cell(err[q][1])}" for q in QUANTITIES]
            rows.append(
                [name, p, err["total"][0], *pairs, row.get("acc_credit"), row.get("rebases")]
            )
    for p, row in long["direct float64"].items():
        rows.append(["reference (long double)", p, row["errors"]["total"][1]] + [None] * 6)
    head = ["run", "passes", "total cash", *(f"{q} (max / mean)" for q in QUANTITIES.values())]
    growth_rows = [
        [k, a["total"], a["rebases"], b["total"], b["rebases"]] for k, (a, b) in growth.items()
    ]
    markdown = page(
        "Precision over a long continuous crawl",
        "Each run's error against the same crawl with every value stored directly in long "
        "doubles: of the total cash (exactly 1), and max / mean over pages of the relative error "
        "of each value. The docstring of `benchmarks/precision.py` says how.",
        f"## {graph.n} pages, {graph.n_edges} links (power law), Greedy one visit at a time",
        table([*head, "acc_credit", "rebases"], rows),
        f"## A crawl that grows from one seed to {args.growth_pages:,} pages",
        table(
            ["run", *(f"refresh {r}: {h}" for r in (1, 0) for h in ("total cash", "rebases"))],
            growth_rows,
        ),
    )
    write_results("precision", {"runs": long, "growth": growth}, markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
