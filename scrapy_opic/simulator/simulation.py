"""Offline OPIC simulator: crawl a known link graph with the engine and compare to exact PageRank.

Usage::

    python -m scrapy_opic.simulator --graph EDGES --strategy greedy --passes 3 --epsilon 0.15 \\
        [--window SPEC] [--seed S] [--batch B] --out importance.csv

``EDGES`` is a SNAP-style edge list (``src dst`` per line, ``#`` comments, gzip ok; ``-`` reads it
from standard input). ``--passes P``
means ``P * N`` visits for ``N`` nodes. The CSV has the header ``node,importance`` and importance
sums to 1. The run prints the error factor ``1/G``, the timing and, unless ``--no-pagerank``, the
paper's error measures against exact PageRank with damping ``1 - epsilon``.

The simulator drives :class:`~scrapy_opic.opic.engine.OpicEngine`, the engine the Scrapy scheduler
uses. With ``--batch 1`` every visit is one event through the per-event path and the selection
strategies of :mod:`scrapy_opic.opic.selection` (exactly the paper's algorithms); with larger
batches the ``B`` pages the strategy ranks first are visited together through the vectorised path
(a crawler fetches many pages at once), which is what makes millions of visits per second possible.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from ..opic.batch import visit_batch
from ..opic.engine import OpicEngine
from ..opic.graph import Graph, load_edge_list, power_law_graph
from ..opic.pagerank import pagerank, relative_error, top_mask
from ..opic.refresh import link_change
from ..opic.selection import make_selection
from ..opic.window import WindowPolicy, parse_window

__all__ = [
    "Simulation",
    "compare_to_pagerank",
    "load_graph",
]

STRATEGIES = ("greedy", "random", "cycle")


def default_batch(n: int) -> int:
    """Pages visited together by default: 1% of the graph (1 for graphs under 100 nodes).

    ``benchmarks/paper_figures.py`` measures the error for several batch sizes: 1% keeps Greedy's
    error at or below the per-event path's while reaching millions of visits per second."""
    return max(1, n // 100)


def top_k(key: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the ``k`` largest values of ``key`` (any order among ties).

    Rather than a full ``argpartition`` of every value, a threshold is guessed from a random
    sample so that about 1.5 k values pass it, and only those are partitioned. When the
    guess lets fewer than ``k`` through, the full partition runs, so the result is always exact:
    every value >= the threshold is a candidate, and with at least ``k`` candidates the k-th
    largest value is >= the threshold.
    """
    n = key.size
    if k >= n:
        return np.arange(n)
    if n > 65_536 and k * 8 < n:
        sample = key[rng.integers(0, n, 8192)]
        q = int(8192 * (1.0 - 1.5 * k / n))
        tau = np.partition(sample, q)[q]
        cand = np.flatnonzero(key >= tau)
        if cand.size >= k:
            return cand[np.argpartition(key[cand], cand.size - k)[cand.size - k :]]
    return np.argpartition(key, n - k)[n - k :]


class Simulation:
    """A crawl of ``graph`` in which every page is always a candidate (continuous crawl).

    :param strategy: ``greedy`` (most cash first), ``random`` or ``cycle`` (node ids in order).
    :param batch: pages visited per step; 1 = the per-event path.
    """

    def __init__(
        self,
        graph: Graph,
        strategy: str = "greedy",
        epsilon: float = 0.15,
        window: WindowPolicy | str | None = None,
        seed: int = 0,
        batch: int | None = None,
        refresh: float = 1.0,
        self_links: bool = False,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        self.graph = graph
        self.strategy = strategy
        n = graph.n
        self.engine = OpicEngine(
            epsilon=epsilon,
            refresh=refresh,
            window=parse_window(window),
            self_links=self_links,
            capacity=n,
        )
        self.engine.add_pages(n)
        self.engine.init_uniform()
        # A batch holds distinct pages, so it can't exceed the graph.
        self.batch = min(n, default_batch(n) if batch is None else max(1, int(batch)))
        self.rng = np.random.default_rng(seed)
        self.visits = 0
        self._cursor = 0  # Cycle's position in the fixed order (node ids) on the batch path
        self._before: Graph | None = None  # the graph before the last set_graph
        self._stale: np.ndarray | None = None  # pages not visited since then
        self.selection = None
        if self.batch == 1:
            self.selection = make_selection(strategy, self.engine, seed)
            for i in range(n):
                self.selection.push(i)

    def set_graph(self, graph: Graph) -> None:
        """Swap in a changed graph on the same nodes (dynamic-graph experiments). As a crawl
        does, each page's next visit tells the engine the share of its links that changed
        (:meth:`OpicEngine.links_changed`), against the graph before this swap, if the
        engine's window policy watches change."""
        if graph.n != self.graph.n:
            raise ValueError("the node set must not change")
        self._before, self.graph = self.graph, graph
        if self.engine.window.watches_change:
            self._stale = np.ones(graph.n, dtype=bool)

    def _tell_changes(self, ids: Sequence[int]) -> None:
        """The visits of ``ids`` just made, for the pages not visited since the last swap."""
        old, new, stale = self._before, self.graph, self._stale
        assert old is not None and stale is not None
        for i in ids:
            if stale[i]:
                stale[i] = False
                was, now = old.children(i).tolist(), new.children(i).tolist()
                self.engine.links_changed(link_change(i, was, now)[2])

    def run(self, visits: int) -> None:
        """Perform ``visits`` more visits."""
        done = 0
        while done < visits:
            k = min(self.batch, visits - done)
            if self.selection is not None:
                self._step_events(k)
            else:
                self._step_batch(k)
            done += k
        self.visits += visits

    def _step_events(self, k: int) -> None:
        sel, e, g = self.selection, self.engine, self.graph
        assert sel is not None  # (the event-by-event path is the one with a selection)
        indptr, indices = g.indptr, g.indices
        for _ in range(k):
            i = sel.pop()
            assert i is not None  # (every page is a candidate again after its visit)
            e.visit(i, indices[indptr[i] : indptr[i + 1]].tolist())
            if self._stale is not None:
                self._tell_changes((i,))
            sel.push(i)

    def _select(self, k: int) -> np.ndarray:
        e, n = self.engine, self.graph.n
        e.payout()
        if self.strategy == "greedy":
            # With no discovery payout pending, every page has the same offset, so ranking the
            # stored cash is ranking the true cash (and skips building the cash vector).
            key = e.stored[:n] if e.acc_unfetched == 0.0 else e.cash()
            return top_k(key, k, self.rng)
        if self.strategy == "random":
            return self.rng.choice(n, size=k, replace=False)
        idx = (self._cursor + np.arange(k)) % n
        self._cursor = int((self._cursor + k) % n)
        return idx

    def _step_batch(self, k: int) -> None:
        ids = self._select(k)
        offsets, children = self.graph.gather(ids)
        visit_batch(self.engine, ids, offsets, children)
        if self._stale is not None:
            self._tell_changes(ids.tolist())

    def importance(self) -> np.ndarray:
        return self.engine.importance()


def compare_to_pagerank(x: np.ndarray, pr: np.ndarray, graph: Graph) -> dict[str, float]:
    """The paper's errors (all pages, top 10%) and Kendall tau / weighted tau against ``pr``.

    Tau is computed over pages with in-degree > 0: pages nobody links to all tie in PageRank.
    """
    from scipy.stats import kendalltau, weightedtau

    linked = graph.in_degree > 0
    out = {
        "error_all": relative_error(x, pr),
        "error_top10": relative_error(x, pr, top_mask(pr, 0.10)),
        "tau": math.nan,
        "weighted_tau": math.nan,
    }
    # A rank correlation needs two ranked pages that PageRank tells apart: a tiny or symmetric
    # graph (a cycle: every page ties) has none, and its tau is no number (reported as such).
    if linked.sum() >= 2 and np.ptp(pr[linked]) > 0 and np.ptp(x[linked]) > 0:
        out["tau"] = float(kendalltau(x[linked], pr[linked]).statistic)
        out["weighted_tau"] = float(weightedtau(x[linked], pr[linked]).statistic)
    return out


def _taus(m: dict[str, float]) -> str:
    if math.isnan(m["tau"]):
        return "Kendall tau n/a (fewer than two pages with in-links that PageRank ranks apart)"
    return f"Kendall tau {m['tau']:.4f}, weighted tau {m['weighted_tau']:.4f}"


def write_csv(path: str, graph: Graph, importance: np.ndarray) -> None:
    """``node,importance`` rows, one per node (``-`` writes to stdout)."""
    names = graph.names if graph.names is not None else np.arange(graph.n).astype(str)
    lines = (f"{a},{b!r}\n" for a, b in zip(names.tolist(), importance.tolist()))
    if path == "-":
        sys.stdout.write("node,importance\n")
        sys.stdout.writelines(lines)
        return
    with open(path, "w", newline="") as out:
        out.write("node,importance\n")
        out.writelines(lines)


def _check_out(path: str) -> None:
    """:class:`OSError` now if ``--out`` cannot be written, rather than after the run."""
    if path == "-":
        return
    target = os.path.abspath(path)
    if os.path.isdir(target):
        raise IsADirectoryError(f"--out {path}: a directory, expected a file name")
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"--out {path}: no directory {parent}")
    writable = os.access(target, os.W_OK) if os.path.exists(target) else os.access(parent, os.W_OK)
    if not writable:
        raise PermissionError(f"--out {path}: not writable")


def load_graph(spec: str, self_links: bool = False) -> Graph:
    """An edge-list file, or ``powerlaw:N[:SEED]`` for the synthetic graph of the paper's
    experiments (in-degrees ~ k^-2.1), generated on the fly."""
    if spec.startswith("powerlaw:"):
        parts = spec.split(":")
        try:
            n = int(parts[1])
            seed = int(parts[2]) if len(parts) > 2 else 0
        except (IndexError, ValueError):
            raise ValueError(f"bad graph spec {spec!r}: use powerlaw:N[:SEED]") from None
        return power_law_graph(n, seed=seed)
    if spec == "-":  # the edge list on standard input (a pipe)
        return load_edge_list(sys.stdin.buffer, self_links=self_links)
    return load_edge_list(spec, self_links=self_links)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scrapy_opic.simulator",
        description="Run OPIC over a link graph and compare it with exact PageRank.",
    )
    p.add_argument(
        "--graph",
        required=True,
        help="edge list ('src dst' per line, # comments, .gz ok; - for standard input) or "
        "powerlaw:N[:SEED]",
    )
    p.add_argument("--strategy", choices=STRATEGIES, default="greedy")
    p.add_argument("--passes", type=float, default=3.0, help="visits = passes x nodes")
    p.add_argument("--epsilon", type=float, default=0.15, help="share paid to the virtual page")
    p.add_argument(
        "--window",
        default="unbounded",
        help="unbounded | unbounded:paper | interpolation:T | variable:K | fixed:T | improved:T:M",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="CSV to write ('-' for stdout)")
    p.add_argument(
        "--batch", type=int, default=None, help="pages visited together (default: N/100)"
    )
    p.add_argument("--refresh", type=float, default=1.0, help="virtual payout share to all pages")
    p.add_argument(
        "--keep-self-links", action="store_true", help="keep self-links (dropped by default)"
    )
    p.add_argument("--no-pagerank", action="store_true", help="skip the PageRank comparison")
    return p


