"""``scrapy opic-report SPIDER -o report.html``: one self-contained HTML page about a crawl."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import StateCommand


class Command(StateCommand):
    def syntax(self) -> str:
        return "SPIDER -o report.html [--top N]"

    def short_desc(self) -> str:
        return "Write an HTML report (plots, top pages and hosts) of a crawl's OPIC state"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-o", "--output", required=True, help="HTML file to write")
        parser.add_argument("--top", type=int, default=25, metavar="N", help="rows per table")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if opts.top < 0:
            self.fail("--top must be 0 or more", code=2)
            return
        path = self.state_file(args, opts)
        if path is None:
            return

        def report() -> Path:
            from .._report import write_report  # imports matplotlib lazily
            from ..export import open_state

            with open_state(path) as state:
                return write_report(state, opts.output, opts.top)

        out = self.guarded(report)
        if out is not None:
            print(f"report written to {out}", file=sys.stderr)
