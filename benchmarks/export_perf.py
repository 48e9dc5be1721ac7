"""Exporting a large state, and what ``OPIC_KEEP_LINKS`` costs: bytes per link on disk, the
crawl's visits and checkpoints, the export's pagerank column.

    python -m benchmarks.export_perf [--nodes 1000000] [--links 28] [--periodic-pages 200000]
        [--out benchmarks/results/export_perf.md]

Two states of the same crawl, with ``keep_links`` and without, each built in a child process
(a child forked from a parent holding a crawl would start with its resident pages): the
harness's ``crawled_state`` (N greedy visits through the embedded store's frontier, one commit
at the end) of a synthetic site-like graph of N pages and about L links per page: L/2.5 to
navigation pages, popular ones chosen by a Zipf law; L/2.5 to pages within 1,000 ids; L/5 to
pages anywhere. The crawl's side: its mean visit, its first checkpoint, and a checkpoint of a
``--periodic-pages`` crawl 500 visits after the previous one (the best of five). Then each
export and read runs in a process of its own, timed, with its peak resident memory from the
kernel (``wait4``): the commands and the API (streamed, and the same rows built in one list:
what streaming saves) on the state without links; reading the links, ``pagerank()`` (with scipy,
and numpy only) and the export with its pagerank column on the state with links.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, GraphCrawl, child_env, crawled_state, page, table
from scrapy_opic._backends.sqlite_state import LINKS_TABLE
from scrapy_opic.opic.graph import Graph, from_edges

LOAD = "import sys\nfrom scrapy_opic.export import open_state, write_export\n"
LOAD += "with open_state(sys.argv[1]) as s:\n    s.importance()\n"
LINKS = "import sys\nfrom scrapy_opic._backends.sqlite_state import StateReader\n"
LINKS += "with StateReader(sys.argv[1]) as r:\n    r.links()\n"


def linked_graph(n: int, per_page: int, seed: int = 1) -> Graph:
    """The synthetic site-like graph of the module's docstring."""
    rng = np.random.default_rng(seed)
    nav = near = int(per_page * 0.4)
    popular = np.minimum(rng.zipf(1.3, size=(n, nav)) - 1, n - 1)
    local = np.clip(np.arange(n)[:, None] + rng.integers(-1000, 1001, (n, near)), 0, n - 1)
    anywhere = rng.integers(0, n, (n, per_page - nav - near))
    dst = np.hstack([popular, local, anywhere]).ravel()
    return from_edges(np.repeat(np.arange(n, dtype=np.int64), per_page), dst, n)


def urls(n: int) -> list[str]:
    return [f"https://site{k % 50}.example.org/doc/{k}.html" for k in range(n)]


def build_state(path: str, n: int, per_page: int, keep_links: int) -> dict:
    """A crawled state (the harness's figures of it), and its links table's blob bytes and rows."""
    graph = linked_graph(n, per_page)
    out = {"links": graph.n_edges, **crawled_state(Path(path), graph, urls(n), n, keep_links > 0)}
    if keep_links:
        with sqlite3.connect(path) as con:
            sql = f"SELECT SUM(LENGTH(links)), COUNT(*) FROM {LINKS_TABLE}"
            out["blob_bytes"], out["rows"] = con.execute(sql).fetchone()
    return out