def _check_args(args: argparse.Namespace) -> None:
    """:class:`ValueError` naming the first option with a value the simulation cannot use."""
    checks = (
        ("--passes", args.passes, math.isfinite(args.passes) and args.passes > 0, "a number > 0"),
        ("--epsilon", args.epsilon, 0 < args.epsilon <= 1, "a number in (0, 1]"),
        ("--refresh", args.refresh, 0 <= args.refresh <= 1, "a number in [0, 1]"),
        ("--batch", args.batch, args.batch is None or args.batch >= 1, "a whole number >= 1"),
        ("--seed", args.seed, args.seed >= 0, "a whole number >= 0"),
    )
    for name, value, ok, allowed in checks:
        if not ok:
            raise ValueError(f"{name} {value}: expected {allowed}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_args(args)
        _check_out(args.out)
        window = parse_window(args.window)
        t0 = time.perf_counter()
        graph = load_graph(args.graph, self_links=args.keep_self_links)
        if graph.n_edges == 0:
            raise ValueError(
                f"{args.graph}: no links between two different pages (self-links are dropped "
                "unless --keep-self-links): nothing to compute"
            )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t_load = time.perf_counter() - t0
    sim = Simulation(
        graph,
        strategy=args.strategy,
        epsilon=args.epsilon,
        window=window,
        seed=args.seed,
        batch=args.batch,
        refresh=args.refresh,
        self_links=args.keep_self_links,
    )
    visits = int(round(args.passes * graph.n))
    t0 = time.perf_counter()
    sim.run(visits)
    t_run = time.perf_counter() - t0
    x = sim.importance()
    try:
        write_csv(args.out, graph, x)
    except OSError as exc:  # (the disk filled up, the directory went away...)
        print(f"error: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    e = sim.engine
    stats = e.stats()
    report = sys.stderr if args.out == "-" else sys.stdout
    print(
        f"graph: {graph.n:,} nodes, {graph.n_edges:,} links (ready in {t_load:.2f} s)\n"
        f"run: {args.strategy}, {window.spec()}, epsilon={args.epsilon}, batch={sim.batch}, "
        f"{visits:,} visits in {t_run:.2f} s ({visits / max(t_run, 1e-9):,.0f} visits/s)\n"
        f"G={e.G:.4f}  error factor 1/G={stats['error_factor']:.6f}  "
        f"mean cash at visit x n={stats['cash_at_visit_x_n']:.3f}  "
        f"total cash={e.total_cash():.12f}",
        file=report,
    )
    if not args.no_pagerank:
        pr = pagerank(graph, alpha=1.0 - args.epsilon)
        m = compare_to_pagerank(x, pr, graph)
        print(
            f"vs PageRank(alpha={1 - args.epsilon:g}): error all pages {m['error_all']:.3f}%, "
            f"top 10% {m['error_top10']:.3f}%, {_taus(m)}",
            file=report,
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
