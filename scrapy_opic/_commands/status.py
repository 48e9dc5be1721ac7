"""``scrapy opic-status SPIDER``: one line of a crawl's figures, now or every N seconds (to watch
a fleet of processes on one Redis frontier); with ``--json``, one JSON object per line, the
same figures (:data:`JSON_FIELDS`) for scripts and monitoring."""

from __future__ import annotations

import argparse
import functools
import json
import time
from datetime import datetime, timezone
from typing import Any

from .._backends import is_redis_location
from ..export import open_state, read_redis_crawl
from . import StateCommand


def redis_status(location: str) -> dict[str, Any]:
    """The figures of a crawl in Redis, as its members last wrote them, with its processes
    and partitions: O(partitions), cheap enough to ask every second while it runs."""
    from .._backends.redis_state import fleet_status

    return read_redis_crawl(location, fleet_status)


#: The fields of ``--json`` (those of a crawl in Redis only when it is one), each what the text
#: line says of it.
JSON_FIELDS = {
    "time": "when the figures were read (ISO 8601, UTC)",
    "pages": "pages known",
    "fetched": "pages fetched",
    "visits": "visits (a page refetched counts each time)",
    "failed_visits": "visits that failed (HTTP errors, download errors, callback errors)",
    "pending": "pages waiting to be fetched",
    "G": "the clock: total history",
    "virtual_cash": "the virtual page's cash",
    "in_flight": "Redis: pages leased by a process and not yet settled",
    "workers": "Redis: processes alive",
    "partitions": "Redis: partitions in use (with pages or messages)",
    "owners": "Redis: partitions owned, by process",
    "messages": "Redis: message batches queued",
    "unconfirmed": "Redis: messages not yet known delivered",
    "G_low": "Redis: the slowest partition's clock",
}


def status_json(f: dict[str, Any]) -> str:
    """The figures as one line of JSON (:data:`JSON_FIELDS`)."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out: dict[str, Any] = {"time": now}
    for name in JSON_FIELDS:
        if name in f:
            value = f[name]
            out[name] = value.item() if hasattr(value, "item") else value  # (numpy scalars)
    return json.dumps(out)


def status_line(f: dict[str, Any]) -> str:
    """One line of figures: what a fleet's operator watches."""
    failed = f.get("failed_visits")
    line = f"{f['pages']} pages known, {f['fetched']} fetched ({f['visits']} visits"
    line += f", {failed} of them failed)" if failed else ")"
    if "pending" in f:
        line += f", {f['pending']} pending"
    if "workers" in f:
        owned = f.get("owners", {})
        per = ", ".join(f"{n}" for n in sorted(owned.values(), reverse=True)) or "none"
        line += (
            f", {f['in_flight']} in flight; {f['workers']} processes, {f['partitions']} "
            f"partitions in use (per process: {per}); {f['messages']} message batches "
            f"queued, {f['unconfirmed']} messages not yet delivered"
        )
        if f["G"] > 0 and f.get("G_low", 0) > 0:  # (the slowest partition's clock behind)
            line += f", partition clocks within {100 * (1 - f['G_low'] / f['G']):.1f}%"
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
        parser.add_argument(
            "--json",
            action="store_true",
            help="print each line as a JSON object of the same figures: "
            + "; ".join(f"{k}: {v}" for k, v in JSON_FIELDS.items()),
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
            if opts.json:
                print(status_json(f), flush=True)
            else:
                print(f"{time.strftime('%H:%M:%S')} {status_line(f)}", flush=True)
            return True

        try:
            while True:
                f = self.guarded(figures)
                if f is None or not self.guarded(functools.partial(show, f)) or not opts.every:
                    return  # (an error said in one line, a reader gone, or once asked)
                time.sleep(opts.every)
        except KeyboardInterrupt:
            return
