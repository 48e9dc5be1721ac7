"""A changing site: continuous Scrapy crawls of a site that changes under them, judged against
the exact PageRank (damping 0.85) of the site before and after the change.

    python -m benchmarks.changing_site [--windows W ...] [--seeds 1 2 3] [--repeats R] [--out DIR]

The Django manual's link graph (N pages), served by ``tests.support.sites.ChangingSite``,
changes at the 3N-th page request as the seed draws: a tenth of the pages removed (a third answer
410, the others 404; half the links to them taken out, the others left broken), N/10 new pages
linked from the home page, a fifth of the other links moved (to pages drawn by in-degree + 1). A
crawl per window and seed (continuous, 8 concurrent requests, 7N fetches); at each commit (every
N/50 visits), Kendall tau (pages with in-links) of the state's importance (0 for a page not known
yet) against the PageRank of the old graph and of the new one (removed pages are no pages, broken
links no links). *at 2N*: tau against the new graph at the first commit 2N fetches or more after
the change (the server's count); *to 0.85*: fetches after the change until that tau is 0.85,
beside the engine alone (``Simulation``, every page known, no HTTP: the lag that is the
window's). From the server's log: the removed pages' requests after the change (and
after their 404/410), the fetches until the first and the last new page were asked for; from the
final state: the removed pages' status, the most cash one holds, their importance.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from collections import Counter
from contextlib import suppress
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from benchmarks._harness import RESULTS, page, save_figure, table, write_results
from benchmarks.crawl_evidence import DOCS, crawl, crawled_graph, ensure_docs, log
from scrapy_opic._backends import StoreError
from scrapy_opic.export import open_state
from scrapy_opic.opic.graph import Graph, from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from scrapy_opic.simulator.simulation import Simulation
from tests.support.sites import ChangingSite, StaticSite

GOAL, BEFORE, AFTER = 0.85, 3, 4  # (fetches before and after the change: N times)
RANK = ("window", "seed", "run", "tau old at the change", "tau new", "at 2N", "to 0.85")
RANK += ("engine alone to 0.85",)
GONE = ("window", "seed", "run", "removed asked for 0 / 1 / 2+ times", "after their 404/410")
GONE += ("status 404 / 410 / ok", "max cash", "importance at the change", "at the end")
GONE += ("new pages asked: first", "all")


def django_graph(work: Path) -> tuple[Graph, int]:
    """The Django manual's graph (a one-pass crawl) and its home page, pages numbered in the
    order of their URLs, not of the crawl, so that a seed draws the same change in every run."""
    with StaticSite(ensure_docs(*DOCS["Django docs"])) as site:
        start = site.url("index.html")
        graph, node = crawled_graph([crawl(start, "opic", work / "one-pass")[0]])
    url_of = {i: u for u, i in sorted(node.items(), reverse=True)}  # its smallest URL
    rank = np.empty(graph.n, dtype=np.int64)
    rank[sorted(range(graph.n), key=url_of.__getitem__)] = np.arange(graph.n)
    return from_edges(rank[graph.sources()], rank[graph.indices], graph.n), int(rank[node[start]])


def change(graph: Graph, home: int, seed: int) -> dict:
    """The site before and after the change on the same ids (the old pages, then the new
    section: its index page, then its pages), and the references of tau."""
    rng, n, total = np.random.default_rng(seed), graph.n, graph.n + round(0.1 * graph.n)
    removed = np.sort(rng.choice(np.setdiff1d(np.arange(n), [home]), total - n, replace=False))
    gone_410 = removed[rng.random(removed.size) < 1 / 3]
    dead = np.isin(np.arange(total), removed)
    src, dst = graph.sources(), graph.indices.astype(np.int64)
    before = from_edges(src, dst, total)
    src, dst = src[~dead[src]], dst[~dead[src]]  # a removed page's own links go with it
    broken = dead[dst]
    taken_out = broken & (rng.random(dst.size) < 0.5)
    src, dst = src[~taken_out], dst[~taken_out]
    old = np.flatnonzero(~dead[:n])
    moved = ~dead[dst] & (rng.random(dst.size) < 0.2)
    weight = np.bincount(dst, minlength=total)[old] + 1.0
    dst[moved] = rng.choice(old, int(moved.sum()), p=weight / weight.sum())
    # The new section: the index links to its pages, they to each other (a power-law graph),
    # the index, home and two old pages each.
    index, pages, inner = n, np.arange(n + 1, total), power_law_graph(total - n - 1, seed=seed)
    src = [src, [home], np.full(pages.size, index), pages, pages, n + 1 + inner.sources()]
    dst = [dst, [index], pages, np.full(pages.size, index), np.full(pages.size, home)]
    dst += [n + 1 + inner.indices.astype(np.int64), rng.choice(old, 2 * pages.size)]
    after = from_edges(np.concatenate([*src, np.repeat(pages, 2)]), np.concatenate(dst), total)
    return {
        **{"n": n, "total": total, "home": home, "before": before, "after": after},
        **{"removed": removed, "gone_410": gone_410, "new": np.arange(n, total)},
        "old_ref": reference(before, np.arange(total) < n),
        "new_ref": reference(after, ~dead),
        "links": [moved.sum(), taken_out.sum(), (broken & ~taken_out).sum()],  # moved, out, left
    }


def reference(served: Graph, alive: np.ndarray) -> dict:
    """PageRank over the pages that exist (``alive``) and the links between them."""
    dense, s, d = np.cumsum(alive) - 1, served.sources(), served.indices
    g = from_edges(dense[s[alive[s] & alive[d]]], dense[d[alive[s] & alive[d]]], alive.sum())
    return {"ids": np.flatnonzero(alive), "pr": pagerank(g, 0.85), "linked": g.in_degree > 0}


def tau(x: np.ndarray, ref: dict) -> float:
    """Kendall tau of ``x`` (by node id) against ``ref``'s PageRank, pages with in-links."""
    return float(kendalltau(x[ref["ids"]][ref["linked"]], ref["pr"][ref["linked"]]).statistic)


