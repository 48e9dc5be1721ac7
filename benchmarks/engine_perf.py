"""Speed and memory of the engine at a million pages, each speed beside a baseline measured in
the same run (machines are shared and noisy), best of 3.

    python -m benchmarks.engine_perf [--nodes 1000000] [--events 100000] [--out DIR]

* Simulator (batch path): Greedy's visits per second on a power-law graph, and the time of N
  visits over that of one off-line power-iteration sweep (which "visits" N pages).
* Per-event path (what the Scrapy scheduler calls): pop + visit with 5 out-links + push, per
  second, with GreedySelection and with TieredSelection (one priority, 100 hosts, 2 of them at
  their concurrency limit: CONCURRENT_REQUESTS 16 over 8 per domain fills at most 2), against a
  ``heapq`` greedy with lazy invalidation over the same engine (a new entry on every credit,
  stale ones skipped on pop); entries per page: the queue's size at the end over the pages.
  Those pop a page fetched again and again (a refetch: by cash); the *one pass* rows pop pages
  never fetched without pushing them back, by cash and in the web order (the hosts' turns).
* Memory: bytes per page of the engine's arrays (at exact capacity) by window, and the process's
  resident memory grown while building the engine (anonymous mappings that tracemalloc misses).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time
from array import array
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, best_of, page, rss_now, table, write_results
from scrapy_opic.opic import GreedySelection, OpicEngine
from scrapy_opic.opic.graph import power_law_graph
from scrapy_opic.opic.pagerank import PowerIteration
from scrapy_opic.opic.selection import TieredSelection, Tiers
from scrapy_opic.simulator.simulation import Simulation

WINDOWS = ("unbounded", "unbounded:lemma", "interpolation:10", "interpolation:86400:wall")
WINDOWS += ("variable:8",)


def uniform_engine(n: int, window: str | None = None) -> OpicEngine:
    """An engine holding ``n`` pages with the paper's initial cash 1/n each."""
    e = OpicEngine(window=window, capacity=n)
    e.add_pages(n)
    e.init_uniform()
    return e


def simulator(n: int) -> list[list]:
    """Rows: run, visits per second, time of N visits over one power-iteration sweep."""
    graph = power_law_graph(n, seed=1)
    it, x = PowerIteration(graph, 0.85), np.full(n, 1.0 / n)
    sweep = best_of(lambda: it.step(x))
    rows = [["off-line power iteration (baseline)", n / sweep, 1.0]]
    for frac in (100, 300, 1000):
        sim = Simulation(graph, "greedy", 0.15, batch=n // frac)
        sim.run(n)  # warm up: the first pass
        dt = best_of(lambda sim=sim: sim.run(n))
        rows.append([f"Greedy, batch {n // frac:,} ({100 / frac:.2g}% of N)", n / dt, dt / sweep])
    return rows


def per_event(n: int, events: int) -> list[list]:
    """Rows: queue, events per second, ratio to the heapq baseline, entries per page."""
    kids = np.random.default_rng(0).integers(0, n, size=(events, 5)).tolist()

    def selection(hosts: int, web: bool = False, again: bool = True) -> tuple[float, int]:
        e = uniform_engine(n)
        if hosts:  # a tier per host (one priority), as the frontier codes its pages
            tiers = Tiers()
            codes = array("I", [tiers.code(0, i % hosts) for i in range(n)])
            sel = TieredSelection(e, tiers, codes, web)
            pop = lambda: sel.pop(lambda slot: slot > 1)  # noqa: E731  (slots 0, 1 full)
        else:
            sel = GreedySelection(e)
            pop = sel.pop
        push = sel.push
        for i in range(n):
            push(i)
        t0 = time.perf_counter()
        for k in range(events):
            i = pop()
            e.visit(i, kids[k])
            if again:
                push(i)
        return time.perf_counter() - t0, len(sel)

    def lazy_heapq() -> tuple[float, int]:
        e = uniform_engine(n)
        key = e.stored_mv  # stored cash: true cash minus the payout accumulator (refresh = 1)
        heap = [(-key[i], i) for i in range(n)]
        heapq.heapify(heap)
        t0 = time.perf_counter()
        for k in range(events):
            e.payout()
            while True:
                negc, i = heapq.heappop(heap)
                if -negc == key[i]:
                    break  # a fresh entry; otherwise a stale one, left by an earlier credit
            e.visit(i, kids[k])
            for j in (i, *kids[k]):
                heapq.heappush(heap, (-key[j], j))
        return time.perf_counter() - t0, len(heap)

    base, size = lazy_heapq()
    rows = [["heapq with lazy invalidation (baseline)", events / base, 1.0, size / n]]
    runs = (
        ("GreedySelection", 0, False, True),
        ("TieredSelection, 100 hosts", 100, False, True),
        ("TieredSelection, 100 hosts, one pass, by cash", 100, False, False),
        ("TieredSelection, 100 hosts, one pass, web order", 100, True, False),
    )
    for name, hosts, web, again in runs:
        t, size = selection(hosts, web, again)
        rows.append([name, events / t, base / t, size / n])
    return rows


def memory(n: int) -> list[list]:
    """Rows: window, bytes per page of the engine's arrays, and of resident memory grown."""
    rows = []
    for spec in WINDOWS:
        before = rss_now()
        e = uniform_engine(n, spec)
        rows.append([spec, e.nbytes() / n, (rss_now() - before) / n])
        del e
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    n = args.nodes
    data = {"simulator": simulator(n), "per event": per_event(n, args.events), "memory": memory(n)}
    markdown = page(
        "Engine speed and memory",
        f"Speeds on {os.cpu_count()} cores, each beside a baseline of the same run; memory per "
        "page of the engine's capacity. The docstring of `benchmarks/engine_perf.py` says how.",
        f"## Simulator (batch path), {n:,} pages",
        table(["run", "visits/s", "time of N visits / one sweep"], data["simulator"]),
        "## Per-event path (the scheduler's): pop + visit with 5 links + push",
        table(["queue", "events/s", "ratio", "entries per page"], data["per event"]),
        f"## Memory at {n:,} pages",
        table(
            ["engine, window", "bytes per page (arrays)", "bytes per page (RSS grown)"],
            data["memory"],
        ),
    )
    write_results("engine_perf", data, markdown, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
