"""``scrapy opic-export SPIDER -o FILE``: per-URL (or per-site) importance to CSV or JSON Lines."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
from collections.abc import Iterable
from typing import Any

from .._formats import output_format
from ..export import OpicState, open_state, output_file, write_export
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
        usage = _bad_value(opts)
        if usage is not None:
            self.fail(usage, code=2)
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
            print(_written(n, opts), file=sys.stderr)


def _bad_value(opts: argparse.Namespace) -> str | None:
    """What is wrong with the values of ``--top`` and ``-o`` (None if nothing)."""
    if opts.top is not None and opts.top < 0:
        return "--top must be 0 or more"
    if opts.output != "-" and opts.output.endswith(("/", os.sep)):
        return f"-o {opts.output}: a directory, expected a file name"
    return None


def _written(n: int, opts: argparse.Namespace) -> str:
    """The line that says how many rows (items, sites or pages) went to the output."""
    noun = "item" if opts.items else "site" if opts.by_site else "page"
    return f"{n} {noun}{'' if n == 1 else 's'} written to {opts.output}"


def read_items(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The items of a feed a crawl wrote (JSON Lines: ``.jsonl``, ``.jl``, ``.jsonlines``; or
    CSV), in its order. :class:`ValueError` (one line) for another format or a bad line."""
    name = str(path)
    csv_file = name.lower().endswith(".csv")
    if not name.lower().endswith((".csv", ".jsonl", ".jl", ".jsonlines")):
        raise ValueError(f"{name}: items must be JSON Lines (.jsonl, .jl) or CSV (.csv)")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            if csv_file:
                return list(csv.DictReader(fh))
            items = []
            for k, line in enumerate(fh, 1):
                if line.strip():
                    item = json.loads(line)
                    if not isinstance(item, dict):
                        raise ValueError(f"line {k} is not an object")
                    items.append(item)
            return items
    except OSError as exc:
        raise OSError(f"cannot read {name}: {exc.strerror or exc}") from None
    except ValueError as exc:  # (json.JSONDecodeError too)
        raise ValueError(f"{name}: not JSON Lines ({exc})") from None


def join_items(
    state: OpicState,
    items: Iterable[dict[str, Any]],
    url_field: str = "url",
    field: str = "importance",
) -> list[dict[str, Any]]:
    """``items`` (dicts, as a feed holds them) with their page's importance in the state (its
    final value, where ``OPIC_ITEM_FIELD`` holds the estimate at the page's visit), in
    ``field``, most important first: an item's page is the state's page whose URL is the item's
    ``url_field`` (without its ``#fragment``). Items whose page the state does not know come last,
    in their order, with ``None``. One pass over the state's pages; the items are in memory."""
    items = list(items)
    wanted: dict[str, float | None] = {}
    for item in items:
        url = item.get(url_field)
        if isinstance(url, str):
            wanted[url.partition("#")[0]] = None
    for chunk in state.page_chunks():
        for p in chunk:
            if p.url in wanted:
                wanted[p.url] = p.importance
    out = []
    for item in items:
        url = item.get(url_field)
        value = wanted.get(url.partition("#")[0]) if isinstance(url, str) else None
        out.append({**item, field: value})
    out.sort(key=lambda item: -item[field] if item[field] is not None else math.inf)
    return out


def write_items(items: list[dict[str, Any]], out: str, fmt: str | None = None) -> int:
    """``items`` to ``out`` (CSV: the union of their keys, in order of first appearance; JSON
    Lines: one object each), through :func:`output_file`; returns how many."""
    fmt = output_format(out, fmt)
    with output_file(out) as fh:
        if fmt == "csv":
            columns = list(dict.fromkeys(k for item in items for k in item))
            writer = csv.DictWriter(fh, columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(items)
        else:
            fh.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    return len(items)
