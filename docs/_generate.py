"""Pages of the documentation made from the code when the site is built, so that they cannot
disagree with it: every setting (from ``scrapy_opic._settings.SETTINGS``, the one table) and
every command's options (from the commands' own parsers)."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from pathlib import Path


def settings_page() -> str:
    from scrapy_opic._settings import SETTINGS

    lines = [
        "# Settings",
        "",
        "Every `OPIC_*` setting, read and checked once when the crawl starts: a bad value ends",
        "the crawl before any request, with one error line naming the setting; a misspelled",
        "name gets a warning naming the closest setting. Set them as any Scrapy setting",
        "(`settings.py`, `custom_settings`, `-s NAME=VALUE`).",
        "",
    ]
    for s in SETTINGS:
        lines += [
            f"## {s.name}",
            "",
            f"Default: `{s.default!r}`",
            "",
            s.meaning[0].upper() + s.meaning[1:] + ("" if s.meaning.endswith(".") else "."),
            "",
        ]
    return "\n".join(lines)


def commands_page() -> str:
    from scrapy.settings import Settings

    lines = [
        "# Commands",
        "",
        "Installed with the package (Scrapy finds them through its `scrapy.commands` entry",
        "point). Each reads a spider's OPIC state read-only (`opic-feed` adds start URLs to",
        "its feed and writes nothing else): where its crawl kept it (the project's settings:",
        "`JOBDIR`, `OPIC_STATE_PATH`, or the Redis crawl), or the one `--state` names. An",
        "expected failure is one `error: ...` line and exit code 1.",
        "",
    ]
    commands = [ep for ep in entry_points(group="scrapy.commands") if ep.name.startswith("opic-")]
    for ep in sorted(commands, key=lambda e: e.name):
        command = ep.load()()
        command.settings = Settings()
        parser = argparse.ArgumentParser(
            prog=f"scrapy {ep.name}",
            usage=f"scrapy {ep.name} {command.syntax()}",
            description=command.long_desc(),
            add_help=False,
        )
        command.add_options(parser)
        text = parser.format_help().split("\nGlobal Options:")[0].rstrip()
        lines += [
            f"## scrapy {ep.name}",
            "",
            command.short_desc() + ".",
            "",
            "```text",
            text,
            "```",
            "",
        ]
    return "\n".join(lines)


def benchmarks_page() -> str:
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "Each page below is written by its benchmark (`python -m benchmarks.NAME`), with the",
            "command that made it at its top; the figures the other pages cite come from these.",
            "`python -m benchmarks` reruns those commands (`--list` prints them; names select",
            "some), from the checkout's root.",
            "",
            "```{toctree}",
            ":glob:",
            ":maxdepth: 1",
            "",
            "../../benchmarks/results/*",
            "```",
            "",
        ]
    )


def write_all(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("settings.md", settings_page()),
        ("commands.md", commands_page()),
        ("benchmarks.md", benchmarks_page()),
    ):
        path = out / name
        if not path.exists() or path.read_text() != text:  # (unchanged: no rebuild)
            path.write_text(text)
