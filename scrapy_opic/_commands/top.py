"""``scrapy opic-top SPIDER``: the most important pages of a crawl, as a table."""

from __future__ import annotations

import argparse

from ..export import format_table, open_state
from . import StateCommand


class Command(StateCommand):
    def short_desc(self) -> str:
        return "Print the most important pages of a crawl's OPIC state"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("-n", "--top", type=int, default=20, metavar="N", help="rows (20)")
        parser.add_argument("--fetched-only", action="store_true", help="only fetched pages")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if opts.top < 0:
            self.fail("-n/--top must be 0 or more", code=2)
            return
        path = self.state_file(args, opts)
        if path is None:
            return

        def table() -> str:
            with open_state(path) as state:
                s = state.stats()
                head = (
                    f"{state.n} pages known, {int(s['fetched'])} fetched, "
                    f"{int(s['visits'])} visits, G={s['G']:.3f}, "
                    f"error factor 1/G={s['error_factor']:.4f}"
                )
                return head + "\n" + format_table(state.top(opts.top, opts.fetched_only))

        out = self.guarded(table)
        if out is not None:
            self.guarded(lambda: print(out, flush=True))
