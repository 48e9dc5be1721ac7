"""Precision of the engine's numbers over a very long continuous crawl (10,000 passes).

    python -m benchmarks.precision [--nodes 200] [--passes 10000] [--rebase both|on|off]
        [--rebase-at 1024 ...] [--growth-pages 20000]
        [--out benchmarks/results/precision.md]

The engine stores every page's cash and teleport credit relative to running accumulators (see
:mod:`scrapy_opic.opic.engine`), which grow for as long as the crawl runs: a page's value is then a
small difference of large numbers. This script measures what that costs, against a reference.

The crawl: a power-law graph of ``--nodes`` pages, the paper's uniform start (``C = 1/n``),
``refresh = 1`` (a continuous crawl), Greedy (the page with the most cash, lowest id on a tie),
one visit at a time through :meth:`OpicEngine.visit` with :meth:`OpicEngine.payout` before each
(the per-event path the Scrapy scheduler uses). A *pass* is ``n`` visits.

The reference (:class:`Direct`) runs the same model with every per-page value stored *directly*
(cash, teleport credit held, link credit held, history, moments; the virtual page's payout is an
O(n) loop over the pages) in ``numpy.longdouble`` (x86: a 64-bit significand, 11 bits more than a
float). Stored directly, no value is a difference of two large ones, so the reference's own error
is that of a sum of a few million rounded terms at 2^-64: far below everything measured here. It
chooses the page to visit (Greedy on its own cash) and every engine under test visits that page:
the runs compare the same crawl, and a near tie that rounding would break differently cannot make
two runs diverge. The same direct model in plain floats (``Direct(np.float64)``) is measured too:
it is what float64 can do at best, with no accumulator at all.

Measured at 1, 10, 100, 1,000 and 10,000 passes, for each run against the reference, relative
errors per page (max and mean over pages; a page with zero cash in the reference, the one just
visited, compares exactly or counts as inf): true cash, teleport credit held, link credit held,
history (the credit the page absorbed), importance, the age ``G - last_g`` of each page's last visit
(what G-clock windows read), and the clock ``G``; total cash (sum of all cash + virtual page, which
should be 1) as an absolute error.

A second, shorter experiment (:func:`growing_crawl`) measures the other way the accumulators get
large against the values they are added to: a crawl that grows from one seed (the seed alone
receives the endowment, so the accumulator starts at 1 while the pages' cash falls to ``1/n``).
It reports the error of the total cash, which needs no reference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from scrapy_opic.opic import GreedySelection, OpicEngine
from scrapy_opic.opic.constants import BLEND_LEMMA, SLOPE_NOISE
from scrapy_opic.opic.graph import Graph, power_law_graph

ROOT = Path(__file__).resolve().parent
CHECKPOINTS = (1, 10, 100, 1_000, 10_000)
EPSILON = 0.15


class Direct:
    """The OPIC model with every per-page value stored directly (no accumulator), in ``dtype``.

    The same formulas as :class:`OpicEngine` with the default window (unbounded history, blend
    estimator), ``refresh = 1`` and the uniform start, on a fixed graph; the virtual page's payout
    adds to every page (O(n))."""

    def __init__(self, graph: Graph, dtype=np.longdouble, epsilon: float = EPSILON) -> None:
        n = self.n = graph.n
        self.t = dtype
        self.eps = dtype(epsilon)
        self.kids = [graph.children(i).astype(np.int64) for i in range(n)]
        z = np.zeros(n, dtype=dtype)
        self.C = z + dtype(1) / dtype(n)  # cash (the uniform start)
        self.T = z + dtype(1)  # teleport credit held: the endowment, every page's prior
        self.LC, self.H, self.b, self.d = z.copy(), z.copy(), z.copy(), z.copy()
        self.last_g = z.copy()
        self.V = self.G = dtype(0)
        self.credit_total = self.passed = self.dangling = dtype(0)
        self.b_total = self.d_total = dtype(0)

    def payout(self) -> None:
        v = self.V
        if v > 0:
            self.C += v / self.n
            self.T += v
            self.G += v
            self.V = self.t(0)

    def choose(self) -> int:
        return int(np.argmax(self.C))

    def visit(self, i: int) -> None:
        c = self.C[i]
        self.C[i] = 0
        self.last_g[i] = self.G
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
        d = kids.size
        share = (c - self.eps * c) / d
        y = (k - self.eps * k) / d
        t = self.G
        self.C[kids] += share
        self.LC[kids] += y
        self.b[kids] += y * t
        self.d[kids] += y * t * t
        self.credit_total += y * d
        self.b_total += y * d * t
        self.d_total += y * d * t * t
        self.V += self.eps * c

    def importance(self) -> np.ndarray:
        """The engine's default estimate (blend of lemma and regression), in this dtype."""
        G = self.G
        spread = G * self.b - self.d
        slope = np.where(spread > SLOPE_NOISE * G * self.b, 6 * spread / G**3, 0)
        total = G * self.b_total - self.d_total
        slopes = 6 * total / G**3 if total > SLOPE_NOISE * G * self.b_total else 0
        lemma = (self.H + self.LC) / self.credit_total
        est = BLEND_LEMMA * lemma + (1 - BLEND_LEMMA) * (slope / slopes if slopes > 0 else slope)
        a = self.eps + (1 - self.eps) * self.dangling / self.passed
        return a / self.n + (1 - a) * est / est.sum()

    def values(self) -> dict[str, np.ndarray]:
        return {
            "cash": self.C,
            "teleport": self.T,
            "link": self.LC,
            "history": self.H,
            "importance": self.importance(),
            "age": self.G - self.last_g,
            "G": np.array([self.G]),
            "total": np.array([self.C.sum() + self.V]),
        }


