"""Regenerate the paper's experiments (Abiteboul, Preda, Cobena, WWW 2003, section 4.2) with the
engine users run, and write a Markdown report plus PNG plots.

    python -m benchmarks.paper_figures                      # full run, ~10 minutes on 2 cores
    python -m benchmarks.paper_figures --nodes 5000 --skip-real --out /tmp/figs   # smoke run

Experiments (each against exact PageRank with damping 1 - epsilon, epsilon = 0.15):

* Fig. 2 / Fig. 3: error on all pages and on the top 10% after 1N..10N visits, for Greedy, Cycle,
  Random and the off-line power iteration (N visits = one matrix multiplication), plus Kendall
  tau over pages with in-links and weighted tau. Greedy is run through the per-event path (the
  paper's algorithm exactly) and through the batch path at several batch sizes; the paper's
  estimate (H + C) / (G + 1) is measured beside the default Lemma 2.3 estimate H + C - C0.
* The same table on a real web graph, cnr-2000 (325,557 pages, 3.2M links).
* Greedy's average cash at visit time, per pass (the paper: it converges to 2/n).
* Fig. 4: window size (Variable Window of 4, 8, 16 measures, and Interpolation) under change
  rates; Fig. 5: measures per page; Fig. 6: window policies under change rates.

Error = 100 * mean(|X - PR| / PR), as the paper defines it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import command, save_figure, write_results
from scrapy_opic.opic.graph import Graph, from_edges, load_edge_list, power_law_graph
from scrapy_opic.opic.pagerank import PowerIteration, pagerank
from scrapy_opic.simulator.simulation import Simulation, compare_to_pagerank

EPS = 0.15
ROOT = Path(__file__).resolve().parent
REAL_GRAPH = ROOT.parent.parent / "shared" / "data" / "cnr-2000.edges.tsv.gz"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ convergence (Fig. 2/3)
def convergence(graph: Graph, pr: np.ndarray, runs: dict[str, dict], passes: int) -> dict:
    """Metrics after 1N..passes*N visits for each named run (``Simulation`` kwargs)."""
    out: dict[str, list[dict]] = {}
    for name, kw in runs.items():
        t0 = time.perf_counter()
        sim = Simulation(graph, epsilon=EPS, seed=1, **kw)
        rows = []
        for p in range(1, passes + 1):
            sim.run(graph.n)
            m = compare_to_pagerank(sim.importance(), pr, graph)
            m.update(passes=p, G=sim.engine.G)
            rows.append(m)
        out[name] = rows
        log(
            f"  {name}: {time.perf_counter() - t0:.1f} s, after {passes}N: "
            f"all {rows[-1]['error_all']:.2f}% top10 {rows[-1]['error_top10']:.2f}% "
            f"tau {rows[-1]['tau']:.4f}"
        )
    rows = []
    it = PowerIteration(graph, 1 - EPS).iterate()
    for p in range(1, passes + 1):
        m = compare_to_pagerank(next(it), pr, graph)
        m.update(passes=p, G=float("nan"))
        rows.append(m)
    out["off-line power iteration"] = rows
    return out


def convergence_table(results: dict, metric: str, checkpoints=(1, 2, 3, 5, 10)) -> str:
    cps = [c for c in checkpoints if c <= len(next(iter(results.values())))]
    head = "| run | " + " | ".join(f"{c}N" for c in cps) + " |\n"
    head += "|---|" + "---|" * len(cps) + "\n"
    fmt = "{:.4f}" if "tau" in metric else "{:.2f}"
    body = "".join(
        f"| {name} | " + " | ".join(fmt.format(rows[c - 1][metric]) for c in cps) + " |\n"
        for name, rows in results.items()
    )
    return head + body


def standard_runs(batch: int, per_event: bool) -> dict[str, dict]:
    """Greedy (default estimator, and each other estimator), Cycle and Random at ``batch``."""
    runs = {f"Greedy (batch {batch})": dict(strategy="greedy", batch=batch)}
    if per_event:
        runs["Greedy (per event)"] = dict(strategy="greedy", batch=1)
    for est in ("lemma", "regression", "paper"):
        runs[f"Greedy, {est} estimate (batch {batch})"] = dict(
            strategy="greedy", batch=batch, window=f"unbounded:{est}"
        )
    runs[f"Cycle (batch {batch})"] = dict(strategy="cycle", batch=batch)
    runs[f"Random (batch {batch})"] = dict(strategy="random", batch=batch)
    return runs


def convergence_tables(results: dict, prefix: str, fig_numbers: bool = False) -> str:
    """The four metric tables of a convergence experiment."""
    sections = [
        ("error_all", ("Fig. 2: " if fig_numbers else "") + "error on all pages (%)"),
        ("error_top10", ("Fig. 3: " if fig_numbers else "") + "error on the top 10% (%)"),
        ("tau", "Kendall tau, pages with in-links"),
        ("weighted_tau", "weighted tau"),
    ]
    return "\n".join(
        f"### {prefix}{label}\n\n" + convergence_table(results, metric)
        for metric, label in sections
    )


def target_checks(label: str, at3: dict, at_end: dict, passes: int) -> list[tuple]:
    """The issue's accuracy targets for one estimator: (check, measured, target, met)."""
    return [
        (f"{label}: top-10% error after 3N", at3["error_top10"], "<= 2%", at3["error_top10"] <= 2),
        (f"{label}: all-pages error after 3N", at3["error_all"], "<= 5%", at3["error_all"] <= 5),
        (f"{label}: Kendall tau after 3N", at3["tau"], ">= 0.90", at3["tau"] >= 0.90),
        (
            f"{label}: top-10% error after {passes}N",
            at_end["error_top10"],
            "<= 0.7% (at 10N)",
            at_end["error_top10"] <= 0.7,
        ),
        (
            f"{label}: Kendall tau after {passes}N",
            at_end["tau"],
            ">= 0.97 (at 10N)",
            at_end["tau"] >= 0.97,
        ),
        (
            f"{label}: weighted tau after 3N / {passes}N",
            at3["weighted_tau"],
            f"no target ({at_end['weighted_tau']:.4f})",
            True,
        ),
    ]


