"""The demo: serve a generated 1,000-page site on 127.0.0.1, crawl it with OPIC through the
example project, and print the pages OPIC ranks first beside their true PageRank.

    python example_project/demo.py [--pages N] [--seed S] [--stop N] [--report report.html]

``--stop N`` ends the crawl after N pages (Scrapy's CLOSESPIDER_PAGECOUNT); ``--report`` also
writes the HTML report of the crawl (``scrapy opic-report site -o FILE``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # the test sites (tests/support/sites.py)

import numpy as np

from scrapy_opic.export import open_state
from scrapy_opic.opic.pagerank import pagerank
from tests.support.sites import Site, site_graph

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--stop", type=int, default=0, help="stop after N pages (0: crawl all)")
    ap.add_argument("--report", help="also write the crawl's HTML report here")
    args = ap.parse_args()
    graph = site_graph(args.pages, args.seed)
    pr = pagerank(graph, 0.85)
    items = HERE / "items.jsonl"
    with Site(graph) as site:
        start = site.url(0)
        print(f"serving {graph.n} pages ({graph.n_edges} links) at {start}", flush=True)
        cmd = [
            "scrapy",
            "crawl",
            "site",
            "-a",
            f"start_url={start}",
            "-O",
            str(items),
            "-s",
            "LOG_LEVEL=WARNING",
            "-s",
            f"CLOSESPIDER_PAGECOUNT={args.stop}",
        ]
        subprocess.run(cmd, cwd=HERE, check=True)
    order = [json.loads(line)["url"] for line in items.read_text().splitlines()]
    node = {site.url(i): i for i in range(graph.n)}
    fetched = [node[u] for u in order if u in node]
    k = max(1, len(fetched) // 10)
    best = np.sort(pr)[::-1][:k].sum()
    print(
        f"\ncrawled {len(fetched)} pages; the first 10% held {pr[fetched[:k]].sum() / best:.0%} "
        "of the PageRank an omniscient order would have fetched by then"
    )
    with open_state(HERE / ".scrapy" / "opic" / "site.sqlite") as state:
        top = state.top(10)
    rank = {int(i): r + 1 for r, i in enumerate(np.argsort(-pr))}
    print(f"\n{'OPIC importance':>16} {'PageRank':>9} {'PR rank':>7}  url")
    for page in top:
        i = node[page.url]
        print(f"{page.importance:16.5f} {pr[i]:9.5f} {rank[i]:7d}  {page.url}")
    if args.report:
        report = str(Path(args.report).resolve())
        subprocess.run(["scrapy", "opic-report", "site", "-o", report], cwd=HERE, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
