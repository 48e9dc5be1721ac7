"""``scrapy opic-feed SPIDER URL...``: push start URLs into a spider's crawl, running or not:
its processes take them within a second or two (or at the next start), and fetch each page not
yet known (see :mod:`scrapy_opic._seeds`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._backends import is_redis_location, split_location
from . import StateCommand


class Command(StateCommand):
    def syntax(self) -> str:
        return "SPIDER URL [URL ...] [options]"

    def short_desc(self) -> str:
        return "Push start URLs into a crawl, running or not (Redis: the crawl's start_urls key)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "-f",
            "--file",
            metavar="FILE",
            help="also push the URLs of FILE, one per line ('-': standard input); a line may be "
            "a JSON seed object with url, priority, meta, callback",
        )
        parser.add_argument("--priority", type=int, help="the requests' priority (an integer)")
        parser.add_argument("--meta", metavar="JSON", help="the requests' meta, a JSON object")
        parser.add_argument(
            "--callback", metavar="NAME", help="the spider method that parses their responses"
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from .._seeds import seed_bytes

        if not opts.state and not args:
            self.fail("give the spider's name, then the URLs (or --state PATH)", code=2)
            return
        spider, urls = (None, args) if opts.state else (args[0], args[1:])
        unknown = self.unknown_spider(spider) if spider else None
        if unknown:  # (else its seeds would wait for a crawl that never comes)
            self.fail(unknown)
            return
        meta = None
        if opts.meta is not None:
            try:
                meta = json.loads(opts.meta)
            except json.JSONDecodeError:
                meta = None
            if not isinstance(meta, dict):
                self.fail("--meta must be a JSON object", code=2)
                return
        seeds = [seed_bytes(u, opts.priority, meta, opts.callback) for u in urls if u.strip()]
        if opts.file:
            lines = self.guarded(lambda: _read_lines(opts.file))
            if lines is None:
                return
            seeds += [
                line.encode() if line.lstrip().startswith("{") else
                seed_bytes(line, opts.priority, meta, opts.callback)
                for line in lines
            ]  # fmt: skip
        if not seeds:
            self.fail("no URL to push", code=2)
            return
        location = self.state_file([spider] if spider else [], opts)
        if location is None:
            return
        self.guarded(lambda: self._push(str(location), seeds))

    def _push(self, location: str, seeds: list[bytes]) -> None:
        from .._backends.feed import FileFeed, RedisFeed, feed_path

        if is_redis_location(location):
            from .._backends.redis import open_client
            from .._backends.redis_state import crawl_meta

            url, key = split_location(location)
            client = open_client(url)
            try:
                feed = RedisFeed(client, key)
                waiting = feed.push(seeds)
                started = bool(crawl_meta(client, key))
            finally:
                client.close()
            later = (
                "" if started else " (no crawl under that key yet: its first process takes them)"
            )
            print(f"{len(seeds)} start URLs pushed into {feed.name}, {waiting} waiting{later}")
            return
        path = Path(location)
        path.parent.mkdir(parents=True, exist_ok=True)  # (a crawl not started yet reads it)
        file_feed = FileFeed(feed_path(path))
        file_feed.push(seeds)
        print(f"{len(seeds)} start URLs added to {file_feed.name}")


def _read_lines(name: str) -> list[str]:
    """The non-blank lines of file ``name`` (``-``: standard input)."""
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name} is not UTF-8 text") from None
    return [line.strip() for line in text.splitlines() if line.strip()]