def line_plot(
    series: dict[str, tuple[list, list]],
    xlabel: str,
    ylabel: str,
    title: str,
    path: Path,
    logy: bool = False,
) -> None:
    """One PNG with a line per named ``(xs, ys)`` series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", ms=3, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def plot_convergence(results: dict, metric: str, title: str, path: Path) -> None:
    series = {
        name: ([r["passes"] for r in rows], [r[metric] for r in rows])
        for name, rows in results.items()
    }
    tau = "tau" in metric
    ylabel = "tau" if tau else "mean relative error (%)"
    line_plot(series, "pages crawled (multiples of N)", ylabel, title, path, logy=not tau)


# ------------------------------------------------------------------ cash at visit
def cash_at_visit(graph: Graph, passes: int, batch: int) -> list[float]:
    """Mean cash absorbed per real visit, times n, for each pass."""
    sim = Simulation(graph, "greedy", EPS, batch=batch)
    out = []
    for _ in range(passes):
        g0 = sim.engine.g_real
        sim.run(graph.n)
        out.append((sim.engine.g_real - g0) / graph.n * graph.n)
    return out


def dense_graph(n: int, degree: int, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), degree)
    return from_edges(src, rng.integers(0, n, src.size), n)


# ------------------------------------------------------------------ changing graphs (Fig. 4-6)
class ChangingGraph:
    """The paper's change model: per N visits, ``rate`` of the pages get their in-degree halved
    or doubled (half of their in-links removed, or as many new ones added from random pages)."""

    def __init__(self, graph: Graph, seed: int) -> None:
        self.graph = graph
        self.rng = np.random.default_rng(seed)

    def change(self, pages: int) -> Graph:
        g, rng, n = self.graph, self.rng, self.graph.n
        if pages <= 0:
            return g
        src, dst = g.sources(), g.indices.astype(np.int64)
        chosen = rng.choice(n, size=pages, replace=False)
        doubling = rng.random(pages) < 0.5
        halve = np.zeros(n, dtype=bool)
        halve[chosen[~doubling]] = True
        keep = ~(halve[dst] & (rng.random(dst.size) < 0.5))
        src, dst = src[keep], dst[keep]
        dbl = chosen[doubling]
        add = np.maximum(np.bincount(dst, minlength=n)[dbl], 1)
        new_dst = np.repeat(dbl, add)
        new_src = rng.integers(0, n, new_dst.size)
        self.graph = from_edges(np.concatenate([src, new_src]), np.concatenate([dst, new_dst]), n)
        return self.graph


def adaptive_run(graph: Graph, window: str, rate: float, passes: int, batch: int) -> dict:
    """Greedy over a graph changing at ``rate`` (fraction of pages per N visits)."""
    changing = ChangingGraph(graph, seed=11)
    sim = Simulation(graph, "greedy", EPS, window=window, batch=batch, seed=1)
    steps = 10
    per_step = int(round(rate * graph.n / steps))
    for _ in range(passes * steps):
        sim.run(graph.n // steps)
        sim.set_graph(changing.change(per_step))
    pr = pagerank(changing.graph, 1 - EPS)
    m = compare_to_pagerank(sim.importance(), pr, changing.graph)
    m["measures"] = sim.engine.window.measures_per_page(sim.engine._now())
    return m


def g_per_pass(graph: Graph, batch: int) -> float:
    sim = Simulation(graph, "greedy", EPS, batch=batch)
    sim.run(5 * graph.n)
    g0 = sim.engine.G
    sim.run(5 * graph.n)
    return (sim.engine.G - g0) / 5


def plot_windows(results: dict, metric: str, title: str, path: Path) -> None:
    series = {
        name: ([100 * r for r in sorted(by_rate)], [by_rate[r][metric] for r in sorted(by_rate)])
        for name, by_rate in results.items()
    }
    xlabel = "change rate (% of pages per N visits)"
    line_plot(series, xlabel, "mean relative error (%)", title, path)


def windows_table(results: dict, metric: str) -> str:
    rates = sorted(next(iter(results.values())))
    head = "| window | " + " | ".join(f"{100 * r:g}%" for r in rates) + " |\n"
    head += "|---|" + "---|" * len(rates) + "\n"
    return head + "".join(
        f"| {name} | " + " | ".join(f"{by_rate[r][metric]:.2f}" for r in rates) + " |\n"
        for name, by_rate in results.items()
    )


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1, help="seed of the synthetic graph")
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--real-graph", type=Path, default=REAL_GRAPH)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-windows", action="store_true")
    args = ap.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    n = args.nodes
    batch = max(1, n // 100)
    report: list[str] = []
    data: dict = {"nodes": n, "epsilon": EPS, "batch": batch}
    t_start = time.perf_counter()

    log(f"synthetic graph: {n} nodes, P(I=k) ~ k^-2.1, seed {args.seed}")
    graph = power_law_graph(n, seed=args.seed)
    pr = pagerank(graph, 1 - EPS)
    conv = convergence(graph, pr, standard_runs(batch, per_event=True), args.passes)
    data["convergence"] = conv
    plot_convergence(
        conv,
        "error_all",
        f"Fig. 2: convergence on all pages ({n:,} nodes)",
        out / "fig2_all_pages.png",
    )
    plot_convergence(
        conv,
        "error_top10",
        f"Fig. 3: convergence on the top 10% ({n:,} nodes)",
        out / "fig3_top10.png",
    )
    plot_convergence(conv, "tau", "Kendall tau (pages with in-links)", out / "tau.png")

    log("greedy batch sizes")
    sweep = {}
    for b in sorted(
        {1, max(1, n // 1000), max(1, n // 300), batch, max(1, n // 30), max(1, n // 10)}
    ):
        sim = Simulation(graph, "greedy", EPS, batch=b)
        row = {}
        for p in (3, 10):
            sim.run((p - (3 if p == 10 else 0)) * n)
            row[p] = compare_to_pagerank(sim.importance(), pr, graph)
        sweep[b] = row
    data["batch_sweep"] = sweep

    P = args.passes
    report.append(
        f"# The paper's experiments, regenerated\n\nGenerated by `{command()}` (scrapy-opic "
        f"engine, epsilon = {EPS}, reference: exact PageRank with "
        f"alpha = {1 - EPS}). Error = 100 x mean(|X - PR| / PR). Tau is Kendall's tau over pages "
        f"with in-degree > 0 (pages nobody links to all tie in PageRank); weighted tau is "
        f"scipy's hyperbolic-weighted tau, which stresses the top of the ranking.\n\n"
        f"Synthetic graph: {graph.n:,} nodes, {graph.n_edges:,} links, in-degrees drawn from "
        f"P(I = k) ~ k^-2.1 with uniformly random sources (seed {args.seed}); "
        f"dangling pages: {int((graph.out_degree == 0).sum()):,}; "
        f"pages without in-links: {int((graph.in_degree == 0).sum()):,}.\n"
    )
    report.append(
        "Estimators: the default *blend* is the mean of the normalised *lemma* estimate "
        "(H + C - C0, Lemma 2.3) and the *regression* estimate (slope of the received cash over "
        "G-time); *paper* is (H + C) / (G + 1). Runs without a named estimator use the default.\n"
    )
    report.append("## Targets (Greedy, batch = 1% of N)\n")
    checks = []
    for label, name in (
        ("default (blend)", f"Greedy (batch {batch})"),
        ("regression", f"Greedy, regression estimate (batch {batch})"),
        ("lemma", f"Greedy, lemma estimate (batch {batch})"),
    ):
        checks += target_checks(label, conv[name][2], conv[name][-1], P)
    report.append(
        "| check | measured | target | met |\n|---|---|---|---|\n"
        + "".join(
            f"| {c} | {v:.4f} | {t} | {'yes' if ok else '**no**'} |\n" for c, v, t, ok in checks
        )
    )
    report.append(convergence_tables(conv, "", fig_numbers=True))
    report.append("![Fig. 2](fig2_all_pages.png) ![Fig. 3](fig3_top10.png) ![tau](tau.png)\n")
    report.append(
        "### Greedy: pages visited together\n\nThe batch path visits the B pages with the most "
        "cash at once (a crawler fetches many pages concurrently); B = 1 is the per-event path.\n\n"
        "| batch | all 3N | top10 3N | tau 3N | all 10N | top10 10N | tau 10N |\n"
        "|---|---|---|---|---|---|---|\n"
        + "".join(
            f"| {b} | {r[3]['error_all']:.2f} | {r[3]['error_top10']:.2f} | {r[3]['tau']:.4f} | "
            f"{r[10]['error_all']:.2f} | {r[10]['error_top10']:.2f} | {r[10]['tau']:.4f} |\n"
            for b, r in sweep.items()
        )
    )

    log("cash at visit")
    cav = cash_at_visit(graph, min(args.passes, 10), batch=1)
    dense = dense_graph(max(1000, n // 10), 50)
    cav_dense = cash_at_visit(dense, 20, batch=1)
    data["cash_at_visit"] = {"power_law": cav, "dense": cav_dense}
    report.append(
        "## Greedy's average cash at visit time (x n)\n\nThe paper argues that a page's cash "
        "grows linearly until Greedy reads it, so it holds on average half its visit cash; the "
        "total being 1, the visit cash converges to 2/n. Per-event Greedy, mean cash absorbed "
        "per visit times n, pass by pass:\n\n"
        f"- power-law graph above: {', '.join(f'{x:.2f}' for x in cav)}\n"
        f"- {dense.n:,} pages with 50 out-links each: {', '.join(f'{x:.2f}' for x in cav_dense)}"
        "\n\nWith 50 out-links per page, cash arrives in small lumps and the average settles at "
        "2/n, as the paper says. On the power-law graph the mean out-degree is ~5, so cash "
        "arrives in lumps of ~(1 - eps) * 2.5/5 ~ 0.4/n: a page waits at a level below its "
        "visit cash, not on a ramp, and the same argument gives 2/n + (mean lump) ~ 2.5/n, "
        "which is what it settles at.\n"
    )

    if not args.skip_real and args.real_graph.exists():
        log(f"real graph: {args.real_graph}")
        t0 = time.perf_counter()
        real = load_edge_list(args.real_graph)
        log(f"  loaded in {time.perf_counter() - t0:.1f} s")
        rpr = pagerank(real, 1 - EPS)
        rb = max(1, real.n // 100)
        rconv = convergence(real, rpr, standard_runs(rb, per_event=False), args.passes)
        data["real"] = rconv
        plot_convergence(
            rconv, "error_top10", "cnr-2000: error on the top 10%", out / "cnr2000_top10.png"
        )
        plot_convergence(
            rconv, "error_all", "cnr-2000: error on all pages", out / "cnr2000_all_pages.png"
        )
        report.append(
            f"## Real web graph: cnr-2000\n\n{real.n:,} pages, {real.n_edges:,} distinct links "
            "after dropping the 87,442 self-links (the engine ignores a link from a page to "
            "itself by default: a navigation bar is not an endorsement; the reference PageRank "
            f"is computed on the same graph). Dangling pages: "
            f"{int((real.out_degree == 0).sum()):,}; pages without in-links: "
            f"{int((real.in_degree == 0).sum()):,}.\n"
        )
        report.append(convergence_tables(rconv, "cnr-2000: "))
        report.append("![cnr all](cnr2000_all_pages.png) ![cnr top](cnr2000_top10.png)\n")

    if not args.skip_windows:
        log("windows under change")
        gp = g_per_pass(graph, batch)
        rates = [0.0, 0.0025, 0.005, 0.01, 0.02, 0.04]
        fig4_runs = {
            "Variable Window 4": "variable:4",
            "Variable Window 8": "variable:8",
            "Variable Window 16": "variable:16",
            "Interpolation (4 passes)": f"interpolation:{4 * gp:g}",
        }
        fig6_runs = {
            "Unbounded (static OPIC)": "unbounded",
            "Variable Window 8": "variable:8",
            "Fixed Window (8 passes)": f"fixed:{8 * gp:g}",
            "Improved Fixed Window (4 passes, min 3)": f"improved:{4 * gp:g}:3",
            "Interpolation (4 passes)": f"interpolation:{4 * gp:g}",
        }
        cache: dict[tuple[str, float], dict] = {}
        win: dict[str, dict[str, dict]] = {"fig4": {}, "fig6": {}}
        for fig, runs_ in (("fig4", fig4_runs), ("fig6", fig6_runs)):
            for name, spec in runs_.items():
                win[fig][name] = {}
                for r in rates:
                    if (spec, r) not in cache:
                        cache[(spec, r)] = adaptive_run(graph, spec, r, args.passes, batch)
                    win[fig][name][r] = cache[(spec, r)]
                log(
                    f"  {name}: "
                    + ", ".join(
                        f"{100 * r:g}%: {win[fig][name][r]['error_all']:.2f}" for r in rates
                    )
                )
        data["windows"] = {
            f: {k: {str(r): v for r, v in d.items()} for k, d in w.items()} for f, w in win.items()
        }
        plot_windows(
            win["fig4"],
            "error_all",
            "Fig. 4: window sizes (Greedy, all pages)",
            out / "fig4_window_sizes.png",
        )
        plot_windows(
            win["fig6"],
            "error_all",
            "Fig. 6: window policies (Greedy, all pages)",
            out / "fig6_window_policies.png",
        )
        report.append(
            "## Adaptive OPIC on a changing graph (Fig. 4-6)\n\nGreedy (batch 1% of N) crawls "
            f"{args.passes}N pages while, every N/10 visits, a share of the pages get their "
            "in-degree halved or doubled (change rate = % of pages changed per N visits); the "
            "error is measured at the end against the PageRank of the graph as it is then. "
            f"Windows in G-time: one pass of N visits advances G by {gp:.2f} here, so "
            f"'4 passes' is T = {4 * gp:.1f}.\n\n"
            "### Fig. 4: window size, error on all pages (%)\n\n"
            + windows_table(win["fig4"], "error_all")
            + "\n### Fig. 4: window size, error on the top 10% (%)\n\n"
            + windows_table(win["fig4"], "error_top10")
            + "\n### Fig. 6: window policy, error on all pages (%)\n\n"
            + windows_table(win["fig6"], "error_all")
            + "\n### Fig. 6: window policy, error on the top 10% (%)\n\n"
            + windows_table(win["fig6"], "error_top10")
            + "\n### Fig. 5: measures per page (static graph)\n\n| window | measures |\n|---|---|\n"
            + "".join(f"| {k} | {v[0.0]['measures']:.2f} |\n" for k, v in win["fig6"].items())
            + "\n![Fig. 4](fig4_window_sizes.png) ![Fig. 6](fig6_window_policies.png)\n"
        )

    report.append(f"\n_Total time: {time.perf_counter() - t_start:.0f} s._\n")
    write_results("paper_figures", data, "\n".join(report), out)
    log(f"wrote {out / 'paper_figures.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
