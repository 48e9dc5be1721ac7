"""The simulator: edge lists, exact PageRank, the fixpoint for every strategy, the CLI."""

from __future__ import annotations

import csv
import gzip
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from scrapy_opic.opic.graph import from_edges, load_edge_list, power_law_graph
from scrapy_opic.opic.pagerank import PowerIteration, pagerank, relative_error, top_mask
from scrapy_opic.simulator.simulation import Simulation, main, top_k


def random_graph(n: int, p: float, seed: int):
    rng = np.random.default_rng(seed)
    src, dst = np.nonzero(rng.random((n, n)) < p)
    return from_edges(src, dst, n)


def to_nx(g) -> nx.DiGraph:
    G = nx.DiGraph()
    G.add_nodes_from(range(g.n))
    G.add_edges_from(zip(g.sources().tolist(), g.indices.tolist(), strict=True))
    return G


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.85, 0.5])
@pytest.mark.parametrize("sparse", [True, False], ids=["scipy", "numpy"])
def test_pagerank_matches_networkx(seed, alpha, sparse):
    g = random_graph(40, 0.06, seed)  # sparse: several dangling pages
    assert (g.out_degree == 0).any()
    ref = nx.pagerank(to_nx(g), alpha=alpha, tol=1e-14, max_iter=10_000)
    got = pagerank(g, alpha, sparse=sparse)
    np.testing.assert_allclose(got, [ref[i] for i in range(g.n)], rtol=1e-8)


