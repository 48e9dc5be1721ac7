"""``scrapy opic-export SPIDER -o FILE``: per-URL (or per-site) importance to CSV or JSON Lines."""

from __future__ import annotations

import argparse
import os
import sys

from .._formats import output_format
from ..export import join_items, open_state, read_items, write_export, write_items
from . import StateCommand


class Command(StateCommand):
    def syntax(self) -> str:
        return "SPIDER -o FILE [--top N] [--fetched-only] [--by-site] [--items FEED]"

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
        parser.add_argument(
            "--items",
            metavar="FEED",
            help="write the items of this feed (.jsonl or .csv) instead, each with its page's "
            "final importance, most important first",
        )
        parser.add_argument(
            "--items-url",
            default="url",
            metavar="FIELD",
            help="the item field that holds its page's URL (url)",
        )
        parser.add_argument(
            "--items-field",
            default="importance",
            metavar="FIELD",
            help="the field the importance goes in (importance)",
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
                if opts.items:
                    items = join_items(
                        state, read_items(opts.items), opts.items_url, opts.items_field
                    )
                    if opts.top is not None:
                        items = items[: opts.top]
                    return write_items(items, opts.output, opts.format)
                return write_export(
                    state,
                    opts.output,
                    fmt=opts.format,
                    top=opts.top,
                    fetched_only=opts.fetched_only,
                    by_site=opts.by_site,
                )

        if opts.items and (opts.by_site or opts.fetched_only):
            self.fail("--items writes items: not with --by-site or --fetched-only", code=2)
            return
        n = self.guarded(export)
        if n is not None and opts.output != "-":
            noun = "item" if opts.items else "site" if opts.by_site else "page"
            print(f"{n} {noun}{'' if n == 1 else 's'} written to {opts.output}", file=sys.stderr)
