"""``scrapy opic-status SPIDER``: one line of a crawl's figures, now or every N seconds (to watch
a fleet of processes on one Redis frontier)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..backends import StoreError, is_redis_location
from ..export import open_state, read_redis_crawl
from . import StateCommand


def redis_status(location: str) -> dict[str, Any]:
    """The figures of a crawl in Redis and its fleet's politeness, in O(1) of its pages (its
    global counters, the lease and slot sets): cheap enough to ask every second while it runs.
    """

    def figures(frontier: Any) -> dict[str, Any]:
        if frontier.globals() is None:
            raise StoreError(f"no OPIC crawl under the key {frontier.key!r}")
        out: dict[str, Any] = frontier.status()
        out["politeness"] = frontier.politeness()
        out["blocked_slots"], out["busy_slots"] = frontier.slot_figures()
        return out

    return read_redis_crawl(location, figures)


def status_line(f: dict[str, Any]) -> str:
    """One line of figures: what a fleet's operator watches."""
    failed = f.get("failed_visits")
    line = f"{f['pages']} pages known, {f['fetched']} fetched ({f['visits']} visits"
    line += f", {failed} of them failed)" if failed else ")"
    if "pending" in f:
        line += f", {f['pending']} pending"
    if "workers" in f:
        line += (
            f", {f['leases']} in flight; {f['workers']} processes joined; "
            f"{f['reclaimed']} leases reclaimed (a process died), {f['stale']} stale outcomes"
        )
        if f.get("holds"):
            line += f", {f['holds']} visits filing links"
        if f.get("shards"):
            line += f"; {f['shards']} partitions, {f['transit']} transfers not acknowledged"
        pol = f.get("politeness")
        if pol:
            line += (
                f"; fleet politeness {pol['concurrency']}/slot, {pol['delay']:g} s: "
                f"{f['busy_slots']} slots busy, {f['blocked_slots']} without room"
            )
        else:
            line += "; politeness per process"
    line += f"; G={f['G']:.4f}, virtual cash {f['virtual_cash']:.4f}"
    return line


class Command(StateCommand):
    def short_desc(self) -> str:
        return "Print one line of a crawl's figures (with --every N, again every N seconds)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--every",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="print a line every SECONDS until interrupted (default: once)",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if opts.every < 0:
            self.fail("--every must be 0 or more", code=2)
            return
        path = self.state_file(args, opts)
        if path is None:
            return

        def figures() -> dict[str, Any]:
            if is_redis_location(str(path)):
                return redis_status(str(path))
            with open_state(path) as state:  # a state file: its figures as saved
                return dict(state.stats())

        def show(f: dict[str, Any]) -> bool:
            print(f"{time.strftime('%H:%M:%S')} {status_line(f)}", flush=True)
            return True

        try:
            while True:
                f = self.guarded(figures)
                if f is None or not self.guarded(lambda f=f: show(f)) or not opts.every:
                    return  # (an error said in one line, a reader gone, or once asked)
                time.sleep(opts.every)
        except KeyboardInterrupt:
            return