def run(cmd: list[str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS in MiB and stdout (a line at most) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=child_env(), stdout=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    with proc.stdout:
        out = proc.stdout.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{cmd} failed")
    return seconds, usage.ru_maxrss / 2**10, out


def periodic_commit(work: Path, n: int, per_page: int, keep_links: bool, dirty: int = 500) -> float:
    """Seconds of a checkpoint of an ``n``-page crawl after ``dirty`` more visits (best of 5)."""
    graph = linked_graph(n, per_page)
    crawl = GraphCrawl(work / f"periodic-{keep_links}.sqlite", graph, urls(n), keep_links)
    crawl.visit(n - 5 * dirty)
    crawl.checkpoint()
    times = []
    for _ in range(5):
        crawl.visit(dirty)
        times.append(crawl.checkpoint())
    crawl.frontier.close([])
    return min(times)


def api(state: str, code: str = "", before: str = "") -> list[str]:
    """A child process that runs ``before``, loads ``state`` and its importance by the export API,
    then runs ``code``."""
    return [sys.executable, "-c", before + LOAD + code, state]


def measure(args: argparse.Namespace, work: Path) -> dict:
    built, states = {}, {keep: work / f"state-{keep}.sqlite" for keep in (False, True)}
    for keep, path in states.items():
        code = "import json, sys; from benchmarks.export_perf import build_state as b; "
        code += "print(json.dumps(b(sys.argv[1], *map(int, sys.argv[2:]))))"
        cmd = [sys.executable, "-c", code, str(path), str(args.nodes), str(args.links), str(+keep)]
        built[keep] = json.loads(run(cmd, work)[2])
    plain, linked = str(states[False]), str(states[True])
    export = [sys.executable, "-m", "scrapy", "opic-export", "--state"]
    no_scipy = "import sys\nsys.modules['scipy'] = None\n"
    cases = [  # (run, command, its output file)
        ("API: load only", api(plain), None),
        ("API: stream to CSV", api(plain, "    write_export(s, 'api.csv')\n"), "api.csv"),
        ("API: rows built in one list", api(plain, "    rows = list(s.pages())\n"), None),
        ("export CSV", [*export, plain, "-o", "all.csv"], "all.csv"),
        ("export JSON Lines", [*export, plain, "-o", "all.jl"], "all.jl"),
        ("export --top 100", [*export, plain, "-o", "top.csv", "--top", "100"], None),
        ("export --by-site", [*export, plain, "-o", "sites.csv", "--by-site"], None),
        ("read and decode the links only", [sys.executable, "-c", LINKS, linked], None),
        ("pagerank() (scipy)", api(linked, "    s.pagerank()\n"), None),
        ("pagerank() (numpy only)", api(linked, "    s.pagerank()\n", no_scipy), None),
        ("export CSV with pagerank", [*export, linked, "-o", "pr.csv"], "pr.csv"),
    ]
    runs = []
    for name, cmd, output in cases:
        seconds, rss, _ = run(cmd, work)
        size = (work / output).stat().st_size / 2**20 if output else None
        runs.append([name, "with links" if linked in cmd else "without", seconds, rss, size])
        print(runs[-1], file=sys.stderr, flush=True)
    assert "pagerank" in (work / "pr.csv").open().readline()
    periodic = [periodic_commit(work, args.periodic_pages, args.links, k) for k in (False, True)]
    return {"built": built, "runs": runs, "periodic_s": periodic}


def render(args: argparse.Namespace, data: dict) -> str:
    plain, links = data["built"][False], data["built"][True]
    n, extra, crc = links["links"], links["state_bytes"] - plain["state_bytes"], 4 * links["rows"]
    blob = links["blob_bytes"] - crc  # (the CRCs are stored in the blobs)
    disk = [
        ["state without links", plain["state_bytes"], None],
        ["state with links", links["state_bytes"], None],
        ["the links table (the difference)", extra, extra / n],
        ["its blobs (varint gaps)", blob, blob / n],
        ["its CRC-32 per page", crc, crc / n],
    ]
    visit = [1e6 * b["crawl_s"] / b["visits"] for b in (plain, links)]
    crawl = [
        [f"a visit, {args.links} links (us)", *visit],
        ["the first checkpoint (s)", plain["commit_s"], links["commit_s"]],
        [f"a checkpoint, {args.periodic_pages:,} pages, 500 visits later (ms)"]
        + [1e3 * s for s in data["periodic_s"]],
    ]
    return page(
        "Export performance and the cost of OPIC_KEEP_LINKS",
        "Two states of the same crawl, with and without its links; every export or read is a "
        "process of its own, timed, with its peak resident memory. The method is in the "
        "module's docstring.",
        table(["pages", "links"], [[args.nodes, n]]),
        "## On disk",
        table(["", "bytes", "bytes per link"], disk),
        "## In the crawl",
        table(["", "without links", "with links"], crawl),
        "## Export",
        table(["run", "state", "seconds", "peak RSS MiB", "output MiB"], data["runs"]),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--links", type=int, default=28, help="links per page")
    ap.add_argument("--periodic-pages", type=int, default=200_000, help="the periodic checkpoint's")
    ap.add_argument("--out", type=Path, default=RESULTS / "export_perf.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="opic-export-") as tmp:
        text = render(args, measure(args, Path(tmp)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