def engine_values(e: OpicEngine) -> dict[str, np.ndarray]:
    """The same quantities read from an engine (true values, accumulators applied)."""
    n = e.n
    return {
        "cash": e.cash(),
        "teleport": e.acc_credit - e._cb[:n],
        "link": e.link_credit(),
        "history": e.hist[:n],
        "importance": e.importance(),
        "age": e.G - e.last_g[:n],
        "G": np.array([e.G]),
        "total": np.array([e.total_cash()]),
    }


def errors(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, tuple]:
    """Per quantity: (max, mean) relative error over pages; total cash: absolute error."""
    out = {}
    for name, want in ref.items():
        have = got[name].astype(np.longdouble)
        if name == "total":
            out[name] = (float(abs(have[0] - 1)), float(abs(want[0] - 1)))
            continue
        diff = np.abs(have - want)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(want != 0, diff / np.abs(want), np.where(diff == 0, 0, np.inf))
        out[name] = (float(rel.max()), float(rel.mean()))
    return out


def make_engine(graph: Graph, rebase_at: float | None) -> OpicEngine:
    """An engine with the uniform start; ``rebase_at=None``: it never rebases."""
    e = OpicEngine(epsilon=EPSILON, capacity=graph.n, rebase_at=rebase_at)
    e.add_pages(graph.n)
    e.init_uniform()
    return e


def run(graph: Graph, passes: int, runs: dict[str, float | None], direct64: bool, log=print):
    """Crawl ``passes`` passes; the errors of every run at each checkpoint, and its accumulators."""
    n = graph.n
    ref = Direct(graph)
    engines = {name: make_engine(graph, at) for name, at in runs.items()}
    flat = Direct(graph, np.float64) if direct64 else None
    kids = [k.tolist() for k in ref.kids]
    result: dict = {name: {} for name in [*engines, *(["direct float64"] if flat else [])]}
    done = 0
    t0 = time.perf_counter()
    for p in sorted({c for c in CHECKPOINTS if c < passes} | {passes}):
        for _ in range((p - done) * n):
            ref.payout()
            i = ref.choose()
            ref.visit(i)
            for e in engines.values():
                e.payout()
                e.visit(i, kids[i])
            if flat is not None:
                flat.payout()
                flat.visit(i)
        done = p
        want = ref.values()
        for name, e in engines.items():
            result[name][p] = {
                "errors": errors(engine_values(e), want),
                "acc_credit": e.acc_credit,
                "acc_all_x_n": e.acc_all * n,
                "rebases": e.rebases,
            }
        if flat is not None:
            result["direct float64"][p] = {"errors": errors(flat.values(), want)}
        log(f"  {p:>6,} passes done ({time.perf_counter() - t0:,.0f} s)")
    return result


def growing_crawl(pages: int, rebase_at: float | None, refresh: float, seed: int = 0) -> dict:
    """A crawl that starts from one seed and discovers ``pages`` pages (3 new ones per visit,
    plus 2 links to pages known already), 2 * ``pages`` visits with Greedy through the per-event
    path. The seed alone receives the endowment at the first payout, so ``acc_all`` (or
    ``acc_unfetched``) starts at 1 while the pages' cash falls to about ``1 / pages``. Returns
    the error of the total cash, which is exactly 1 (no reference needed), and the rebases."""
    rng = np.random.default_rng(seed)
    e = OpicEngine(epsilon=EPSILON, refresh=refresh, rebase_at=rebase_at, capacity=pages + 3)
    sel = GreedySelection(e)
    sel.push(e.add_page())
    for _ in range(2 * pages):
        i = sel.pop()
        new = [e.add_page() for _ in range(3)] if e.n < pages else []
        kids = sorted(set(new + rng.integers(0, e.n, 2).tolist()) - {i})
        e.visit(i, kids)
        for j in kids:
            sel.push(j)  # (no-op for a page that is a candidate already)
        sel.push(i)  # a continuous crawl: visited pages wait again
    e.payout()
    return {"pages": e.n, "rebases": e.rebases, "total": abs(e.total_cash() - 1.0)}


