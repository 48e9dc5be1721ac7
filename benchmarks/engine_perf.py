"""Speed and memory of the engine at one million pages.

    python -m benchmarks.engine_perf [--nodes 1000000] [--out benchmarks/results/engine_perf.md]

Figures are printed beside a baseline measured in the same run (machines are shared and noisy):

* simulator (batch path): visits per second on a power-law graph, and the same work expressed
  against one off-line power-iteration sweep of the graph (a sweep "visits" N pages);
* per-event path (what the Scrapy scheduler calls): pop + visit with 5 out-links + push per
  second with GreedySelection, against a plain ``heapq`` greedy with lazy invalidation (push a
  new tuple on every credit, skip stale tuples on pop) over the same engine;
* memory: bytes per page held by the engine's arrays (at exact capacity), checked against
  tracemalloc, for each window policy, and the selection structures; plus what a Python dict
  from 20-byte fingerprints to ids costs per page (the Scrapy layer's key map).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from benchmarks._harness import best_of
from scrapy_opic.opic import GreedySelection, OpicEngine, SlottedGreedySelection
from scrapy_opic.opic.graph import power_law_graph
from scrapy_opic.opic.pagerank import PowerIteration
from scrapy_opic.simulator.simulation import Simulation

ROOT = Path(__file__).resolve().parent


def uniform_engine(n: int, window: str | None = None) -> OpicEngine:
    """An engine holding ``n`` pages with the paper's initial cash 1/n each."""
    e = OpicEngine(window=window, capacity=n)
    e.add_pages(n)
    e.init_uniform()
    return e


def simulator_speed(n: int, lines: list[str]) -> None:
    t0 = time.perf_counter()
    graph = power_law_graph(n, seed=1)
    lines.append(
        f"Graph: {graph.n:,} nodes, {graph.n_edges:,} links (power law, generated in "
        f"{time.perf_counter() - t0:.1f} s).\n"
    )
    it = PowerIteration(graph, 0.85)
    x = np.full(graph.n, 1.0 / graph.n)
    sweep = best_of(lambda: it.step(x))
    lines.append("| run | visits/s | time per N visits / one power-iteration sweep |")
    lines.append("|---|---|---|")
    lines.append(f"| off-line power iteration (baseline) | {graph.n / sweep:,.0f} | 1.00 |")
    for frac in (100, 300, 1000):
        b = graph.n // frac
        sim = Simulation(graph, "greedy", 0.15, batch=b)
        sim.run(graph.n)  # warm up: first pass
        dt = best_of(lambda sim=sim: sim.run(graph.n))
        lines.append(
            f"| greedy, batch {b:,} ({100 / frac:.2g}% of N) | {graph.n / dt:,.0f} | "
            f"{dt / sweep:.2f} |"
        )
    lines.append("")


