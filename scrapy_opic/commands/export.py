"""``scrapy opic-export SPIDER -o FILE``: per-URL (or per-site) importance to CSV or JSON Lines."""

from __future__ import annotations

import argparse
import os
import sys

from ..export import open_state, write_export
from ..formats import output_format
from . import StateCommand


class Command(StateCommand):
    def syntax(self) -> str:
        return "SPIDER -o FILE [--top N] [--fetched-only] [--by-site]"

    def short_desc(self) -> str:
        return "Export per-URL (or per-site) OPIC importance to CSV or JSON Lines"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "-o", "--output", required=True, help="file (.csv, .jsonl, .jl) or - for stdout"
        )
        parser.add_argument("--format", choices=("csv", "jsonl"), help="override the extension")
        parser.add_argument("--top", type=int, metavar="N", help="only the N most important")
        parser.add_argument("--fetched-only", action="store_true", help="only fetched pages")
        parser.add_argument(
            "--by-site",
            action="store_true",
            help="importance per host and per registered domain, with page counts",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if opts.top is not None and opts.top < 0:
            self.fail("--top must be 0 or more", code=2)
            return
        if opts.output != "-" and opts.output.endswith(("/", os.sep)):
            self.fail(f"-o {opts.output}: a directory, expected a file name", code=2)
            return
        path = self.state_file(args, opts)
        if path is None:
            return
        # Check the format before reading anything: a typo costs nothing.
        if self.guarded(lambda: output_format(opts.output, opts.format)) is None:
            return

        def export() -> int:
            with open_state(path) as state:
                return write_export(
                    state,
                    opts.output,
                    fmt=opts.format,
                    top=opts.top,
                    fetched_only=opts.fetched_only,
                    by_site=opts.by_site,
                )

        n = self.guarded(export)
        if n is not None and opts.output != "-":
            what = ("site" if opts.by_site else "page") + ("" if n == 1 else "s")
            print(f"{n} {what} written to {opts.output}", file=sys.stderr)
