"""The benchmark scripts run end to end on a small graph (so they cannot rot unnoticed)."""

from __future__ import annotations

import importlib
import json
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
    changed = mod.ChangingGraph(g, seed=1).change(200)
    before, after = g.in_degree, changed.in_degree
    moved = before != after
    assert 50 < moved.sum() <= 200 + 400  # the chosen pages, plus a few sources' duplicates
    assert changed.n == g.n


def test_engine_perf_smoke(tmp_path):
    mod = load("engine_perf")
    out = tmp_path / "perf.md"
    assert mod.main(["--nodes", "20000", "--events", "2000", "--out", str(out)]) == 0
    text = out.read_text()
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
    out = tmp_path / "scale.md"
    out.write_text("# Scale\n\n## Another mode\n\nkept\n")
    args = ["crawl", "--pages", "60", "--links", "5", "--back", "2", "--repeats", "1"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Another mode\n\nkept" in text and "## Fan-out crawl" in text
    assert "OPIC / Scrapy" in text and "python -m benchmarks.scale crawl --pages 60" in text
    runs = json.loads((tmp_path / "scale.json").read_text())["crawl"]["runs"]
    assert [r["scheduler"] for r in runs] == ["scrapy", "opic"]
    for run in runs:
        assert run["responses"] >= 60 and len(run["tenth_rates"]) == 10
        if run["scheduler"] == "opic":  # every tree link is new, every back link is not
            assert run["known"] == 1 + 5 * run["parsed"]
        else:  # Scrapy fetches the root (a dont_filter start request) again: one more
            assert 1 + 5 * (run["parsed"] - 1) <= run["known"] <= 2 + 5 * run["parsed"]
        assert run["filtered"] > 0 and run["jobdir_bytes"] > 0
        assert run["peak_rss"] >= run["baseline_rss"] > 0


def test_scale_frontier_smoke(tmp_path):
    mod = load("scale")
    out = tmp_path / "scale.md"
    out.write_text("# Scale\n\n## Another mode\n\nkept\n")
    work = tmp_path / "work"
    args = ["frontier", "--urls", "5000,20000", "--links", "10", "--kill-after", "1"]
    args += ["--kill-urls", "20000"]
    assert mod.main([*args, "--workdir", str(work), "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Another mode\n\nkept" in text and f"## {mod.FRONTIER_TITLE}" in text
    for heading in ("Goals", "Memory", "Speed", "Checkpoints", "kill -9", "Resume", "Export"):
        assert f"### {heading}" in text
    data = json.loads((tmp_path / "scale.json").read_text())["frontier"]
    assert [s["drive"]["urls"] for s in data["sizes"]] == [5001, 20001]
    for size in data["sizes"]:
        drive, back = size["drive"], size["resume"]
        assert len(drive["deciles"]) == 10 and drive["rss_end"] >= drive["rss_before"] > 0
        assert any(c["blocking"] for c in drive["commits"]) and drive["commits_total"]["count"]
        assert back["lease"] and back["n"] == drive["urls"] and abs(back["total_cash"] - 1) < 1e-9
        assert size["csv"]["rows"] == drive["urls"] and size["top"]["rows"] == 25
    assert [k["when"] for k in data["kills"]] == ["mid", "commit"]
    for k in data["kills"]:
        assert k["returncode"] == -9 and abs(k["resume"]["total_cash"] - 1) < 1e-9
        assert 0 <= k["lost_visits"] <= k["commit_visits"]
        counts = k["resume"]["counts"]  # (the page popped after the resume is in flight)
        assert k["resume"]["request_rows"] == counts["pending"] + counts["in_flight"]
    assert list(work.iterdir()) == []  # the states are gone


def test_scale_web_is_a_tree_with_back_links_to_ancestors():
    mod = load("scale")
    body = mod.page_body(7, links=3, back=5).decode()
    hrefs = re.findall(r'href="([^"]+)"', body)
    pages = [int(h.rsplit("/", 1)[1]) for h in hrefs]
    assert pages == [22, 23, 24, 2, 0]  # children 7*3+1.., then parent 2, grandparent 0 (root)
    assert mod.page_url(5, hosts=3) == "http://h2.web.test/p/5"


def test_crawl_cost_smoke(tmp_path):
    mod = load("crawl_cost")
    out = tmp_path / "crawl_cost.md"
    args = ["--pages", "60", "--hosts", "2", "--concurrency", "4", "--repeats", "2"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "python -m benchmarks.crawl_cost --pages 60 --hosts 2" in text
    rows = [ln for ln in text.splitlines() if re.match(r"\| \d \|", ln)]
    assert len(rows) == 2 and "Median pages/s ratio" in text and "median CPU ratio" in text


def test_boost_smoke(tmp_path):
    mod = load("boost")
    out = tmp_path / "boost.md"
    assert mod.main(["--pages", "60", "--boosts", "5", "--first", "10", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| no focus |" in text and "| 5 |" in text and "/10 |" in text


def test_freshness_crawl_smoke(tmp_path):
    mod = load("freshness_crawl")
    out = tmp_path / "freshness_crawl.md"
    args = ["--pages", "40", "--pace", "200", "--cases", "independent", "removal"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "| independent | tree: defaults |" in text
    assert "## Removal" in text and re.search(r"\| [0-4]/4 \|", text)  # (N/10 new pages)


def test_export_perf_smoke(tmp_path):
    mod = load("export_perf")
    out = tmp_path / "export_perf.md"
    assert mod.main(["--nodes", "2000", "--out", str(out)]) == 0
    text = out.read_text()
    assert "python -m benchmarks.export_perf --nodes 2000" in text
    for run in ("API: stream to CSV", "export CSV", "export JSON Lines", "API: load only"):
        assert f"| {run} |" in text


def test_links_perf_smoke(tmp_path):
    mod = load("links_perf")
    out = tmp_path / "links_perf.md"
    args = ["--nodes", "2000", "--links", "5", "--periodic-pages", "3000"]
    assert mod.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    per_link = re.search(r"the links table on disk \| [\d,]+ \| \*\*([\d.]+)\*\*", text)
    assert per_link and 0 < float(per_link.group(1)) < 40
    assert "opic-export -o all.csv (with pagerank)" in text
