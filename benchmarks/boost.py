"""Focus: the share of boosted pages among a crawl's first fetches, against ``OPIC_BOOST``.

    python -m benchmarks.boost [--pages 300,1000] [--boosts 1,5,20,100] [--first 25,50,100]
        [--out benchmarks/results/boost.md]

A generated site (``tests.support.sites.site_graph``) served on 127.0.0.1, crawled one-pass by
the crawl runner's ``site`` spider, one request at a time so that the order is the scheduler's
alone, from its home page: once without a focus and once per boost, with
``OPIC_BOOST_PATTERNS`` matching a tenth of the pages (those whose number ends in 7). For each
crawl, from the server's access log: how many of the first K pages fetched are boosted ones. A
boost whose size matters puts more of them first the larger it is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks._harness import RESULTS, page, table
from benchmarks.crawl_evidence import crawl
from tests.support.sites import Site, site_graph


def boosted_first(n: int, boost: float | None, firsts: list[int], work: Path) -> list[str]:
    """How many of the first K pages a crawl of the ``n``-page site fetched are boosted, as
    "count/K" for each K in ``firsts``."""
    settings = {"CONCURRENT_REQUESTS": 1, "OPIC_LOGSTATS": False}
    if boost is not None:
        settings |= {"OPIC_BOOST_PATTERNS": [r"/p/\d*7\.html$"], "OPIC_BOOST": boost}
    with Site(site_graph(n, seed=0)) as site:
        crawl(site.url(0), "opic", work, spider="site", **settings)
        pages = [int(p[3:-5]) for p in site.hits if p.startswith("/p/")]  # /p/<i>.html
    return [f"{sum(i % 10 == 7 for i in pages[:k])}/{k}" for k in firsts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", default="300,1000")
    parser.add_argument("--boosts", default="1,5,20,100")
    parser.add_argument("--first", default="25,50,100")
    parser.add_argument("--out", type=Path, default=RESULTS / "boost.md")
    args = parser.parse_args(argv)
    firsts = [int(x) for x in args.first.split(",")]
    sections = [
        "One-pass crawls of a generated site, one request at a time; a tenth of the pages "
        "(number ending in 7) match `OPIC_BOOST_PATTERNS`; each cell is how many of the first K "
        "pages fetched (the server's access log) are boosted ones.",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.pages.split(",")):
            rows = []
            for boost in [None, *(float(x) for x in args.boosts.split(","))]:
                label = "no focus" if boost is None else f"{boost:g}"
                rows.append([label, *boosted_first(n, boost, firsts, Path(tmp) / f"{n}-{label}")])
                print(f"{n} pages: {rows[-1]}", file=sys.stderr, flush=True)
            head = ["OPIC_BOOST", *(f"first {k}" for k in firsts)]
            sections += [f"## {n} pages", table(head, rows)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        page("Focus: boosted pages among the first fetches, against OPIC_BOOST", *sections)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