def node(url: str) -> int:
    return int(url.rsplit("/", 1)[1].removesuffix(".html"))


def track(path: Path, c: dict, site: ChangingSite, points: list, stop: threading.Event) -> None:
    """A point per commit of the crawl's state, read until ``stop`` and then once more."""
    while True:
        last = stop.wait(0.05)
        fetches = len(site.log)  # (the server's count: at least the fetches the state holds)
        with suppress(StoreError, OSError), open_state(path) as state:  # (written yet, replaced?)
            visits, x = state.engine.visit_count, np.zeros(c["total"])
            if not points or visits != points[-1]["visits"]:
                for p in state.pages():
                    x[node(p.url)] = p.importance
                point = {"fetches": fetches, "visits": visits, "removed": x[c["removed"]].sum()}
                points.append(point | {k: tau(x, c[f"{k}_ref"]) for k in ("old", "new")})
        if last:
            return


def crawl_changing(c: dict, window: str, work: Path) -> dict:
    """A continuous crawl of the changing site: its figures (see the module docstring)."""
    n, switch, points, stop = c["n"], BEFORE * c["n"], [], threading.Event()
    removed, new = set(c["removed"].tolist()), set(c["new"].tolist())
    path = work / ".scrapy" / "opic" / "evidence.sqlite"
    settings = {"OPIC_CONTINUOUS": True, "OPIC_WINDOW": window, "CONCURRENT_REQUESTS": 8}
    settings |= {"OPIC_COMMIT_VISITS": max(5, n // 50), "OPIC_COMMIT_SECONDS": 1.0}
    settings["CLOSESPIDER_PAGECOUNT"] = (BEFORE + AFTER) * n
    with ChangingSite(c["before"], c["after"], switch, new, removed, set(c["gone_410"])) as site:
        (tracker := threading.Thread(target=track, args=(path, c, site, points, stop))).start()
        crawl(site.url(c["home"]), "opic", work, **settings)
        stop.set()
        tracker.join()  # (its last point: the state the crawl closed with)
    at = [p for p in points if p["fetches"] <= switch][-1]
    asked = Counter(i for k, i, _ in site.log if k > switch and i in removed).values()
    gone_at = {i: k for k, i, s in reversed(site.log) if i in removed and s in (404, 410)}
    new_at = {i: k - switch for k, i, _ in reversed(site.log) if i in new}
    with open_state(path) as state:
        pages = [p for p in state.pages() if node(p.url) in removed]
    status = Counter(p.status for p in pages)
    curve = [(p["fetches"] - switch, p["old"], p["new"]) for p in points]
    engine = engine_alone(c, window)
    counts = (len(removed) - len(asked), sum(v == 1 for v in asked), sum(v > 1 for v in asked))
    at_2n = next((t for f, _, t in curve if f >= 2 * n), None)  # (the goal's point)
    figures = [at["old"], at["new"], at_2n, reach(curve), reach(engine)]
    figures += [" / ".join(map(str, counts))]
    figures += [sum(k > gone_at.get(i, k) for k, i, _ in site.log)]
    figures += [" / ".join(str(status[s]) for s in ("http_404", "http_410", "ok"))]
    figures += [max((p.cash for p in pages if p.status != "ok"), default=0.0)]
    figures += [at["removed"], points[-1]["removed"], min(new_at.values(), default=None)]
    figures += [max(new_at.values()) if len(new_at) == len(new) else None]
    return dict(zip(RANK[3:] + GONE[3:], figures)) | {"curve": curve, "engine": engine}


def engine_alone(c: dict, window: str) -> list[tuple[int, float]]:
    """The same change in the engine alone (every page known from the start, no HTTP, links to
    removed pages gone): tau against the new graph every N/10 visits after the change."""
    n, s, d = c["n"], c["after"].sources(), c["after"].indices
    sim = Simulation(c["before"], "greedy", window=window, batch=1, seed=1)
    sim.run(BEFORE * n)
    ok = ~np.isin(s, c["removed"]) & ~np.isin(d, c["removed"])
    sim.set_graph(from_edges(s[ok], d[ok], c["total"]))
    curve = [(0, tau(sim.importance(), c["new_ref"]))]
    for k in range(1, 10 * AFTER + 1):
        sim.run(n // 10)
        curve.append((k * (n // 10), tau(sim.importance(), c["new_ref"])))
    return curve


def reach(curve: list[tuple]) -> int | None:
    """Fetches after the change until tau against the new graph (the last figure) is 0.85."""
    return next((f for f, *_, t in curve if f > 0 and t >= GOAL), None)


def plot(rows: list[dict], n: int, path: Path) -> None:
    """Tau against the graph of the moment (the old one before the change, the new one after)
    of each crawl, and of the engine alone (dashed), a colour per window."""
    from matplotlib.figure import Figure

    ax = (fig := Figure(figsize=(8.5, 5), layout="tight")).subplots()
    windows = list(dict.fromkeys(r["window"] for r in rows))
    for r in rows:
        colour = f"C{windows.index(r['window'])}"
        label = f"{r['window']}, seed {r['seed']}, run {r['run']}"
        xs, ys = zip(*[(f / n, old if f <= 0 else new) for f, old, new in r["curve"]])
        ax.plot(xs, ys, lw=1, color=colour, label=f"crawl, {label}")
        if r["run"] == 1:  # (the engine alone is the same every run)
            xs, ys = zip(*[(f / n, t) for f, t in r["engine"]])
            label = f"{r['window']}, seed {r['seed']}"
            ax.plot(xs, ys, "--", lw=0.8, color=colour, label=f"engine alone, {label}")
    ax.axhline(GOAL, color="grey", lw=0.8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set(xlabel=f"fetches after the change (N = {n})", ylabel="Kendall tau", ylim=(0.4, 1.0))
    ax.legend(fontsize=6, loc="lower right", ncol=2)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    windows = ["adaptive:30", "interpolation:30"]
    ap.add_argument("--windows", nargs="+", default=windows, help="OPIC_WINDOW")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--repeats", type=int, default=1, help="crawls per window and seed")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        graph, home = django_graph(Path(tmp))
        changes = {s: change(graph, home, s) for s in args.seeds}
        runs = [(w, s, r) for w in args.windows for s in args.seeds for r in range(args.repeats)]
        for k, (window, seed, run) in enumerate(runs):
            log(f"crawl {k + 1}: {window}, seed {seed}, run {run + 1}")
            figures = crawl_changing(changes[seed], window, Path(tmp) / f"run-{k}")
            rows.append({"window": window, "seed": seed, "run": run + 1, **figures})
    c = changes[args.seeds[0]]
    text = page(
        "A changing site",
        f"The Django manual's graph, N = {graph.n} pages ({graph.n_edges:,} links), changes at "
        f"page request {BEFORE * graph.n:,}: {c['removed'].size} pages removed, {c['new'].size} "
        "new (the method: the docstring of `benchmarks/changing_site.py`).",
        "![tau after the change](changing_site.png)",
        *(table(cols, [[r.get(x) for x in cols] for r in rows]) for cols in (RANK, GONE)),
    )
    write_results("changing_site", {"N": graph.n, "crawls": rows}, text, args.out)
    plot(rows, graph.n, args.out / "changing_site.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
