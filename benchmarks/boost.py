"""Focus: the share of boosted pages among a crawl's first fetches, against ``OPIC_BOOST``.

    python -m benchmarks.boost [--pages 300,1000] [--boosts 1,5,20,100] [--first 25,50,100]
        [--out benchmarks/results/boost.md]

A generated site (``tests.support.sites.site_graph``) served on 127.0.0.1, crawled one-pass by real
Scrapy crawls (``tests/support/crawl_runner.py``, one request at a time so that the order is the
scheduler's alone) from its home page, once without a focus and once per boost with
``OPIC_BOOST_PATTERNS`` matching a tenth of the pages (those whose number ends in 7). For each
crawl, from the server's access log: how many of the first K pages fetched are boosted ones. A
boost whose size matters puts more of them first the larger it is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support import RUNNER
from tests.support.sites import Site, site_graph

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent

PATTERN = r"/p/\d*7\.html$"


def boosted(i: int) -> bool:
    return i % 10 == 7


def crawl_order(graph, boost: float | None, work: Path) -> list[int]:
    """The pages of one crawl in the order the server served them."""
    settings = {"CONCURRENT_REQUESTS": 1, "LOG_LEVEL": "WARNING", "OPIC_LOGSTATS": False}
    if boost is not None:
        settings.update(OPIC_BOOST_PATTERNS=[PATTERN], OPIC_BOOST=boost)
    work.mkdir(parents=True)
    with Site(graph) as site:
        config = {
            "start_url": site.url(0),
            "items": str(work / "items.jsonl"),
            "stats": str(work / "stats.json"),
            "settings": settings,
        }
        (work / "config.json").write_text(json.dumps(config))
        proc = subprocess.run(
            [sys.executable, str(RUNNER), str(work / "config.json")],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        paths = [p for p in site.hits if p.startswith("/p/")]
    return [int(p.removeprefix("/p/").removesuffix(".html")) for p in paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", default="300,1000")
    parser.add_argument("--boosts", default="1,5,20,100")
    parser.add_argument("--first", default="25,50,100")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "boost.md")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.pages.split(",")]
    boosts = [None] + [float(x) for x in args.boosts.split(",")]
    firsts = [int(x) for x in args.first.split(",")]
    lines = [
        "# Focus: boosted pages among the first fetches, against OPIC_BOOST",
        "",
        f"`python -m benchmarks.boost --pages {args.pages} --boosts {args.boosts} "
        f"--first {args.first}`",
        "",
        "One-pass crawls of a generated site from its home page, one request at a time; a tenth "
        "of the pages (number ending in 7) match `OPIC_BOOST_PATTERNS`; each cell is how many "
        "of the first K pages fetched (the server's access log) are boosted ones.",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            graph = site_graph(n, seed=0)
            share = sum(boosted(i) for i in range(n)) / n
            head = "| OPIC_BOOST | " + " | ".join(f"first {k}" for k in firsts) + " |"
            lines += [
                f"**{n} pages** ({share:.0%} of them boosted):",
                "",
                head,
                "|---" * (len(firsts) + 1) + "|",
            ]
            for boost in boosts:
                label = "no focus" if boost is None else f"{boost:g}"
                order = crawl_order(graph, boost, Path(tmp) / f"{n}-{label}")
                cells = [f"{sum(boosted(i) for i in order[:k])}/{k}" for k in firsts]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
                print(f"{n} pages, boost {label}: " + ", ".join(cells), flush=True)
            lines.append("")
    text = "\n".join(lines)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
