"""``scrapy opic-top SPIDER``: the most important pages of a crawl, as a table."""

from __future__ import annotations

import argparse
import contextlib
import re

from ..export import Page, open_state
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


_ENCODED_UTF8 = re.compile(r"(?:%[89A-Fa-f][0-9A-Fa-f])+")


def display_url(url: str) -> str:
    """``url`` as a person reads it: percent-encoded UTF-8 (``%C3%A9``) and IDNA host names
    (``xn--...``) shown as their characters; ASCII escapes (``%2F``, ``%20``) kept, so the
    text still names the same URL."""

    def decode(m: re.Match) -> str:
        try:
            return bytes.fromhex(m.group().replace("%", "")).decode("utf-8")
        except UnicodeDecodeError:
            return m.group()

    text = _ENCODED_UTF8.sub(decode, url)
    if "xn--" in text:
        scheme, sep, rest = text.partition("://")
        host, slash, path = rest.partition("/")
        with contextlib.suppress(UnicodeError, ValueError):
            host = host.encode("ascii").decode("idna")
        text = scheme + sep + host + slash + path
    return text


def format_table(pages: list[Page], width: int = 100) -> str:
    """The pages as a plain-text table (rank, importance, pagerank if the pages have it,
    visits, fetched, URL)."""
    ranked = any(p.pagerank is not None for p in pages)
    pr_head = f"  {'pagerank':>10}" if ranked else ""
    lines = [f"{'rank':>4}  {'importance':>10}{pr_head}  {'visits':>6}  {'fetched':>7}  url"]
    room = max(20, width - 36 - len(pr_head))
    for rank, p in enumerate(pages, 1):
        url = display_url(p.url)
        url = url if len(url) <= room else url[: room - 1] + "…"
        pr = f"  {p.pagerank:>10.6f}" if ranked else ""
        lines.append(
            f"{rank:>4}  {p.importance:>10.6f}{pr}  {p.visits:>6}  "
            f"{'yes' if p.fetched else 'no':>7}  {url}"
        )
    return "\n".join(lines)
