"""What every benchmark shares: timing, memory, the machine's busy cores, child processes, a
crawl through the embedded store, and the results written as JSON, Markdown and PNG in
``benchmarks/results/``.

The pages and plots are committed, so plots are saved small, with a palette of at most
:data:`COLOURS` colours; floats in the JSON (kept locally) are rounded to :data:`DIGITS`
significant digits (a figure is read as a ratio or to three digits anyway).
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

#: The checkout's root, and where the results go unless a benchmark is told otherwise.
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
#: Significant digits of a float in a results JSON.
DIGITS = 4
#: Colours of a saved plot (line plots need few; a palette PNG is a fraction of an RGBA one).
COLOURS = 32
#: Dots per inch of a saved plot.
DPI = 80


def command() -> str:
    """The command that ran this benchmark, as a reader retypes it."""
    module = Path(sys.argv[0]).stem
    return " ".join(["python -m", f"benchmarks.{module}", *sys.argv[1:]])


def child_env() -> dict[str, str]:
    """The environment of a child process that imports this checkout's ``benchmarks`` and
    ``tests.support`` (run from any directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def bare_scheduler(
    path: str, jobdir: bool, work: Path, downloader: Callable[[Any], Any], **settings: Any
) -> Any:
    """The scheduler at ``path`` opened on a crawler with no engine but the downloader that
    ``downloader(crawler)`` makes (what the schedulers read of the engine), its files in a new
    directory of ``work`` (``jobdir``: that directory is the crawl's JOBDIR), ``settings`` on
    top."""
    import tempfile

    from scrapy import Spider
    from scrapy.utils.misc import load_object
    from scrapy.utils.test import get_crawler

    tmp = tempfile.mkdtemp(dir=work)
    settings = {"SCHEDULER": path, "LOG_ENABLED": False, **settings}
    settings |= {"OPIC_STATE_PATH": f"{tmp}/state.sqlite"} | ({"JOBDIR": tmp} if jobdir else {})
    crawler = get_crawler(Spider, settings)
    crawler.engine = SimpleNamespace(downloader=downloader(crawler))
    crawler.spider = Spider.from_crawler(crawler, name="overhead")
    scheduler = load_object(path).from_crawler(crawler)
    scheduler.open(crawler.spider)
    return scheduler


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """The shortest of ``repeat`` timings of ``fn()``, in seconds (the least disturbed run)."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def rss_now() -> int:
    """This process's resident bytes now (``/proc/self/statm``: Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """This process's peak resident bytes so far (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class CoreMeter:
    """The machine's busy cores (``/proc/stat``), sampled every 0.2 s on the monotonic clock
    while in the ``with`` block: :meth:`busy` over a span of it."""

    def __enter__(self) -> CoreMeter:
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            with open("/proc/stat") as fh:
                ticks = [int(x) for x in fh.readline().split()[1:]]
            self.samples.append((time.monotonic(), sum(ticks), ticks[3] + ticks[4]))
            self._stop.wait(0.2)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def busy(self, start: float, end: float) -> float:
        inside = [x for x in self.samples if start <= x[0] <= end]
        if len(inside) < 2:
            return math.nan
        (_, total0, idle0), (_, total1, idle1) = inside[0], inside[-1]
        return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(1, total1 - total0))


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def cell(value: Any) -> str:
    """A table cell: ``None`` and non-finite floats as a dash, floats to three significant
    digits (thousands separated above 1,000), integers with thousands separators, the rest as
    ``str``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table of ``rows`` under ``header``, each value through :func:`cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def page(title: str, *sections: str) -> str:
    """A results page: ``# title``, the command that wrote it (see :func:`command`), then the
    sections (Markdown: prose, tables, ``## headings``) separated by blank lines."""
    return "\n\n".join([f"# {title}", f"`{command()}`", *sections]) + "\n"


def write_results(stem: str, data: Any, markdown: str | None = None, out: Path = RESULTS) -> None:
    """``out/STEM.json`` (one line per top-level entry, floats rounded) and, with
    ``markdown``, ``out/STEM.md``."""
    out.mkdir(parents=True, exist_ok=True)
    data = _rounded(data)
    if isinstance(data, dict):
        body = ",\n".join(
            f" {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in data.items()
        )
        text = "{\n" + body + "\n}\n"
    else:
        text = json.dumps(data, separators=(",", ":")) + "\n"
    (out / f"{stem}.json").write_text(text)
    if markdown is not None:
        (out / f"{stem}.md").write_text(markdown if markdown.endswith("\n") else markdown + "\n")


def save_figure(fig: Any, path: Path) -> None:
    """A matplotlib figure as a small PNG: :data:`DPI`, a palette of :data:`COLOURS`."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    buf.seek(0)
    with Image.open(buf) as img:
        small = img.convert("RGB").quantize(COLOURS, method=Image.Quantize.FASTOCTREE)
        small.save(path, optimize=True)


class GraphCrawl:
    """A one-pass greedy crawl of ``graph`` through the embedded store's frontier, as a crawl
    writes its state to ``path``: every page known from the start (page ``i`` is ``urls[i]``),
    the crawl from page 0, each visit paying the page's links; checkpoints only when asked
    (:meth:`checkpoint`)."""

    def __init__(self, path: Path, graph: Any, urls: Sequence[str], keep_links: bool = False):
        from scrapy_opic._backends.sqlite import SqliteStore
        from scrapy_opic._state import open_crawl
        from scrapy_opic.opic.config import CrawlConfig
        from scrapy_opic.opic.contract import Entry

        never = 10**12
        self.graph, self.urls = graph, urls
        self.ids = {u: i for i, u in enumerate(urls)}
        store = SqliteStore(path, resume=False)
        config = CrawlConfig(keep_links=keep_links)
        meta = {"spider": "bench"}
        self.frontier = f = open_crawl(
            store, config, meta, str(path), commit_visits=never, commit_seconds=never
        )
        pages = f.fleet.parts[0].frontier
        for u in urls:
            pages.page(u, u)
        f.schedule([Entry(urls[0], urls[0], payload="r")])

    def visit(self, count: int) -> int:
        """Up to ``count`` visits (fewer if nothing is left to fetch): how many."""
        from scrapy_opic.opic.constants import NEEDS_PAYLOAD
        from scrapy_opic.opic.contract import Entry, Link

        f, urls, done = self.frontier, self.urls, 0
        while done < count and (lease := f.pop()) is not None:
            kids = self.graph.children(self.ids[lease.key]).tolist()
            visit = f.visit(lease, [Link(urls[j], urls[j]) for j in kids])
            wanted = [j for j, code in zip(kids, visit.codes) if code == NEEDS_PAYLOAD]
            f.schedule([Entry(urls[j], urls[j], payload="r") for j in wanted])
            done += 1
        return done

    def checkpoint(self) -> float:
        """Seconds of a checkpoint written and committed now."""
        t0 = time.perf_counter()
        self.frontier.commit(wait=True)
        return time.perf_counter() - t0


def crawled_state(
    path: Path,
    graph: Any,
    urls: Sequence[str],
    visits: int,
    keep_links: bool = False,
) -> dict[str, float]:
    """A state file of a :class:`GraphCrawl` of ``visits`` visits: its seconds, its first
    checkpoint's, a later one's (one visit more) and its bytes on disk."""
    t0 = time.perf_counter()
    crawl = GraphCrawl(path, graph, urls, keep_links)
    done = crawl.visit(visits)
    seconds = time.perf_counter() - t0
    commit = crawl.checkpoint()
    crawl.visit(1)
    recommit = crawl.checkpoint()
    crawl.frontier.close([])
    return {
        "visits": done,
        "crawl_s": seconds,
        "commit_s": commit,
        "recommit_s": recommit,
        "state_bytes": path.stat().st_size,
    }