def growth_report(pages: int, runs: dict[str, float | None]) -> list[str]:
    lines = [
        f"## A crawl that grows from one seed to {pages:,} pages",
        "",
        f"{2 * pages:,} visits (Greedy, per-event path); 3 new pages per visit until {pages:,} "
        "are known, and 2 links to known pages. The first payout gives the whole endowment to "
        "the seed: the accumulator starts at 1 while the pages' cash falls to about "
        f"1/{pages:,}. Error of the total cash (exactly 1):",
        "",
        "| run | refresh 1 (continuous) | rebases | refresh 0 (discovery) | rebases |",
        "|---|---|---|---|---|",
    ]
    for name, at in runs.items():
        cells = [name]
        for refresh in (1.0, 0.0):
            r = growing_crawl(pages, at, refresh)
            cells += [f"{r['total']:.1e}", str(r["rebases"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


QUANTITIES = (
    ("cash", "cash per page"),
    ("teleport", "teleport credit held"),
    ("link", "link credit held"),
    ("history", "history"),
    ("importance", "importance"),
    ("age", "G - last_g"),
)


def summary(result: dict, passes: int) -> list[str]:
    """One row per run at the last checkpoint: the figures that matter."""
    head = [
        "run",
        "total cash",
        "cash per page (max / mean)",
        "teleport credit held (max / mean)",
        "importance (max / mean)",
        "rebases",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in result.items():
        row = rows[passes]
        err = row["errors"]
        cells = [name, f"{err['total'][0]:.1e}"]
        cells += [f"{err[q][0]:.1e} / {err[q][1]:.1e}" for q in ("cash", "teleport", "importance")]
        cells.append(str(row.get("rebases", "-")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def report(result: dict, graph: Graph, passes: int, seconds: float, command: str) -> list[str]:
    lines = [
        "# Precision over a long continuous crawl",
        "",
        f"`{command}`: a power-law graph of {graph.n} pages and {graph.n_edges} links, "
        f"epsilon {EPSILON}, refresh 1, Greedy, one visit at a time through `OpicEngine.visit` "
        f"({passes:,} passes = {passes * graph.n:,} visits, {seconds:,.0f} s for all runs). "
        "Errors against the same crawl with every per-page value stored directly in "
        "`numpy.longdouble` (see the script's docstring). Per quantity: max / mean over pages "
        "of the relative error; total cash: |sum of all cash + virtual page - 1|. "
        "`direct float64` stores the values directly in floats: what float64 does at best.",
        "",
        f"## After {passes:,} passes",
        "",
        *summary(result, passes),
        "",
    ]
    for name, rows in result.items():
        lines += [f"## {name}", ""]
        head = ["passes", *(label for _, label in QUANTITIES), "G", "total cash"]
        extra = "acc_credit" in next(iter(rows.values()))
        if extra:
            head += ["acc_credit", "acc_all x n", "rebases"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for p, row in rows.items():
            err = row["errors"]
            cells = [f"{p:,}"]
            cells += [f"{err[q][0]:.1e} / {err[q][1]:.1e}" for q, _ in QUANTITIES]
            cells += [f"{err['G'][0]:.1e}", f"{err['total'][0]:.1e}"]
            if extra:
                cells += [f"{row['acc_credit']:.4g}", f"{row['acc_all_x_n']:.4g}"]
                cells += [str(row["rebases"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    ref_total = next(iter(result.values()))[passes]["errors"]["total"][1]
    lines.append(
        f"(The reference's own total cash error after {passes:,} passes: {ref_total:.1e}.)"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--passes", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rebase", choices=("both", "on", "off"), default="both")
    ap.add_argument(
        "--rebase-at",
        type=float,
        nargs="+",
        default=[OpicEngine.REBASE_AT],
        help="thresholds of the rebasing runs (default: the engine's)",
    )
    ap.add_argument("--no-direct64", action="store_true", help="skip the direct float64 run")
    ap.add_argument(
        "--growth-pages", type=int, default=20_000, help="pages of the growing crawl (0: skip)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "precision.md")
    args = ap.parse_args(argv)
    graph = power_law_graph(args.nodes, seed=args.seed)
    runs: dict[str, float | None] = {}
    if args.rebase != "on":
        runs["engine, no rebase"] = None
    if args.rebase != "off":
        for at in args.rebase_at:
            default = " (the default)" if at == OpicEngine.REBASE_AT else ""
            runs[f"engine, rebase_at {at:g}{default}"] = at
    t0 = time.perf_counter()
    result = run(graph, args.passes, runs, not args.no_direct64)
    command = " ".join(
        ["python -m benchmarks.precision", *(argv if argv is not None else sys.argv[1:])]
    )
    lines = report(result, graph, args.passes, time.perf_counter() - t0, command)
    if args.growth_pages:
        lines += ["", *growth_report(args.growth_pages, runs)]
    text = "\n".join(lines) + "\n"
    if str(args.out) == "-":
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