def test_pagerank_from_a_start_near_the_answer_reaches_the_same_fixpoint():
    g = power_law_graph(2000, seed=5)
    exact = pagerank(g, 0.85, sparse=False)
    rough = exact * np.random.default_rng(0).uniform(0.8, 1.2, g.n)
    np.testing.assert_allclose(pagerank(g, 0.85, x0=rough), exact, rtol=1e-9, atol=0)
    np.testing.assert_allclose(pagerank(g, 0.85, sparse=True), exact, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "strategy", ["greedy", *(pytest.param(s, marks=pytest.mark.slow) for s in ("random", "cycle"))]
)
@pytest.mark.parametrize("batch", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_opic_converges_to_networkx_pagerank(strategy, batch):
    """The fixpoint: virtual share epsilon, uniform payout -> pagerank(alpha = 1 - epsilon)."""
    g = random_graph(30, 0.1, seed=7)
    eps = 0.2
    ref = nx.pagerank(to_nx(g), alpha=1 - eps, tol=1e-14)
    ref = np.array([ref[i] for i in range(g.n)])
    sim = Simulation(g, strategy, epsilon=eps, batch=batch, seed=1)
    sim.run(500 * g.n)
    x = sim.importance()
    assert x.sum() == pytest.approx(1.0)
    assert relative_error(x, ref) < (0.2 if strategy == "random" else 0.1)
    assert abs(sim.engine.total_cash() - 1.0) < 1e-9


def test_error_shrinks_as_the_crawl_goes_on():
    g = power_law_graph(2000, seed=3)
    pr = pagerank(g, 0.85)
    sim = Simulation(g, "greedy", batch=20)
    errors = []
    for _ in range(3):
        sim.run(2 * g.n)
        errors.append(relative_error(sim.importance(), pr))
    assert errors[0] > errors[1] > errors[2]


def test_greedy_average_cash_at_visit_is_about_two_over_n_with_small_lumps():
    # Many out-links per page: cash arrives in small lumps, the paper's linear regime.
    rng = np.random.default_rng(0)
    n = 200
    src = np.repeat(np.arange(n), 40)
    g = from_edges(src, rng.integers(0, n, src.size), n)
    sim = Simulation(g, "greedy", batch=1)
    sim.run(20 * n)
    g0 = sim.engine.g_real
    sim.run(20 * n)
    mean_cash_x_n = (sim.engine.g_real - g0) / (20 * n) * n
    assert 1.9 < mean_cash_x_n < 2.2


def test_power_iteration_converges_to_pagerank():
    g = power_law_graph(500, seed=1)
    pr = pagerank(g, 0.85)
    it = PowerIteration(g, 0.85).iterate()
    errs = [relative_error(next(it), pr) for _ in range(30)]
    assert errs[-1] < errs[0] and errs[-1] < 0.1


def test_top_k_is_exact_including_the_sampled_fast_path():
    rng = np.random.default_rng(0)
    for n, k in [(10, 3), (100_000, 500), (100_000, 1)]:
        key = rng.random(n)
        got = np.sort(top_k(key, k, rng))
        np.testing.assert_array_equal(got, np.sort(np.argsort(key)[-k:]))
    ties = np.zeros(100_000)
    assert len(top_k(ties, 100, rng)) == 100


def test_top_mask_and_relative_error():
    ref = np.array([0.1, 0.2, 0.3, 0.4])
    assert top_mask(ref, 0.5).tolist() == [False, False, True, True]
    assert relative_error(ref * 1.1, ref) == pytest.approx(10.0)


def test_load_edge_list_with_string_ids_comments_and_gzip(tmp_path):
    text = "# a comment\nhome about\nhome blog\nblog home\n  # indented comment\nabout about\n"
    plain = tmp_path / "g.txt"
    plain.write_text(text)
    packed = tmp_path / "g.txt.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        g = load_edge_list(path)
        assert g.n == 3 and g.n_edges == 3  # the self-link is dropped
        names = {g.name(i): i for i in range(g.n)}
        kids = {g.name(int(j)) for j in g.children(names["home"])}
        assert kids == {"about", "blog"}
    assert load_edge_list(plain, self_links=True).n_edges == 4


def test_load_edge_list_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("a b\nc\n")
    with pytest.raises(ValueError):
        load_edge_list(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError):
        load_edge_list(empty)


def test_cli_writes_importance_csv(tmp_path, capsys):
    g = power_law_graph(100, seed=2)
    edges = tmp_path / "edges.tsv"
    with open(edges, "w") as fh:
        fh.write("# synthetic\n")
        for a, b in zip(g.sources().tolist(), g.indices.tolist(), strict=True):
            fh.write(f"p{a}\tp{b}\n")
    out = tmp_path / "imp.csv"
    rc = main(
        [
            "--graph",
            str(edges),
            "--strategy",
            "greedy",
            "--passes",
            "2",
            "--epsilon",
            "0.15",
            "--window",
            "interpolation:50",
            "--seed",
            "3",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "error factor 1/G=" in printed and "visits/s" in printed and "Kendall tau" in printed
    with open(out) as fh:
        rows = list(csv.DictReader(fh))
    assert set(rows[0]) == {"node", "importance"}
    assert all(r["node"].startswith("p") for r in rows)
    assert sum(float(r["importance"]) for r in rows) == pytest.approx(1.0)


def test_cli_reports_a_missing_graph_in_one_line(tmp_path, capsys):
    rc = main(["--graph", str(tmp_path / "nope.tsv"), "--out", str(tmp_path / "x.csv")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


@pytest.mark.parametrize("strategy", ["greedy", "random", "cycle"])
def test_a_batch_larger_than_the_graph_visits_every_page_once_per_step(strategy):
    g = random_graph(10, 0.2, seed=1)
    sim = Simulation(g, strategy, batch=50)
    assert sim.batch == 10
    sim.run(30)
    assert (sim.engine.visits[: g.n] == 3).all()
    assert abs(sim.engine.total_cash() - 1.0) < 1e-12


@pytest.mark.parametrize(
    "args, named",
    [
        (["--passes", "-1"], "--passes -1.0: expected a number > 0"),
        (["--passes", "nan"], "--passes nan"),
        (["--epsilon", "0"], "--epsilon 0.0: expected a number in (0, 1]"),
        (["--epsilon", "1.5"], "--epsilon 1.5"),
        (["--refresh", "2"], "--refresh 2.0: expected a number in [0, 1]"),
        (["--batch", "0"], "--batch 0"),
    ],
)
def test_cli_refuses_bad_options_in_one_line(tmp_path, capsys, args, named):
    out = tmp_path / "x.csv"
    assert main(["--graph", "powerlaw:50", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
    assert not out.exists()


def test_cli_refuses_weighted_edge_lists_and_graphs_of_self_links_only(tmp_path, capsys):
    weighted = tmp_path / "w.txt"
    weighted.write_text("# a weighted list\na b 0.5\nb c 0.25\n")
    assert main(["--graph", str(weighted), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "data line 1 has 3 columns ('a b 0.5')" in err and err.count("\n") == 1, err
    loops = tmp_path / "s.txt"
    loops.write_text("a a\nb b\n")
    assert main(["--graph", str(loops), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "no links between two different pages" in err and "nan" not in err, err


def _simulator(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrapy_opic.simulator", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.slow  # (runs the command)
def test_cli_reads_edges_from_a_pipe(tmp_path):
    edges = b"".join(f"{i} {(i * 7 + 1) % 40}\n{i} {(i + 3) % 40}\n".encode() for i in range(40))
    on_disk = tmp_path / "edges.txt"
    on_disk.write_bytes(edges)
    want = _simulator("--graph", str(on_disk), "--out", "-")
    assert want.returncode == 0, want.stderr
    for graph, data in (("-", edges), ("/dev/stdin", edges), ("-", gzip.compress(edges))):
        got = _simulator("--graph", graph, "--out", "-", stdin=data)
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout  # the same importance, read through a pipe


@pytest.mark.slow  # (runs the command)
def test_cli_says_in_one_line_that_it_cannot_write_its_output(tmp_path):
    for out in (tmp_path / "no" / "such" / "dir.csv", tmp_path):
        run = _simulator("--graph", "powerlaw:50", "--out", str(out))
        err = run.stderr.decode()
        assert run.returncode == 2 and err.startswith("error: --out") and err.count("\n") == 1, err
        assert "Traceback" not in err


@pytest.mark.slow  # (runs the command)
def test_a_tiny_graph_prints_no_warning_and_no_nan(tmp_path):
    for edges in (b"1 2\n", b"1 2\n1 3\n", b"1 2\n2 3\n3 1\n"):
        run = _simulator("--graph", "-", "--out", str(tmp_path / "x.csv"), stdin=edges)
        out, err = run.stdout.decode(), run.stderr.decode()
        assert run.returncode == 0 and not err, err
        assert "nan" not in out and "Kendall tau n/a" in out, out


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("batch", [1, 4])
def test_the_adaptive_window_follows_moved_links_sooner(seed, batch):
    """A third of a graph's links move after 3N visits: the window that shrinks when it sees
    links move ranks like the new PageRank sooner than the window that does not (and is the
    same window before the move)."""
    from scipy.stats import kendalltau

    g = power_law_graph(400, seed=seed)
    src, dst = g.sources(), g.indices.astype(np.int64).copy()
    rng = np.random.default_rng(seed)
    moved = rng.random(dst.size) < 0.3
    dst[moved] = rng.choice(g.n, int(moved.sum()))
    after = from_edges(src, dst, g.n)
    pr, linked = pagerank(after, 0.85), after.in_degree > 0
    sims = [
        Simulation(g, "greedy", window=w, batch=batch, seed=1)
        for w in ("interpolation:30", "adaptive:30")
    ]
    taus = []
    for sim in sims:
        sim.run(3 * g.n)
        taus.append(sim.importance())
        sim.set_graph(after)
        sim.run(2 * g.n)
        taus.append(kendalltau(sim.importance()[linked], pr[linked]).statistic)
    np.testing.assert_array_equal(taus[0], taus[2])
    assert sims[1].engine.window.changed_at is not None
    assert taus[3] > taus[1] + 0.02, taus
