"""A fresh Scrapy project on disk, as ``scrapy startproject`` would make it plus the one OPIC
line, and a way to run its commands as a user would (``scrapy crawl`` in a subprocess)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SETTINGS = """\
BOT_NAME = "proj"
SPIDER_MODULES = ["proj.spiders"]
ADDONS = {"scrapy_opic.Addon": 0}
ROBOTSTXT_OBEY = False
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 4
"""

SPIDERS = """\
import scrapy


class SiteSpider(scrapy.Spider):
    name = "site"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start_url=None, **kw):
        super().__init__(**kw)
        self.start_urls = [start_url]

    def parse(self, response):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)


class OtherSpider(SiteSpider):
    name = "other"

    def parse(self, response):
        raise NotImplementedError("not this spider's pages")
"""


def _limit_files(size: int):
    def limit() -> None:  # (in the child, before exec)
        import resource
        import signal

        # A write past the limit fails (EFBIG) instead of killing the process (SIGXFSZ).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

    return limit


@dataclass
class Run:
    returncode: int
    out: str  # stdout and stderr, interleaved

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def errors(self) -> list[str]:
        """The log's ERROR and CRITICAL lines, and the lines of any traceback."""
        return [
            ln
            for ln in self.lines
            if " ERROR: " in ln or " CRITICAL: " in ln or ln.startswith("Traceback")
        ]


class Project:
    """A project directory with the spiders ``site`` (follows every link of 127.0.0.1) and
    ``other`` (another spider's code)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        (self.root / "proj" / "spiders").mkdir(parents=True, exist_ok=True)
        (self.root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
        (self.root / "proj" / "__init__.py").write_text("")
        (self.root / "proj" / "settings.py").write_text(SETTINGS)
        (self.root / "proj" / "spiders" / "__init__.py").write_text(SPIDERS)

    def scrapy(
        self,
        *args: str,
        timeout: float = 120,
        stdin: str | None = None,
        file_size_limit: int | None = None,
    ) -> Run:
        """Run ``scrapy ARGS`` in the project. ``file_size_limit``: no file the process writes
        may grow beyond that many bytes (``RLIMIT_FSIZE``: a write past it fails with EFBIG, as
        one on a full disk fails with ENOSPC)."""
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.run(
            [sys.executable, "-m", "scrapy", *args],
            cwd=self.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            input=stdin,
            preexec_fn=None if file_size_limit is None else _limit_files(file_size_limit),
        )
        return Run(proc.returncode, proc.stdout)

    def files(self, *under: str) -> dict[str, str]:
        """Path -> sha256 of every file under ``under`` (default: the project), but bytecode."""
        roots = [self.root / u for u in under] if under else [self.root]
        out = {}
        for root in roots:
            for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
                if p.is_file() and "__pycache__" not in p.parts:
                    out[str(p.relative_to(self.root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        return out