def per_event_speed(n: int, lines: list[str], events: int = 100_000) -> None:
    rng = np.random.default_rng(0)
    kids = rng.integers(0, n, size=(events, 5)).tolist()

    def opic() -> float:
        e = uniform_engine(n)
        sel = GreedySelection(e)
        for i in range(n):
            sel.push(i)
        t0 = time.perf_counter()
        for k in range(events):
            i = sel.pop()
            e.visit(i, kids[k])
            sel.push(i)
        return time.perf_counter() - t0

    def lazy_heapq() -> tuple[float, int]:
        e = uniform_engine(n)
        key = e._s_mv  # stored cash: true cash minus the payout accumulator (refresh = 1)
        heap = [(-key[i], i) for i in range(n)]
        heapq.heapify(heap)
        t0 = time.perf_counter()
        for k in range(events):
            e.payout()
            while True:
                negc, i = heapq.heappop(heap)
                if -negc == key[i]:
                    break  # fresh entry; otherwise a stale one left by an earlier credit
            e.visit(i, kids[k])
            heapq.heappush(heap, (-key[i], i))
            for j in kids[k]:
                heapq.heappush(heap, (-key[j], j))
        return time.perf_counter() - t0, len(heap)

    def slotted(n_slots: int = 100) -> float:
        e = uniform_engine(n)
        sel = SlottedGreedySelection(e)
        for i in range(n):
            sel.push(i, i % n_slots)
        # Two hosts at their concurrency limit: Scrapy's CONCURRENT_REQUESTS (16) over
        # CONCURRENT_REQUESTS_PER_DOMAIN (8) bounds how many slots can be full at once.
        busy = {0, 1}
        t0 = time.perf_counter()
        for k in range(events):
            i = sel.pop(lambda slot: slot not in busy)
            e.visit(i, kids[k])
            sel.push(i, i % n_slots)
        return time.perf_counter() - t0

    t_opic = opic()
    t_slotted = slotted()
    t_heapq, heap_len = lazy_heapq()
    lines.append("| per-event greedy (pop + visit with 5 links + push) | events/s | ratio |")
    lines.append("|---|---|---|")
    lines.append(
        f"| heapq with lazy invalidation (baseline; heap grew to {heap_len:,} entries for "
        f"{n:,} pages) | {events / t_heapq:,.0f} | 1.00 |"
    )
    lines.append(
        f"| GreedySelection (indexed heaps, one entry per page) | {events / t_opic:,.0f} | "
        f"{t_heapq / t_opic:.2f} |"
    )
    lines.append(
        f"| SlottedGreedySelection (100 hosts, 2 of them full) | {events / t_slotted:,.0f} | "
        f"{t_heapq / t_slotted:.2f} |"
    )
    lines.append("")


def memory(n: int, lines: list[str]) -> None:
    lines.append("| structure | bytes per page (arrays) | tracemalloc, bytes per page |")
    lines.append("|---|---|---|")
    for spec in (
        "unbounded",
        "unbounded:lemma",
        "interpolation:10",
        "interpolation:86400:wall",
        "variable:8",
    ):
        tracemalloc.start()
        e = uniform_engine(n, spec)
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        lines.append(f"| engine, window {spec} | {e.nbytes() / n:.1f} | {traced / n:.1f} |")
        del e
    e = uniform_engine(n)
    tracemalloc.start()
    sel = GreedySelection(e)
    for i in range(n):
        sel.push(i)
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    lines.append(
        f"| GreedySelection, all pages candidates | {sel.nbytes() / n:.1f} | {traced / n:.1f} |"
    )
    e2 = uniform_engine(n)
    tracemalloc.start()
    slotted_sel = SlottedGreedySelection(e2)
    for i in range(n):
        slotted_sel.push(i, i % 1000)
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    lines.append(
        f"| SlottedGreedySelection, 1,000 hosts | {slotted_sel.nbytes() / n:.1f} | "
        f"{traced / n:.1f} |"
    )
    del e2, slotted_sel
    keys = [os.urandom(20) for _ in range(min(n, 1_000_000))]
    tracemalloc.start()
    index = {k: i for i, k in enumerate(keys)}
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    lines.append(
        f"| dict fingerprint -> id (Scrapy layer, not engine; keys' own 53 bytes excluded) | "
        f"- | {traced / len(index):.1f} |"
    )
    lines.append("")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "engine_perf.md")
    args = ap.parse_args(argv)
    lines = [
        "# Engine speed and memory\n",
        f"Generated by `python -m benchmarks.engine_perf --nodes {args.nodes}` "
        f"({os.cpu_count()} cores). Speeds are best of 3; ratios are against baselines "
        "measured in the same run.\n",
        "## Simulator (batch path)\n",
    ]
    simulator_speed(args.nodes, lines)
    lines.append("## Per-event path (the scheduler's)\n")
    per_event_speed(args.nodes, lines, args.events)
    lines.append(f"## Memory at {args.nodes:,} pages\n")
    memory(args.nodes, lines)
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
