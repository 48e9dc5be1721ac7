"""Regenerate the committed results: every page of ``benchmarks/results/`` names at its top the
command that wrote it (a page of several sections, one per section); this runs those commands.

    python -m benchmarks                 # every page (hours: the largest runs have 10M URLs)
    python -m benchmarks scale boost     # the pages of these benchmarks only
    python -m benchmarks --list          # the commands, without running them

Commands that need a server of their own (a Redis URL in their arguments) or a git revision are
run as written: start that server, or check out that revision, first."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys

from benchmarks._harness import REPO, RESULTS

COMMAND = re.compile(r"`(python -m benchmarks\.(\w+)(?: [^`]*)?)`")


def commands(names: set[str] | None = None) -> list[str]:
    """The commands that wrote the results pages, once each, page by page (a page's first
    command, and the first of each of its sections)."""
    found: dict[str, None] = {}
    for page in sorted(RESULTS.glob("*.md")):
        heads = [page.read_text().split("\n## ")[0]]
        heads += [s for s in page.read_text().split("\n## ")[1:] if COMMAND.search(s)]
        for head in heads:
            m = COMMAND.search(head)
            if m and (names is None or m.group(2) in names):
                found[m.group(1)] = None
    return list(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", help="benchmarks to rerun (default: all)")
    p.add_argument("--list", action="store_true", help="print the commands only")
    args = p.parse_args(argv)
    todo = commands(set(args.names) or None)
    if not todo:
        p.error(f"no results page was written by {', '.join(args.names)}")
    for cmd in todo:
        print(cmd, flush=True)
        if not args.list:
            argv_ = [sys.executable, *shlex.split(cmd)[1:]]
            subprocess.run(argv_, cwd=REPO, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
