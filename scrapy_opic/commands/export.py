"""``scrapy opic-export SPIDER -o FILE``: per-URL importance from a crawl's OPIC state."""

from __future__ import annotations

import argparse
import sys

from scrapy.commands import ScrapyCommand

from ..core.store import StoreError
from ..export import read_state, write_importance
from ..scheduler import state_path


class Command(ScrapyCommand):
    requires_project = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "SPIDER -o FILE"

    def short_desc(self) -> str:
        return "Export per-URL OPIC importance (url, importance) to CSV or JSON Lines"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-o", "--output", required=True, help="file (.csv, .jsonl) or -")
        parser.add_argument("--state", help="state file (default: where the crawl kept it)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1 and not opts.state:
            print("error: give the spider name (or --state PATH)", file=sys.stderr)
            self.exitcode = 2
            return
        path = opts.state or state_path(self.settings, args[0])
        try:
            n = write_importance(read_state(path), opts.output)
        except (StoreError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        if opts.output != "-":
            print(f"{n} pages written to {opts.output}", file=sys.stderr)
