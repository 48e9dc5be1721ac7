"""The benchmark scripts run end to end on a small graph (so they cannot rot unnoticed)."""

from __future__ import annotations

import importlib
import json
import random
import re

import numpy as np
import pytest

from tests.support.sites import site_graph

pytestmark = pytest.mark.slow


def load(name: str):
    return importlib.import_module(f"benchmarks.{name}")


def test_paper_figures_smoke(tmp_path):
    pytest.importorskip("matplotlib")
    mod = load("paper_figures")
    args = ["--nodes", "1000", "--passes", "3", "--skip-real", "--out", str(tmp_path)]
    assert mod.main(args) == 0
    text = (tmp_path / "paper_figures.md").read_text()
    for heading in ("Fig. 2", "Fig. 3", "Fig. 4", "Fig. 5", "Fig. 6", "cash at visit"):
        assert heading in text
    for png in ("fig2_all_pages.png", "fig3_top10.png", "fig4_window_sizes.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_changing_graph_halves_or_doubles_in_degrees():
    mod = load("paper_figures")
    from scrapy_opic.opic.graph import power_law_graph

    g = power_law_graph(2000, seed=0)
    changed = mod.change(g, 200, np.random.default_rng(1))
    before, after = g.in_degree, changed.in_degree
    moved = before != after
    assert 50 < moved.sum() <= 200 + 400  # the chosen pages, plus a few sources' duplicates
    assert changed.n == g.n


def test_engine_perf_smoke(tmp_path):
    mod = load("engine_perf")
    assert mod.main(["--nodes", "20000", "--events", "2000", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "engine_perf.md").read_text()
    assert "visits/s" in text and "bytes per page" in text


def test_crawl_evidence_builds_the_site_graph_and_pagerank_shares():
    mod = load("crawl_evidence")
    rows = [
        {"url": "a", "aliases": [], "links": ["b", "c", "x-404"]},
        {"url": "b", "aliases": ["b-old"], "links": ["a"]},
        {"url": "c", "aliases": [], "links": ["b-old"]},
    ]
    graph, node = mod.crawled_graph([rows])
    assert graph.n == 3 and node["b-old"] == node["b"]
    assert graph.n_edges == 4  # the 404 link is dropped, the alias folded into b
    pr = np.array([0.5, 0.3, 0.2])
    shares = mod.shares([2, 1, 0], pr)
    assert shares[0] == pytest.approx(0.2) and shares[-1] == pytest.approx(0.5)


def reachable(g) -> int:
    """Pages of ``g`` that a crawl from page 0 reaches."""
    seen, todo = {0}, [0]
    while todo:
        for v in g.children(todo.pop()).tolist():
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return len(seen)


def test_redis_perf_smoke(tmp_path, redis_url):
    pytest.importorskip("redis")
    mod = load("redis_perf")
    args = ["--pages", "120", "--delay", "0.005", "--processes", "1,2", "--memory-pages", "300"]
    assert mod.main([*args, "--repeat", "1", "--redis", redis_url, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "redis_perf.md").read_text()
    assert "round trips/page" in text and "bytes per visited page" in text
    data = json.loads((tmp_path / "redis_perf.json").read_text())
    kinds = ["redis", "control", "control-polite"]
    assert [(r["kind"], r["processes"]) for r in data["fleet"]] == [
        (k, n) for n in (1, 2) for k in kinds
    ]
    for row in data["fleet"]:
        n = row["processes"]
        if row["kind"] == "redis":  # (one crawl of a site of n times the pages)
            assert row["fetches"] == reachable(site_graph(120 * n, seed=7))
            assert abs(row["total_cash"] - 1) < 1e-9
            assert row["redis_cpu_usec_per_page"] > 0 and row["round_trips_per_page"] > 0
        else:  # (n crawls of the site each)
            assert row["fetches"] == n * reachable(site_graph(120, seed=7))
        assert row["crawl_cpu_ms_per_page"] > 0
    (mem,) = data["memory"]
    assert mem["visits"] == 300 and 0 < mem["bytes_per_visited_page"]


def test_scale_crawl_smoke(tmp_path):
    mod = load("scale")
    (tmp_path / "scale.md").write_text("# Scale\n\n## Another mode\n\nkept\n")
    args = ["crawl", "--pages", "60", "--links", "5", "--back", "2", "--repeats", "1"]
    assert mod.main([*args, "--out", str(tmp_path)]) == 0
    text = (tmp_path / "scale.md").read_text()
    assert "## Another mode\n\nkept" in text and "## Fan-out crawl" in text
    assert "OPIC / Scrapy" in text and "`python -m benchmarks.scale crawl --pages 60" in text
    data = json.loads((tmp_path / "scale_crawl.json").read_text())
    assert [r["scheduler"] for r in data["runs"]] == ["scrapy", "opic"]
    assert [len(t) for t in data["tenths"]] == [12, 12]  # (#, scheduler, ten rates)
    for run in data["runs"]:
        assert run["pages"] >= 60 and run["JOBDIR MB"] > 0 and run["RSS grown B/URL"] > 0
        if run["scheduler"] == "opic":  # every tree link is new, every back link is not
            assert run["known URLs"] == 1 + 5 * run["pages"]
        else:  # Scrapy fetches the root (a dont_filter start request) again: one more
            assert 1 + 5 * (run["pages"] - 1) <= run["known URLs"] <= 2 + 5 * run["pages"]


def test_scale_frontier_smoke(tmp_path):
    mod = load("scale")
    (tmp_path / "scale.md").write_text("# Scale\n\n## Another mode\n\nkept\n")
    work = tmp_path / "work"
    args = ["frontier", "--urls", "20000,40000", "--links", "10", "--kill-after", "1"]
    assert mod.main([*args, "--workdir", str(work), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "scale.md").read_text()
    assert "## Another mode\n\nkept" in text and f"## {mod.SECTIONS['frontier']}" in text
    for heading in ("Memory and speed", "Checkpoints", "kill -9", "Resume", "Export"):
        assert f"### {heading}" in text
    data = json.loads((tmp_path / "scale_frontier.json").read_text())
    assert [m["URLs known"] for m in data["memory"]] == [20001, 40001]
    assert [e["CSV rows"] for e in data["exports"]] == [20001, 40001]
    assert {c["kind"] for c in data["checkpoints"]} == {"periodic", "blocking"}
    assert [k["trial"] for k in data["kills"]] == ["mid", "commit"]
    for k in data["kills"]:  # (each driver was killed by SIGKILL, or main raised)
        # Lost: the visits since the checkpoint on disk; none if the one the kill caught landed.
        assert k["lost"] == k["visits done"] - k["on disk at"] or (
            k["trial"] == "commit" and k["lost"] == 0
        ), k
    assert len(data["resumes"]) == 4
    for r in data["resumes"]:  # (the page popped after the resume is in flight)
        assert r["abs(cash - 1)"] < 1e-9 and r["request rows"] == r["pending"] + r["in flight"]
    assert list(work.iterdir()) == []  # the states are gone


def test_scale_web_is_a_tree_with_back_links_to_ancestors():
    mod = load("scale")
    body = mod.page_body(7, links=3, back=5).decode()
    hrefs = re.findall(r'href="([^"]+)"', body)
    pages = [int(h.rsplit("/", 1)[1]) for h in hrefs]
    assert pages == [22, 23, 24, 2, 0]  # children 7*3+1.., then parent 2, grandparent 0 (root)


def test_crawl_cost_smoke(tmp_path, monkeypatch):
    from tests.support.sites import site_graph

    mod = load("crawl_cost")
    g = site_graph(80, seed=0)  # (an edge list in the place of cnr-2000)
    edges = tmp_path / "edges.tsv"
    edges.write_text("".join(f"{i}\t{j}\n" for i in range(g.n) for j in g.children(i)))
    out = tmp_path / "crawl_cost.md"
    args = ["--graph", str(edges), "--seed", "0", "--pages", "40", "--hosts", "2"]
    args += ["--concurrency", "4", "--pairs", "2", "--loop-pages", "20"]
    monkeypatch.setattr("sys.argv", ["crawl_cost.py", *args])  # (the page's command)
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "`python -m benchmarks.crawl_cost --graph" in text
    rows = re.findall(r"^\| ([\w ]+) \|(.*)\|$", text, re.MULTILINE)
    rows = [r for r in rows if r[0] not in ("pair", "mode")]
    # (in memory, with a JOBDIR; then the scheduler alone in both)
    assert [r[0] for r in rows] == ["1", "2", "median"] * 2 + ["in memory", "JOBDIR"]
    assert all(float(x.replace(",", "")) > 0 for _, cells in rows for x in cells.split("|"))


def test_crawl_cost_graph_of_k_links_gives_every_page_k_other_pages():
    g = load("crawl_cost").regular_graph(50, 7, seed=3)
    assert g.n == 50
    for i in range(g.n):
        kids = g.children(i).tolist()
        assert len(set(kids)) == 7 and i not in kids


def test_boost_smoke(tmp_path):
    mod = load("boost")
    out = tmp_path / "boost.md"
    assert mod.main(["--pages", "60", "--boosts", "5", "--first", "10", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| no focus |" in text and "| 5 |" in text and "/10 |" in text


def test_freshness_crawl_smoke(tmp_path):
    mod = load("freshness_crawl")
    out = tmp_path / "freshness_crawl.md"
    args = ["--pages", "80", "--pace", "200", "--set", "OPIC_REFETCH=cash"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text, gaps = out.read_text().split("The report against the server")  # (its two tables)
    assert re.search(r"^\| independent \| defaults \| [+-][\d.]+ \| [+-][\d.]+ \|", gaps, re.M)
    ratio = re.search(r"\| independent \| defaults \| [\d.]+ \| ([\d.]+) \|", text)
    assert ratio and 0.5 < float(ratio.group(1)) <= 1.05  # (freshness over the optimum's)
    # Importance keeps converging while refetches go unevenly (by freshness): its Kendall tau
    # against PageRank is no lower than with refetches by cash alone.
    at = mod.COLUMNS.index("tau") - 2  # (the columns after case and settings)
    tau = {
        (case, sets.strip()): float(row.split("|")[at])
        for case in ("independent", "linked")
        for sets, row in re.findall(rf"^\| {case} \|([^|]+)\|(.*)$", text, re.M)
    }
    for case in ("independent", "linked"):
        assert tau[case, "defaults"] > 0.9
        assert tau[case, "defaults"] >= tau[case, "OPIC_REFETCH=cash"] - 0.02, tau


def test_export_perf_smoke(tmp_path):
    mod = load("export_perf")
    out = tmp_path / "export_perf.md"
    args = ["--nodes", "2000", "--links", "5", "--periodic-pages", "3000"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    per_link = re.search(r"\| the links table \(the difference\) \| [\d,]+ \| ([\d.]+) \|", text)
    assert per_link and 0 < float(per_link.group(1)) < 40
    for run in ("API: load only", "API: stream to CSV", "export CSV", "export JSON Lines"):
        assert f"| {run} | without |" in text
    assert "| pagerank() (scipy) | with links |" in text
    assert "| export CSV with pagerank | with links |" in text


def test_web_order_smoke(tmp_path):
    mod = load("web_order")
    args = ["--graph", "", "--generated", "3000", "--generated-seeds", "1", "--scrapy", "2"]
    assert mod.main([*args, "--runs", "2", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "web_order_scrapy2_delay0_runs2.json").read_text())
    (run,) = data["generated-3000"]
    crawls = data["generated-3000 through scrapy"]
    assert [c["run"] for c in crawls] == [0, 1]
    for crawl in crawls:  # (10% of 3,055 pages, from the log)
        assert crawl["pages"] >= 300 and 0 < crawl["opic"] < 2
    ratios = run["ratios"]
    names = ("bfs", "opic_cash", "opic", "opic/its hosts", "partial_pr", "link_rank/its hosts")
    names += ("link_votes/its hosts", "depth_votes/its hosts")
    for name in (*names, "host_bfs/16 hosts"):
        assert 0 < ratios[name] < 2
    text = (tmp_path / "web_order_scrapy2_delay0_runs2.md").read_text()
    assert "link_rank/its hosts" in text and "## A trap" in text and "site's own calendar" in text
    low, high = sorted(c["opic"] for c in crawls)
    scrapy = text.split("through Scrapy", 1)[1].split("## A trap", 1)[0]
    (row,) = [ln for ln in scrapy.splitlines() if ln.startswith(f"| {run['seed']:,} | ")]
    # The median (three significant digits), then the range (three decimals); the JSON's
    # figures are rounded to four significant digits.
    median, spread = row.split(" | ")[1:3]
    assert float(median) == pytest.approx((low + high) / 2, rel=6e-3)
    assert [float(x) for x in spread.split("-")] == pytest.approx([low, high], abs=1.5e-3)


def test_web_order_draws_with_requests_at_once(tmp_path):
    """The plugin's order with 16 requests out at once: each draw is reproducible from its
    seed, the draws differ, a page is fetched only after a page linking to it; the page shows
    each seed's range of draws."""
    mod = load("web_order")
    graph, _hosts = mod.host_graph(3000)
    g = mod.Crawlable(graph, "small")
    (seed,) = mod.reaching_seeds(g, 1, 300)
    hosts = np.arange(g.n) // 200
    draw = [mod.opic(g, seed, 300, hosts, at_once=16, rng=random.Random(r)) for r in range(4)]
    assert draw[0] == mod.opic(g, seed, 300, hosts, at_once=16, rng=random.Random(0))
    assert len({tuple(d) for d in draw}) > 1
    one = mod.opic(g, seed, 300, hosts)
    for order in (*draw, one):
        assert len(order) == len(set(order)) == 300 and order[0] == seed
        for k, i in enumerate(order[1:], 1):  # (a page is known once a parent's answer is)
            assert set(g.src[g.dst == i].tolist()) & set(order[:k]), i
    args = ["--graph", "", "--generated", "3000", "--generated-seeds", "1", "--draws", "3"]
    assert mod.main([*args, "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "web_order_draws3.json").read_text())
    got = data["generated-3000 draws"]
    assert {d["hosts"] for d in got} == {"its hosts", "16 hosts"}
    text = (tmp_path / "web_order_draws3.md").read_text()
    section = text.split("16 requests at once", 1)[1]
    for d in got:
        low, high = min(d["ratios"]), max(d["ratios"])
        (row,) = [
            ln for ln in section.splitlines() if ln.startswith(f"| {d['seed']:,} | {d['hosts']} |")
        ]
        assert [float(x) for x in row.strip("| ").split(" | ")[4].split("-")] == pytest.approx(
            [low, high], abs=1.5e-3
        )


def test_web_order_fleet_smoke(tmp_path, redis_url):
    """The same crawl through Scrapy by two processes sharing it on Redis: the pages come from
    the server's log, and the fleet's keys are gone after."""
    import redis

    mod = load("web_order")
    args = ["--graph", "", "--generated", "3000", "--generated-seeds", "1", "--scrapy", "2"]
    args += ["--fleet", "2", "--redis-url", redis_url, "--out", str(tmp_path)]
    assert mod.main(args) == 0
    data = json.loads((tmp_path / "web_order_scrapy2_delay0_fleet2.json").read_text())
    (crawl,) = data["generated-3000 through scrapy"]
    assert crawl["pages"] >= 300 and 0 < crawl["opic"] < 2
    assert not list(redis.Redis.from_url(redis_url).scan_iter(match="opic-web-order-*"))


def test_web_order_link_rank_pushed_out_solves_its_linear_system(monkeypatch):
    """Every page fetched and every residual pushed: rank = (1 - ALPHA) + ALPHA * (the rank of
    each page linking to it over that page's out-degree), for every page."""
    mod = load("web_order")
    monkeypatch.setattr(mod, "THETA", 1e-12)
    from scrapy_opic.opic.graph import power_law_graph

    g = mod.Crawlable(power_law_graph(300, seed=2), "small")
    est = mod.LinkRank(g)
    for i in np.random.default_rng(0).permutation(g.n):
        est.fetch(int(i))
    x = est.rank + est.residual
    expected = (1 - mod.ALPHA) + mod.ALPHA * np.bincount(
        g.dst, weights=(x / np.maximum(g.graph.out_degree, 1))[g.src], minlength=g.n
    )
    assert np.allclose(x, expected, rtol=1e-6, atol=1e-9)
    assert est.residual.max() < 1e-9 * x.max() + 1e-12


def test_web_order_link_votes_pass_on_once_what_came_before_the_fetch():
    """Without pushes, a page passes on, at its fetch, ``1 - ALPHA`` and what the pages
    fetched before it passed to it (damping ``ALPHA``), and nothing that comes later."""
    mod = load("web_order")
    from scrapy_opic.opic.graph import power_law_graph

    g = mod.Crawlable(power_law_graph(300, seed=2), "small")
    est = mod.LinkRank(g, push=False)
    order = [int(i) for i in np.random.default_rng(0).permutation(g.n)]
    for i in order:
        est.fetch(i)
    when = {i: k for k, i in enumerate(order)}
    deg = np.maximum(g.graph.out_degree, 1)
    for j in range(g.n):
        before = [i for i in range(g.n) if j in g.kids(i) and when[i] < when[j]]
        got = (1 - mod.ALPHA) + sum(mod.ALPHA * est.rank[i] / deg[i] for i in before)
        assert est.rank[j] == pytest.approx(got, rel=1e-9)


def test_web_order_depth_is_the_fewest_links_from_the_seed():
    """Pages fetched breadth-first from the seed: each page's depth is its distance from the
    seed (the fewest links), which ``depth_votes`` discounts its votes by."""
    mod = load("web_order")
    from scrapy_opic.opic.graph import power_law_graph

    g = mod.Crawlable(power_law_graph(300, seed=2), "small")
    est = mod.LinkRank(g, push=False)
    est.depth[0] = 0
    order = mod.bfs(g, 0, g.n)
    for i in order:
        est.fetch(i)
    distance = {0: 0}
    for i in order:  # (breadth-first: a page's parents at the smallest distance come first)
        for j in g.kids(i):
            distance.setdefault(j, distance[i] + 1)
    assert {j: int(est.depth[j]) for j in distance} == distance


def test_web_order_host_turns_share_fetches_evenly():
    """Two hosts reachable from the seed, the seed's host with 60 pages in sight at once and the
    other a chain discovered a page at a time: while both have pages to fetch, their fetch
    counts differ by at most one (breadth-first alone would fetch the 60 first)."""
    mod = load("web_order")
    from scrapy_opic.opic.graph import from_edges

    src = [0] * 61 + list(range(61, 160))
    dst = list(range(1, 62)) + list(range(62, 161))  # 0 -> 1..61; 61 -> 62 -> ... -> 160
    g = mod.Crawlable(from_edges(np.array(src), np.array(dst), 161), "two")
    hosts = np.array([0] * 61 + [1] * 100)
    order = mod.host_bfs(g, 0, 100, hosts)
    lead = np.cumsum(np.where(hosts[order] == 0, 1, -1))  # host 0's fetches over host 1's
    assert len(order) == 100 and set(lead[:100].tolist()) == {0, 1}
    assert mod.host_bfs(g, 0, 100, None)[:61] == list(range(61))  # (breadth-first: host 0 first)
