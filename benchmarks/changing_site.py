"""A changing site: a continuous Scrapy crawl of a site that changes under it, judged against the
exact PageRank of the site before and after the change.

    python -m benchmarks.changing_site [--out benchmarks/results] [--windows W [W ...]]
                                       [--before 3] [--after 4] [--seed 1]

The site is the Django manual's link graph (Debian's python-django-doc, as in
``crawl_evidence.py``: a one-pass crawl of the manual gives its pages and in-site links, N = 691)
served one page per node by a generated site on 127.0.0.1 (``tests.support.sites.ChangingSite``): a
real manual's structure (navigation hubs, prev/next chains, a long tail), and a server that
knows the graph exactly at every request and can change it at a chosen moment, which rewriting
the manual's HTML files could not do atomically.

The change, applied by the server at its ``before * N``-th page request (estimates have
converged by then), atomically:

* **a tenth of the pages removed** (never the home page): two thirds answer 404, one third 410.
  Half of the links to them are taken out of the pages that had them, the other half stay as
  broken links;
* **a new section** of N/10 pages: the home page links to its index page, which links to every
  page of the section; the section's pages link to each other (a power-law graph), to the
  section index, to the home page and to two old pages each;
* **links moved**: a fifth of the remaining links get a new target, an old page drawn with
  probability proportional to its in-degree + 1.

The crawl (our scheduler and middlewares, continuous, 8 concurrent requests, a commit every
N/50 visits) runs ``(before + after) * N`` fetches. A thread reads the state file while the
crawl runs (``open_state``: the state is in WAL mode while a crawl has it) and, at every new
commit, computes Kendall tau between the exported importance (0 for a page the crawl does not
know yet) and the exact PageRank (damping 0.85) of the old graph (pages with in-links in it)
and of the new one (pages with in-links in it; removed pages are no pages, broken links no
links). Fetches are counted in the snapshot: visits plus pages closed. From the server's
access log: every removed page's requests after the change and after its first 404/410, and
when the new section was discovered.

Beside each crawl, the same change in the engine alone (``Simulation``, every page known from
the start, no HTTP): what the estimator's window costs, without the crawl's discovery.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from benchmarks._harness import save_figure, write_results
from benchmarks.crawl_evidence import DOCS, crawl, crawled_graph, ensure_docs, log
from scrapy_opic._backends import StoreError
from scrapy_opic.export import open_state
from scrapy_opic.opic.graph import Graph, from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank
from scrapy_opic.simulator.simulation import Simulation
from tests.support.sites import ChangingSite, StaticSite

ROOT = Path(__file__).resolve().parent
GOAL = 0.85
#: Every how many points of a crawl's curve the results JSON keeps (the plot has them all).
CURVE_STEP = 3
WINDOWS = ("interpolation:30",)
DROPS = "tau new drops > 0.01 in one commit, fetches after the change"
INDEX = "section index visited, fetches after the change"


# ----------------------------------------------------------------------------- the site
def django_graph(work: Path) -> tuple[Graph, int]:
    """The Django manual's crawled graph (pages and in-site links) and its home page's id. Pages
    are numbered in the order of their URLs, not of the crawl, so that a seed draws the same
    change in every run."""
    package, subdir = DOCS["Django docs"]
    html = ensure_docs(package, subdir)
    with StaticSite(html) as site:
        start = site.url("index.html")
        rows, _ = crawl(start, "opic", work / "django-one-pass")
    graph, node = crawled_graph([rows])
    url_of = {i: u for u, i in sorted(node.items(), reverse=True)}  # its smallest URL
    rank = np.empty(graph.n, dtype=np.int64)
    rank[sorted(range(graph.n), key=url_of.__getitem__)] = np.arange(graph.n)
    graph = from_edges(rank[graph.sources()], rank[graph.indices], graph.n)
    return graph, int(rank[node[start]])


def change(graph: Graph, home: int, seed: int) -> dict:
    """The site before and after the change, on the same node ids (old pages, then the new
    section's), and the reference graphs PageRank is computed on."""
    rng = np.random.default_rng(seed)
    n = graph.n
    m = round(0.1 * n)
    total = n + m
    others = np.setdiff1d(np.arange(n), [home])
    removed = np.sort(rng.choice(others, round(0.1 * n), replace=False))
    gone_410 = removed[rng.random(removed.size) < 1 / 3]
    dead = np.zeros(total, dtype=bool)
    dead[removed] = True
    src, dst = graph.sources(), graph.indices.astype(np.int64)
    before = from_edges(src, dst, total)
    keep = ~dead[src]  # a removed page's own links are gone with it
    src, dst = src[keep], dst[keep]
    broken = dead[dst]
    taken_out = broken & (rng.random(dst.size) < 0.5)  # half the links to them taken out
    src, dst = src[~taken_out], dst[~taken_out].copy()
    live_old = np.flatnonzero(~dead[:n])
    moved = ~dead[dst] & (rng.random(dst.size) < 0.2)
    weight = np.bincount(dst, minlength=total)[live_old] + 1.0
    dst[moved] = rng.choice(live_old, int(moved.sum()), p=weight / weight.sum())
    # The new section: its index (node n) is linked from the home page.
    index, pages = n, np.arange(n + 1, total)
    inner = power_law_graph(pages.size, seed=seed)
    s_src = [[home], np.full(pages.size, index), pages, pages]
    s_dst = [[index], pages, np.full(pages.size, index), np.full(pages.size, home)]
    s_src += [n + 1 + inner.sources(), np.repeat(pages, 2)]
    s_dst += [n + 1 + inner.indices.astype(np.int64), rng.choice(live_old, 2 * pages.size)]
    after = from_edges(
        np.concatenate([src, *map(np.asarray, s_src)]),
        np.concatenate([dst, *map(np.asarray, s_dst)]),
        total,
    )
    new_ref = reference(after, ~dead)
    old_alive = np.zeros(total, dtype=bool)
    old_alive[:n] = True
    old_ref = reference(before, old_alive)
    return {
        "seed": seed,
        "stale tau": stale_tau(old_ref, new_ref),
        "n": n,
        "total": total,
        "home": home,
        "before": before,
        "after": after,
        "removed": removed,
        "gone_410": gone_410,
        "new": np.arange(n, total),
        "old_ref": old_ref,
        "new_ref": new_ref,
        "links moved": int(moved.sum()),
        "broken links left": int((broken & ~taken_out).sum()),
        "links taken out": int(taken_out.sum()),
    }


def stale_tau(old_ref: dict, new_ref: dict) -> float:
    """Kendall tau of the old PageRank against the new one, over the old pages with in-links
    in both graphs: how much the change reorders the pages that stay."""
    old = dict(zip(old_ref["ids"][old_ref["linked"]].tolist(), old_ref["pr"][old_ref["linked"]]))
    new = dict(zip(new_ref["ids"][new_ref["linked"]].tolist(), new_ref["pr"][new_ref["linked"]]))
    both = sorted(old.keys() & new.keys())
    return float(kendalltau([old[i] for i in both], [new[i] for i in both]).statistic)


def reference(served: Graph, alive: np.ndarray) -> dict:
    """PageRank of the pages that exist (``alive``) and the links between them: a link to a
    page that does not exist is no link, as the crawler treats a closed page."""
    ids = np.flatnonzero(alive)
    dense = np.full(served.n, -1)
    dense[ids] = np.arange(ids.size)
    s, d = served.sources(), served.indices
    ok = alive[s] & alive[d]
    g = from_edges(dense[s[ok]], dense[d[ok]], ids.size)
    return {"ids": ids, "graph": g, "pr": pagerank(g, 0.85), "linked": g.in_degree > 0}


def tau(x: np.ndarray, ref: dict) -> float:
    """Kendall tau of ``x`` (by node id) against ``ref``'s PageRank, pages with in-links."""
    xs = x[ref["ids"]][ref["linked"]]
    return float(kendalltau(xs, ref["pr"][ref["linked"]]).statistic)


def node_of(url: str) -> int:
    return int(url.rsplit("/", 1)[1].removesuffix(".html"))


# ----------------------------------------------------------------------------- the tracker
class Tracker(threading.Thread):
    """Reads the crawl's state at every new commit and records the figures of each snapshot."""

    def __init__(self, path: Path, site: ChangingSite, change: dict) -> None:
        super().__init__(daemon=True)
        self.path, self.site, self.change = path, site, change
        self.points: list[dict] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last = -1
        while not self.stop.is_set():
            try:
                point = self.read(last)
            except (StoreError, OSError):
                point = None  # not written yet, or being replaced: read again
            if point is not None:
                last = point["visits"]
                self.points.append(point)
            self.stop.wait(0.05)

    def read(self, last: int) -> dict | None:
        c = self.change
        hits = len(self.site.log)
        with open_state(self.path) as state:
            e = state.engine
            if e.visit_count == last:
                return None
            x = np.zeros(c["total"])
            status, index_visits = {}, 0
            for p in state.pages():
                i = node_of(p.url)
                x[i] = p.importance
                status[i] = p.status
                if i == c["n"]:  # the new section's index page
                    index_visits = p.visits
            scalars = (e.visit_count, e.G)
        removed, new = c["removed"], c["new"]
        top = np.argsort(-x)[: max(1, len(status) // 10)]  # the export's top 10%
        return {
            "visits": scalars[0],
            "fetches": scalars[0],  # a failed fetch (a 404) is a visit with no links too
            "server requests": hits,
            "G": scalars[1],
            "tau new": tau(x, c["new_ref"]),
            "tau old": tau(x, c["old_ref"]),
            "removed importance": float(x[removed].sum()),
            "removed closed": sum(
                status.get(int(i), "") in ("http_404", "http_410") for i in removed
            ),
            "removed in the top 10%": int(np.isin(top, removed).sum()),
            "new known": sum(int(i) in status for i in new),
            "new fetched": sum(status.get(int(i)) == "ok" for i in new),
            "new importance": float(x[new].sum()),
            "section index visits": index_visits,
            "new PageRank": float(c["new_ref"]["pr"][np.isin(c["new_ref"]["ids"], new)].sum()),
        }


# ----------------------------------------------------------------------------- one crawl
def crawl_changing(c: dict, window: str, before: int, after: int, work: Path) -> dict:
    """One continuous crawl of the changing site; its figures (see :func:`summarise`)."""
    n = c["n"]
    switch = before * n
    with ChangingSite(
        c["before"],
        c["after"],
        switch,
        new=set(c["new"].tolist()),
        removed=set(c["removed"].tolist()),
        gone_410=set(c["gone_410"].tolist()),
    ) as site:
        tracker = Tracker(work / ".scrapy" / "opic" / "evidence.sqlite", site, c)
        tracker.start()
        t0 = time.perf_counter()
        _, stats = crawl(
            site.url(c["home"]),
            "opic",
            work,
            OPIC_CONTINUOUS=True,
            OPIC_WINDOW=window,
            OPIC_COMMIT_VISITS=max(5, n // 50),
            OPIC_COMMIT_SECONDS=1.0,
            CLOSESPIDER_PAGECOUNT=(before + after) * n,
            CONCURRENT_REQUESTS=8,
        )
        seconds = time.perf_counter() - t0
        tracker.stop.set()
        tracker.join()
        final = tracker.read(-1)  # the state the crawl closed with
        log_ = list(site.log)
    points = tracker.points + [final]
    with open_state(work / ".scrapy" / "opic" / "evidence.sqlite") as state:
        pages = {node_of(p.url): p for p in state.pages()}
    return summarise(c, window, switch, points, log_, pages, stats, seconds)


def summarise(c, window, switch, points, access, pages, stats, seconds) -> dict:
    n = c["n"]
    points = sorted(points, key=lambda p: p["fetches"])
    after = [p for p in points if p["fetches"] > switch]
    prior = [p for p in points if p["fetches"] <= switch]
    reach = next((p["fetches"] - switch for p in after if p["tau new"] >= GOAL), None)
    below = [p for p in after if p["tau new"] < GOAL]
    stays = (below[-1]["fetches"] - switch if below else 0) if reach is not None else None
    if below and below[-1] is after[-1]:
        stays = None
    # Access log: removed pages after the change, and after their first 404/410.
    removed = set(c["removed"].tolist())
    per_page = {i: {"after change": 0, "after its 404/410": 0} for i in removed}
    seen_gone: set[int] = set()
    for ordinal, i, status in access:
        if i in removed and ordinal > switch:
            per_page[i]["after change"] += 1
            if i in seen_gone:
                per_page[i]["after its 404/410"] += 1
            if status in (404, 410):
                seen_gone.add(i)
    counts = [v["after change"] for v in per_page.values()]
    in_links = c["after"].in_degree  # broken links to a removed page, after the change
    unasked = [i for i, v in per_page.items() if v["after change"] == 0]
    new = set(c["new"].tolist())
    first_new, all_new, got = None, None, set()
    for ordinal, i, _ in access:
        if i in new and ordinal > switch:
            got.add(i)
            first_new = first_new or ordinal - switch
            if len(got) == len(new) and all_new is None:
                all_new = ordinal - switch
    final_status = {}
    for i in removed:
        p = pages.get(i)
        st = p.status if p else "unknown"
        final_status[st] = final_status.get(st, 0) + 1
    closed = [pages[i] for i in removed if i in pages and pages[i].status != "ok"]
    closed_cash = max((p.cash for p in closed), default=0.0)
    g_rate = [p for p in prior if p["fetches"] >= n]  # G per fetch once the site is known
    g_per_n = (
        n * (prior[-1]["G"] - g_rate[0]["G"]) / (prior[-1]["fetches"] - g_rate[0]["fetches"])
        if len(g_rate) > 1
        else None
    )
    return {
        "window": window,
        "seed": c["seed"],
        "tau of the old PageRank against the new (old pages)": c["stale tau"],
        "links moved, taken out, left broken": [
            c["links moved"],
            c["links taken out"],
            c["broken links left"],
        ],
        "seconds": round(seconds, 1),
        "fetches": points[-1]["fetches"],
        "server requests": len(access),
        "change at request": switch,
        "tau old, at the change": prior[-1]["tau old"] if prior else None,
        "tau new, at the change": prior[-1]["tau new"] if prior else None,
        "fetches after the change to tau new >= 0.85": reach,
        "fetches after the change from which tau new stays >= 0.85": stays,
        "tau new at 1N, 2N, 3N after": [at(after, switch + k * n, "tau new") for k in (1, 2, 3)],
        "tau new at the end": points[-1]["tau new"],
        "G per N fetches (before the change)": g_per_n,
        "removed pages": len(removed),
        "removed pages requested after the change (0, 1, 2+ times)": [
            counts.count(0),
            counts.count(1),
            sum(k >= 2 for k in counts),
        ],
        "max requests of a removed page after the change": max(counts),
        "broken links to each removed page never asked for again": [
            int(in_links[i]) for i in unasked
        ],
        "requests of removed pages after their 404/410": sum(
            v["after its 404/410"] for v in per_page.values()
        ),
        "removed pages' final status": final_status,
        "max cash of a closed removed page": closed_cash,
        "removed pages' importance at the change, at the end": [
            prior[-1]["removed importance"] if prior else None,
            points[-1]["removed importance"],
        ],
        "removed pages in the export's top 10% at the end": points[-1]["removed in the top 10%"],
        "new pages": len(new),
        "first new page requested, fetches after the change": first_new,
        "every new page requested, fetches after the change": all_new,
        "new pages requested": len(got),
        "new pages' importance / PageRank at the end": points[-1]["new importance"]
        / points[-1]["new PageRank"],
        DROPS: [
            b["fetches"] - switch
            for a, b in zip(after, after[1:])
            if b["tau new"] - a["tau new"] < -0.01
        ],
        INDEX: [
            b["fetches"] - switch
            for a, b in zip(prior[-1:] + after, after)
            if b["section index visits"] != a["section index visits"]
        ],
        "total cash": stats.get("opic/total_cash"),
        "curve": [
            {
                "fetches after change": p["fetches"] - switch,
                **{k: p[k] for k in ("server requests", "tau new", "tau old")},
                **{k: p[k] for k in ("removed importance", "removed closed", "new fetched")},
                "removed in the top 10%": p["removed in the top 10%"],
                "section index visits": p["section index visits"],
            }
            for p in points
        ],
    }


def at(points: list[dict], fetches: int, key: str) -> float | None:
    """``key`` in the last snapshot at or before ``fetches``."""
    before = [p for p in points if p["fetches"] <= fetches]
    return before[-1][key] if before else None


# ----------------------------------------------------------------------------- the engine alone
def simulate(c: dict, window: str, before: int, after: int) -> list[tuple[float, float]]:
    """The same change in the engine alone (every page known from the start, no HTTP, links to
    removed pages gone, the new pages unlinked before the change): tau against the new graph
    every N/10 visits after the change."""
    dead = np.zeros(c["total"], dtype=bool)
    dead[c["removed"]] = True
    s, d = c["after"].sources(), c["after"].indices
    ok = ~dead[s] & ~dead[d]
    after_graph = from_edges(s[ok], d[ok], c["total"])
    sim = Simulation(c["before"], "greedy", 0.15, window=window, batch=1, seed=1)
    n = c["n"]
    sim.run(before * n)
    sim.set_graph(after_graph)
    out = [(0.0, tau(sim.importance(), c["new_ref"]))]
    for k in range(1, 10 * after + 1):
        sim.run(n // 10)
        out.append((k / 10, tau(sim.importance(), c["new_ref"])))
    return out


# ----------------------------------------------------------------------------- report
def snapshots(r: dict) -> list[dict]:
    """A crawl's snapshots, one dict each (the JSON file keeps them as columns)."""
    c = r["curve"]
    return c if isinstance(c, list) else [dict(zip(c, row)) for row in zip(*c.values())]


def label(r: dict) -> str:
    return f"{r['window']}, seed {r['seed']}" + (f", run {r['run']}" if r.get("run") else "")


def plot(results: list[dict], sims: dict, n: int, path: Path) -> None:
    """Tau against the graph the site has at each moment (the old one before the change, the
    new one after), per crawl; against the old graph after the change for the first crawl;
    and the engine alone after the change, dashed, in its window's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = results[0]["window"]
    others = [w for w in dict.fromkeys(r["window"] for r in results) if w != first]
    colours = dict(zip(others, ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]))
    blues = ["tab:blue", "navy", "deepskyblue", "steelblue", "slateblue"]
    seeds = list(dict.fromkeys(r["seed"] for r in results))
    fig, ax = plt.subplots(figsize=(8.5, 5))
    for r in results:
        points = snapshots(r)
        xs = [p["fetches after change"] / n for p in points]
        ys = [p["tau old" if x <= 0 else "tau new"] for x, p in zip(xs, points)]
        colour = colours.get(r["window"]) or blues[seeds.index(r["seed"]) % len(blues)]
        repeat = r.get("run", 1) > 1
        ax.plot(xs, ys, lw=0.7 if repeat else 1.2, color=colour, label=None if repeat else
                f"crawl, {r['window']}, seed {r['seed']}")  # fmt: skip
        if r is results[0]:
            post = [(x, p["tau old"]) for x, p in zip(xs, points) if x > 0]
            ax.plot(*zip(*post), ls=":", color=colour, label=f"crawl, {label(r)}: old graph")
    for name, curve in sims.items():
        window = name.split(",")[0]
        colour = colours.get(window, blues[0])
        ax.plot(*zip(*curve), ls="--", lw=0.8, color=colour, label=f"engine alone, {name}")
    ax.axhline(GOAL, color="grey", lw=0.8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("fetches after the change (N)")
    ax.set_ylabel("Kendall tau against the site's PageRank (pages with in-links)")
    ax.set_title(f"Continuous crawl of a changing site (the Django manual's graph, N = {n})")
    ax.set_ylim(0.4, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, loc="lower left", ncol=2)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return ", ".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in sorted(v.items()))
    return "—" if v is None else str(v)


def report(data: dict) -> str:
    c, results, n = data["site"], data["crawls"], data["site"]["N"]
    lines = [
        "# A changing site",
        "",
        "Generated by `"
        + " ".join(["python -m benchmarks.changing_site", data["command"]]).strip()
        + "`.",
        "",
        "A continuous crawl (our scheduler and middlewares, 8 concurrent requests) of the Django "
        f"manual's link graph served on 127.0.0.1 (N = {n} pages, {c['links']:,} links; "
        "`tests.support.sites.ChangingSite`), which changes at the server's "
        f"{c['change at request']:,}th page request ({data['before']}N fetches): "
        f"{c['removed']} pages removed (a third answer 410, the others 404; half the links to "
        f"them taken out, the others left as broken links), a new section of {c['new pages']} "
        "pages linked from the home page, a fifth of the links moved to other targets. Kendall "
        "tau (pages with in-links) of the exported importance, read from the state file at "
        "every commit (every N/50 visits) while the crawl runs, against the exact PageRank "
        "(damping 0.85) of the new graph (removed pages are no pages, broken links no links) "
        "and of the old one. A page the crawl does not know yet counts with importance 0. "
        "Fetches are the crawl's own count in each snapshot (visits, a 404 included). The "
        "seed draws the change (which pages, links) and the crawl's jitter differs per run.",
        "",
        f"![tau after the change]({data['png']})",
        "",
        "| | " + " | ".join(label(r) for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    keys = [k for k in results[0] if k not in ("window", "seed", "run", "curve")]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(fmt(r[k]) for r in results) + " |")
    gpn = results[0]["G per N fetches (before the change)"]
    drops = [(d, r) for r in results for d in r[DROPS]]
    at_index = sum(d in r[INDEX] for d, r in drops)
    lines += [
        "",
        f"Reading the table. **Dips**: {at_index} of the {len(drops)} drops of tau by more than "
        "0.01 in one commit come at a visit of the new section's index page (the two rows "
        "before the total cash: the fetch of each drop, and of each visit of the index); the "
        "index links to every page of the section, which are fetched rarely (low PageRank), so "
        "their estimates rest on the credit received since their one visit, and the index's "
        "credit reaches them all in one lump. **Removed pages** are closed at their 404/410 and"
        " never asked for again; the few never asked for after the change are pages of low "
        "importance that few or no links still point to (a crawler learns that a page is gone "
        "only by asking for it). A closed page keeps the importance it had earned "
        "(`OpicEngine.kill` keeps its history): it fades as the window forgets it "
        f"(interpolation:30 is 30 units of G, about {30 / gpn:.1f}N fetches at {gpn:.2f} G per "
        "N), never with the unbounded history; the rows on removed pages' importance and the "
        "top 10% show what is left.",
    ]
    sims = data["engine alone"]
    lines += [
        "",
        f"## Tau against the new graph, every N/10 = {n // 10} fetches after the change",
        "",
        "Crawl: the last snapshot at or before that many fetches. Engine alone: "
        "`Simulation` (greedy, one page per step) of the same graphs, every page known "
        "from the start, no HTTP: what the estimator's window costs by itself.",
        "",
        "| fetches after | "
        + " | ".join(f"crawl {label(r)}" for r in results)
        + " | "
        + " | ".join(f"engine {w}" for w in sims)
        + " |",
        "|---|" + "---|" * (len(results) + len(sims)),
    ]
    for k in range(0, 10 * data["after"] + 1):
        row = [f"{k / 10:.1f}N"]
        for r in results:
            pts = [p for p in snapshots(r) if p["fetches after change"] <= k * n // 10]
            row.append(f"{pts[-1]['tau new']:.3f}" if pts else "—")
        for curve in sims.values():
            row.append(f"{curve[k][1]:.3f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument(
        "--windows",
        nargs="+",
        default=list(WINDOWS),
        help="OPIC_WINDOW of each crawl; the first is run with every seed (--repeats times), "
        "the others once with the first seed",
    )
    ap.add_argument("--repeats", type=int, default=1, help="crawls per seed, first window")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--before", type=int, default=3, help="N fetches before the change")
    ap.add_argument("--after", type=int, default=4, help="N fetches after the change")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs = [(args.windows[0], s, k + 1) for s in args.seeds for k in range(args.repeats)]
    runs += [(w, args.seeds[0], 1) for w in args.windows[1:]]
    results, sims = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        graph, home = django_graph(work)
        changes = {s: change(graph, home, s) for s in args.seeds}
        n = graph.n
        log(f"Django graph: N={n}, {graph.n_edges} links")
        for k, (window, seed, repeat) in enumerate(runs):
            c = changes[seed]
            log(f"crawl, window {window}, seed {seed} (stale tau {c['stale tau']:.3f})")
            wd = work / f"run-{k}"
            r = crawl_changing(c, window, args.before, args.after, wd)
            log(f"  { ({k: v for k, v in r.items() if k != 'curve'}) }")
            if args.repeats > 1 and window == args.windows[0]:
                r["run"] = repeat
            results.append(r)
            if seed == args.seeds[0] and repeat == 1:
                sims[f"{window}, seed {seed}"] = sim = simulate(c, window, args.before, args.after)
                log(f"  engine alone: {[f'{t:.3f}' for _, t in sim[::10]]}")
    args.out.mkdir(parents=True, exist_ok=True)
    png = "changing_site.png"
    plot(results, sims, n, args.out / png)
    c = changes[args.seeds[0]]
    data = {
        "command": " ".join(argv if argv is not None else sys.argv[1:]),
        "windows": args.windows,
        "seeds": args.seeds,
        "before": args.before,
        "after": args.after,
        "png": png,
        "site": {
            "N": n,
            "links": graph.n_edges,
            "change at request": args.before * n,
            "removed": int(c["removed"].size),
            "new pages": int(c["new"].size),
        },
        "crawls": results,
        "engine alone": sims,
        "seconds": round(time.perf_counter() - t0),
    }
    for r in results:  # one list per column, every other point: a small file
        r["curve"] = {k: [p[k] for p in r["curve"][::CURVE_STEP]] for k in r["curve"][0]}
    text = report(data) + f"\n_Total time: {data['seconds']} s._\n"
    write_results("changing_site", data, text, args.out)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
