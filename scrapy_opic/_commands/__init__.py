"""Scrapy commands installed through the ``scrapy.commands`` entry point: ``opic-export``,
``opic-top``, ``opic-report``, ``opic-status`` and ``opic-feed`` (which adds start URLs to a
crawl's feed, :mod:`scrapy_opic._backends.feed`). They read a spider's OPIC state where its
crawl kept it (``JOBDIR/opic.sqlite`` with ``-s JOBDIR=DIR``, else ``OPIC_STATE_PATH`` or
``.scrapy/opic/<spider>.sqlite``; with ``OPIC_STORE = "redis"``, the crawl in Redis) or the
one given with ``--state`` (a file, a JOBDIR, or ``redis://host:port/db#KEY``), read-only."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from scrapy.commands import ScrapyCommand

from .._backends import StoreError, is_redis_location


def given_state(location: str) -> str:
    """The state ``--state`` names: a file, a Redis crawl, or a directory holding one (a
    JOBDIR: its ``opic.sqlite``)."""
    if is_redis_location(location) or not os.path.isdir(location):
        return location
    inside = os.path.join(location, "opic.sqlite")
    if not os.path.isfile(inside):
        raise StoreError(
            f"{location} is a directory with no OPIC state (a JOBDIR holds it in opic.sqlite)"
        )
    return inside


class StateCommand(ScrapyCommand):
    """A command over one spider's OPIC state: argument parsing and the one-line errors.

    Every expected failure (no state, a corrupt file, a bad option) ends as ``error: ...`` on
    stderr and exit code 1 (2 for usage), never a traceback.
    """

    requires_project = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "SPIDER [options]"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        # (No colon that a line could end on: Scrapy's help formatter takes a line ending in ":"
        # for a heading, and underlines it.)
        parser.add_argument(
            "--state",
            metavar="PATH",
            help="a state file, a JOBDIR, or redis://HOST:PORT/DB#KEY (by default the spider's "
            "own state, where its crawl kept it)",
        )

    def state_file(self, args: list[str], opts: argparse.Namespace) -> str | None:
        from .._settings import OpicSettings, unknown_settings
        from .._state import state_location

        for line in unknown_settings(self.settings):
            print(f"warning: {line}", file=sys.stderr)
        if opts.state:
            return self.guarded(lambda: given_state(opts.state))
        if len(args) != 1:
            self.fail("give one spider name (or --state PATH)", code=2)
            return None
        self._spider = args[0]
        return self.guarded(
            lambda: state_location(OpicSettings.from_settings(self.settings), args[0])
        )

    def explain(self, exc: StoreError) -> str:
        """The message of a missing state, saying so when the spider is not one of the
        project's (a typo) rather than only that its state is missing."""
        spider = getattr(self, "_spider", None)
        if spider is None or "no OPIC state at" not in str(exc):
            return str(exc)
        from scrapy.utils.project import inside_project

        if not inside_project():
            return (
                f"{exc}, and this is not a Scrapy project (no scrapy.cfg here or above): run "
                "the command in the spider's project, or give --state PATH"
            )
        return self.unknown_spider(spider) or str(exc)

    def unknown_spider(self, spider: str) -> str | None:
        """The error for a spider that is not one of the project's (a typo), if it is not;
        None outside a project, or if its spiders do not import (nothing known to say)."""
        from scrapy.utils.project import inside_project

        if not inside_project():
            return None
        try:
            from scrapy.spiderloader import get_spider_loader

            assert self.settings is not None  # (Scrapy sets them before it runs a command)
            known = sorted(get_spider_loader(self.settings).list())
        except Exception:  # its spiders do not import: say what we know
            return None
        if spider in known:
            return None
        return f"unknown spider {spider!r} (this project's spiders: {', '.join(known) or 'none'})"

    def fail(self, message: str, code: int = 1) -> None:
        print(f"error: {message}", file=sys.stderr)
        self.exitcode = code

    def guarded(self, action: Callable[[], Any]) -> Any:
        """Run ``action``; turn the errors a user can cause into one line and an exit code. A
        reader that went away (``| head``) ends the command quietly, as it would ``cat``."""
        try:
            return action()
        except BrokenPipeError:
            # Nothing more can reach the reader; Python's final flush of stdout must not
            # complain about it either.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except StoreError as exc:
            self.fail(self.explain(exc))
        except (ValueError, OSError) as exc:
            self.fail(str(exc))
        except ImportError as exc:
            self.fail(f"{exc} (pip install 'scrapy-opic[report]')")
        return None
