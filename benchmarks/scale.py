"""Scale: the OPIC scheduler against Scrapy's own as the frontier grows.

    python -m benchmarks.scale crawl [--pages 10000] [--links 100] [--back 0] [--repeats 3]
        [--schedulers scrapy,opic] [--concurrency 32] [--hosts 1] [--log-level ERROR]
        [--profile DIR] [--out benchmarks/results/scale.md]

``crawl``: real Scrapy crawls of an in-process web (no sockets: a download handler makes every
page on the spot) where every page links to ``--links`` new URLs, so that a crawl of 10,000 pages
knows 1,000,000 URLs. Each crawl runs in a fresh process with a ``JOBDIR`` of its own, under
Scrapy's default scheduler (``scrapy``: disk queues, LIFO) and under OPIC (``opic``: the four
settings lines of the README), alternating (scrapy, opic, scrapy, opic...) in the same run, and
is measured from inside that process: pages/s overall and per tenth of the crawl, RSS (peak,
before the crawl, at each tenth), the URLs known, bytes of RSS per known URL, and the size of the
JOBDIR at the end.

``--profile DIR`` runs each crawl under cProfile (its ``.prof`` file in DIR) and prints the top
entries by cumulative and by own time; the results file is then left alone (profiled figures
are not speeds).

    python -m benchmarks.scale frontier [--urls 1000000,10000000] [--links 100] [--inflight 16]
        [--filing schedule|visit] [--blocking-commits 3] [--no-kill] [--kill-urls N]
        [--kill-after 4] [--workdir /work/tmp-scale] [--out benchmarks/results/scale.md]

``frontier``: the embedded store at 1 and 10 million URLs, with no Scrapy engine: a child process
opens ``SqliteFrontier`` as the scheduler does with a JOBDIR (``scrapy_opic._state.open_frontier``,
OPIC's defaults) and makes the scheduler's calls (pops up to ``--inflight`` leases, a visit whose
page links to ``--links`` new URLs, one ``schedule`` per request with its pickled
``Request.to_dict()``, the periodic upkeep) until the frontier knows ``--urls`` URLs. Reported:
RSS per known URL (after ``malloc_trim(0)``) with the structures' own ``nbytes()``, visits per
second in each tenth of the URLs, what each checkpoint writes and costs (``last_commit``; the last
``--blocking-commits`` are ``commit(wait=True)``), a ``kill -9`` of a driver (at the smallest size)
and its resume (lost visits, total cash), the resume of each state in a fresh process timed to the
first lease (split by step), and the CSV export and ``top(25)`` in a fresh process each (peak RSS
over the baseline). States live in a temporary directory under ``--workdir``, removed at the end.

Each mode writes its own section of ``benchmarks/results/scale.md`` (other sections are kept)
and its own key of ``scale.json`` beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import re
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from benchmarks._harness import child_env, peak_rss

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent


RESULTS = ROOT / "results" / "scale.md"
HOST = "web.test"
SCHEDULERS = ("scrapy", "opic")

#: The four lines of the README's quick start (tests/support/crawl_runner.py's ``opic`` order).
OPIC_SETTINGS = {
    "SCHEDULER": "scrapy_opic.OpicScheduler",
    "SPIDER_MIDDLEWARES": {"scrapy_opic.OpicSpiderMiddleware": 75},
    "DOWNLOADER_MIDDLEWARES": {"scrapy_opic.OpicDownloaderMiddleware": 540},
    "EXTENSIONS": {"scrapy_opic.OpicLogStats": 500},
}

MB = 1024 * 1024


# -- the in-process web ---------------------------------------------------------------------
def page_url(k: int, hosts: int = 1) -> str:
    """Page ``k``'s URL: ``http://web.test/p/<k>`` (with ``hosts`` > 1, on host ``h<k % hosts>``
    of web.test, one download slot each)."""
    host = HOST if hosts <= 1 else f"h{k % hosts}.{HOST}"
    return f"http://{host}/p/{k}"


def page_body(k: int, links: int, back: int, hosts: int = 1) -> bytes:
    """Page ``k`` of a tree: links to the ``links`` new pages ``k*links+1`` ..
    ``k*links+links`` (no other page links to them), then ``back`` links to its ancestors
    (parent, grandparent... up to the root: low-numbered pages, fetched already, so that every
    back link is a duplicate)."""
    first = k * links + 1
    hrefs = [page_url(i, hosts) for i in range(first, first + links)]
    up = k
    for _ in range(back):
        if up == 0:
            break
        up = (up - 1) // links
        hrefs.append(page_url(up, hosts))
    inner = "".join(f'<a href="{h}">{h[-6:]}</a>\n' for h in hrefs)
    return f"<html><head><title>{k}</title></head><body>\n{inner}</body></html>".encode()


_PAGE = re.compile(r"/p/(\d+)$")
_HREF = re.compile(rb'href="([^"]+)"')


def _classes(options: dict):
    """The handler, spider and meter of a crawl (Scrapy is imported in the child only)."""
    import scrapy
    from scrapy import signals
    from scrapy.core.downloader.handlers.base import BaseDownloadHandler
    from scrapy.http import HtmlResponse

    links, back, hosts = options["links"], options["back"], options["hosts"]

    class WebHandler(BaseDownloadHandler):
        """The ``http`` download handler: every page made on the spot, no socket, no delay."""

        lazy = False

        async def download_request(self, request):
            m = _PAGE.search(request.url)
            if m is None:
                return HtmlResponse(request.url, status=404, body=b"", encoding="utf-8")
            body = page_body(int(m.group(1)), links, back, hosts)
            return HtmlResponse(request.url, body=body, encoding="utf-8")

    class FanOutSpider(scrapy.Spider):
        """Follows every link of every page (a regex over the body: no link extractor, no
        selector, so that the scheduler's share of the time shows)."""

        name = "fanout"
        start_urls = [page_url(0, hosts)]
        parsed = 0

        def parse(self, response):
            self.parsed += 1
            for m in _HREF.finditer(response.body):
                yield scrapy.Request(m.group(1).decode("ascii"))

    class Meter:
        """Times the crawl from inside: engine start, each tenth of ``pages`` responses (and the
        RSS and the pages parsed then), the spider closed (after the scheduler's close)."""

        marks: list[int] = []
        started = closed = 0.0
        seen = 0
        tenths: list[dict] = []

        def __init__(self, crawler) -> None:
            self.crawler = crawler
            pages = options["pages"]
            cls = type(self)
            cls.marks = [-(-pages * k // 10) for k in range(1, 11)]  # ceil
            cls.tenths = []
            crawler.signals.connect(self.engine_started, signal=signals.engine_started)
            crawler.signals.connect(self.response_received, signal=signals.response_received)
            crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        def engine_started(self) -> None:
            type(self).started = time.perf_counter()

        def response_received(self, response, request, spider) -> None:
            cls = type(self)
            cls.seen += 1
            if cls.seen in cls.marks:
                cls.tenths.append(
                    {
                        "responses": cls.seen,
                        "t": time.perf_counter() - cls.started,
                        "rss": vm_rss(),
                        "parsed": spider.parsed,
                    }
                )

        def spider_closed(self, spider, reason) -> None:
            type(self).closed = time.perf_counter()

    return WebHandler, FanOutSpider, Meter


def vm_rss() -> int:
    """This process's resident set now, in bytes (``VmRSS``)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def disk_usage(path: Path) -> tuple[int, int]:
    """Bytes on disk (allocated blocks, as ``du``) and apparent bytes of the files under
    ``path``."""
    used = size = 0
    for p in path.rglob("*"):
        if p.is_file():
            st = p.stat()
            used += st.st_blocks * 512
            size += st.st_size
    return used, size


# -- one crawl (the child process) ----------------------------------------------------------
def crawl_settings(scheduler: str, options: dict, jobdir: Path, handler, meter) -> dict:
    settings = {
        "JOBDIR": str(jobdir),
        "CONCURRENT_REQUESTS": options["concurrency"],
        "CLOSESPIDER_PAGECOUNT": options["pages"],
        "LOG_LEVEL": options["log_level"],
        "DOWNLOAD_HANDLERS": {"http": handler},
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "EXTENSIONS": {meter: 0},
    }
    if scheduler == "opic":
        for name, value in OPIC_SETTINGS.items():
            settings[name] = (
                {**settings.get(name, {}), **value} if isinstance(value, dict) else value
            )
    elif scheduler != "scrapy":
        raise ValueError(f"unknown scheduler {scheduler!r}")
    return settings


def known_urls(scheduler: str, stats: dict) -> int:
    """The URLs the scheduler knows at the end: for Scrapy's, the requests it queued (each a new
    fingerprint: its dupefilter refused the others, ``dupefilter/filtered``, which are
    repeats of these); for OPIC, the pages of its frontier (``opic/pages``)."""
    if scheduler == "opic":
        return int(stats.get("opic/pages", 0))
    return int(stats.get("scheduler/enqueued", 0))


def run_one(args: argparse.Namespace) -> int:

    options = json.loads(args.options)
    if args.scheduler == "opic":  # the code in memory before the baseline, as Scrapy's is
        import scrapy_opic._scheduler  # noqa: F401
    import scrapy.core.scheduler  # noqa: F401
    import scrapy.pqueues  # noqa: F401
    import scrapy.squeues  # noqa: F401
    from scrapy.crawler import CrawlerProcess

    handler, spider_cls, meter = _classes(options)
    jobdir = Path(args.jobdir)
    process = CrawlerProcess(crawl_settings(args.scheduler, options, jobdir, handler, meter))
    crawler = process.create_crawler(spider_cls)
    process.crawl(crawler)
    import gc

    gc.collect()
    baseline = vm_rss()
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    process.start()
    t1 = time.perf_counter()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    after = vm_rss()
    peak = peak_rss()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float))}
    used, size = disk_usage(jobdir)
    result = {
        "scheduler": args.scheduler,
        "responses": meter.seen,
        "parsed": crawler.spider.parsed,
        "wall": meter.closed - meter.started,
        "process_start_to_end": t1 - t0,
        "tenths": meter.tenths,
        "baseline_rss": baseline,
        "peak_rss": peak,
        "rss_after": after,
        "known": known_urls(args.scheduler, stats),
        "enqueued": int(stats.get("scheduler/enqueued", 0)),
        "filtered": int(stats.get("dupefilter/filtered", 0)),
        "finish_reason": crawler.stats.get_value("finish_reason"),
        "jobdir_bytes": used,
        "jobdir_apparent_bytes": size,
        "stats": {k: v for k, v in stats.items() if k.startswith(("opic/", "scheduler/"))},
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


# -- the crawl mode (the parent) --------------------------------------------------------------
def spawn(scheduler: str, options: dict, workdir: Path, profile: Path | None) -> dict:
    """One crawl in a fresh Python process; its measurements."""
    result = workdir / "result.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "_one",
        scheduler,
        "--options",
        json.dumps(options),
        "--jobdir",
        str(workdir / "jobdir"),
        "--result",
        str(result),
    ]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=workdir)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"the {scheduler} crawl failed (exit {proc.returncode})")
    out = json.loads(result.read_text())
    out["process_wall"] = time.perf_counter() - t0
    return out


def derive(run: dict, options: dict) -> dict:
    """Pages/s overall and per tenth, bytes per known URL, from a child's measurements."""
    pages = options["pages"]
    run["pages_per_s"] = run["responses"] / run["wall"] if run["wall"] > 0 else 0.0
    rates = []
    prev_n, prev_t = 0, 0.0
    for tenth in run["tenths"]:
        dt = tenth["t"] - prev_t
        rates.append((tenth["responses"] - prev_n) / dt if dt > 0 else float("inf"))
        prev_n, prev_t = tenth["responses"], tenth["t"]
    run["tenth_rates"] = rates
    tenths = run["tenths"]
    last = tenths[-1] if tenths else None
    run["crawl_s"] = last["t"] if last else run["wall"]  # engine start to the last page
    run["close_s"] = run["wall"] - run["crawl_s"]
    run["rss_end"] = last["rss"] if last else run["rss_after"]
    known = max(run["known"], 1)
    run["peak_per_url"] = run["peak_rss"] / known
    run["grown_per_url"] = (run["rss_end"] - run["baseline_rss"]) / known
    # The marginal cost: RSS grown between the first and the last tenth over the URLs the
    # spider linked meanwhile (1 + links per page parsed: every tree link is a new URL).
    if len(tenths) >= 2 and tenths[-1]["parsed"] > tenths[0]["parsed"]:
        urls = (tenths[-1]["parsed"] - tenths[0]["parsed"]) * options["links"]
        run["marginal_per_url"] = (tenths[-1]["rss"] - tenths[0]["rss"]) / urls
    else:
        run["marginal_per_url"] = None
    run["linked"] = 1 + run["parsed"] * options["links"]
    run["complete"] = run["responses"] >= pages
    return run


def _mb(n: float) -> str:
    return f"{n / MB:,.0f}"


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def crawl_report(command: str, options: dict, runs: list[dict]) -> str:
    """The "Fan-out crawl" section: one row per crawl, the medians, the tenths."""
    import scrapy

    per_page = options["links"] + options["back"]
    lines = [
        f"Generated by `{command}` ({os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}, Scrapy {scrapy.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}).",
        "",
        f"An in-process web (a download handler, no sockets) of {options['hosts']} host(s) "
        f"where every page links to {options['links']} new URLs"
        + (f" and back to {options['back']} of its ancestors" if options["back"] else "")
        + f" ({per_page} links a page); the crawl stops at CLOSESPIDER_PAGECOUNT="
        f"{options['pages']:,}; CONCURRENT_REQUESTS={options['concurrency']}, JOBDIR set, "
        f"LOG_LEVEL={options['log_level']}. `scrapy`: Scrapy's default scheduler (disk queues "
        "under JOBDIR, LIFO); `opic`: the README's four settings lines, OPIC's defaults. Each "
        "crawl in a fresh process, the two alternating. Wall time: engine start to spider "
        "closed (the scheduler's close, which writes JOBDIR, included; `close s` is the part "
        "after the last page). Known URLs: `scheduler/enqueued` for Scrapy (its dupefilter "
        "refuses the repeats), `opic/pages` for OPIC. B/URL: peak RSS / known URLs; grown: "
        "(RSS at the last page - RSS before the crawl) / known URLs; marginal: RSS grown from "
        "the first tenth to the last / the URLs linked meanwhile.",
        "",
        "| # | scheduler | pages | wall s | close s | pages/s | OPIC / Scrapy | known URLs "
        "| peak RSS MB | RSS before MB | RSS at last page MB | B/URL peak | B/URL grown "
        "| B/URL marginal | JOBDIR MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for run in runs:
        ratio = ""
        if run["scheduler"] == "opic":
            mate = next(
                (r for r in runs if r["repeat"] == run["repeat"] and r["scheduler"] == "scrapy"),
                None,
            )
            if mate is not None and mate["pages_per_s"] > 0:
                value = run["pages_per_s"] / mate["pages_per_s"]
                ratios.append(value)
                ratio = f"{value:.2f}"
        lines.append(
            f"| {run['repeat'] + 1} | {run['scheduler']} | {run['responses']:,}"
            f"{'' if run['complete'] else ' (short)'} | {run['wall']:.1f} | "
            f"{run['close_s']:.1f} | {run['pages_per_s']:.1f} | {ratio} | {run['known']:,} | "
            f"{_mb(run['peak_rss'])} | {_mb(run['baseline_rss'])} | {_mb(run['rss_end'])} | "
            f"{run['peak_per_url']:,.0f} | {run['grown_per_url']:,.0f} | "
            f"{_fmt(run['marginal_per_url'])} | {_mb(run['jobdir_bytes'])} |"
        )
    lines += [
        "",
        "Medians:",
        "",
        "| scheduler | crawls | pages/s | OPIC / Scrapy | peak RSS MB | B/URL peak | B/URL grown "
        "| B/URL marginal | JOBDIR MB | last tenth / second tenth pages/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in SCHEDULERS:
        mine = [r for r in runs if r["scheduler"] == name]
        if not mine:
            continue
        drift = _median(
            [
                r["tenth_rates"][-1] / r["tenth_rates"][1]
                for r in mine
                if len(r["tenth_rates"]) == 10 and r["tenth_rates"][1] > 0
            ]
        )
        ratio = _median(ratios) if name == "opic" else None
        lines.append(
            f"| {name} | {len(mine)} | {_fmt(_median([r['pages_per_s'] for r in mine]), '.1f')}"
            f" | {_fmt(ratio, '.2f') if ratio is not None else ''} | "
            f"{_mb(_median([r['peak_rss'] for r in mine]))} | "
            f"{_fmt(_median([r['peak_per_url'] for r in mine]))} | "
            f"{_fmt(_median([r['grown_per_url'] for r in mine]))} | "
            f"{_fmt(_median([r['marginal_per_url'] for r in mine]))} | "
            f"{_mb(_median([r['jobdir_bytes'] for r in mine]))} | {_fmt(drift, '.2f')} |"
        )
    lines += [
        "",
        "Pages/s in each tenth of the crawl (the first includes the start):",
        "",
        "| # | scheduler | " + " | ".join(f"{k}0%" for k in range(1, 11)) + " |",
        "|---|---|" + "---|" * 10,
    ]
    for run in runs:
        rates = " | ".join(f"{v:.1f}" for v in run["tenth_rates"])
        lines.append(f"| {run['repeat'] + 1} | {run['scheduler']} | {rates} |")
    lines += [
        "",
        "Known URLs and RSS at each tenth (URLs linked: 1 + links x pages parsed):",
        "",
        "| # | scheduler | " + " | ".join(f"{k}0%" for k in range(1, 11)) + " |",
        "|---|---|" + "---|" * 10,
    ]
    for run in runs:
        cells = " | ".join(
            f"{1 + t['parsed'] * options['links']:,} / {_mb(t['rss'])} MB" for t in run["tenths"]
        )
        lines.append(f"| {run['repeat'] + 1} | {run['scheduler']} | {cells} |")
    odd = [
        r
        for r in runs
        if r["known"] != r["linked"]
        or not r["complete"]
        or r["finish_reason"] != "closespider_pagecount"
    ]
    if odd:
        lines += ["", "Notes:", ""]
        for r in odd:
            lines.append(
                f"* crawl {r['repeat'] + 1} ({r['scheduler']}): {r['responses']:,} responses, "
                f"{r['parsed']:,} parsed, finish reason {r['finish_reason']}; the scheduler "
                f"knows {r['known']:,} URLs, 1 + links x pages parsed is {r['linked']:,} "
                f"({r['enqueued']:,} enqueued, {r['filtered']:,} duplicates filtered)."
            )
        if options["back"] and any(r["scheduler"] == "scrapy" for r in odd):
            lines.append(
                "* Scrapy's start request is `dont_filter` (its URL never enters the dupefilter): "
                "the first back link to the root fetches it again, and its links are then "
                "duplicates. OPIC does not fetch a start page twice."
            )
    return "\n".join(lines) + "\n"


def print_profile(path: Path, top: int = 40) -> None:
    """The top entries by cumulative and by own time, of the whole crawl and of scrapy_opic's
    functions alone. (cProfile sees the main thread: the time sqlitedict's writer thread takes
    shows only as the main thread waiting for the GIL.)"""
    import pstats

    for only in (None, "scrapy_opic"):
        for order in ("cumulative", "tottime"):
            where = f"{only}'s functions" if only else "all"
            print(f"\n### {path.name}: {where}, top {top} by {order}\n")
            stats = pstats.Stats(str(path), stream=sys.stdout).sort_stats(order)
            stats.print_stats(*([only] if only else []), top)


def run_crawl(args: argparse.Namespace, command: str) -> int:
    options = {
        "pages": args.pages,
        "links": args.links,
        "back": args.back,
        "hosts": args.hosts,
        "concurrency": args.concurrency,
        "log_level": args.log_level,
    }
    schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    for s in schedulers:
        if s not in SCHEDULERS:
            raise SystemExit(f"unknown scheduler {s!r} (choose from {', '.join(SCHEDULERS)})")
    runs = []
    profiles = []
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    for repeat in range(args.repeats):
        for name in schedulers:
            profile = args.profile / f"{name}-{repeat + 1}.prof" if args.profile else None
            with tempfile.TemporaryDirectory(prefix=f"scale-{name}-") as tmp:
                run = spawn(name, options, Path(tmp), profile)
            run["repeat"] = repeat
            derive(run, options)
            runs.append(run)
            if profile is not None:
                profiles.append(profile)
            print(
                f"[{repeat + 1}/{args.repeats}] {name}: {run['responses']:,} pages in "
                f"{run['wall']:.1f} s ({run['pages_per_s']:.1f} pages/s), peak RSS "
                f"{_mb(run['peak_rss'])} MB, {run['known']:,} URLs known, JOBDIR "
                f"{_mb(run['jobdir_bytes'])} MB",
                file=sys.stderr,
                flush=True,
            )
    body = crawl_report(command, options, runs)
    print(f"## {CRAWL_TITLE}\n\n{body}")
    if profiles:
        for path in profiles:
            print_profile(path)
        return 0  # profiled speeds are not speeds: the results file stays as it was
    write_section(args.out, CRAWL_TITLE, body)
    write_json(args.out.with_suffix(".json"), "crawl", {"command": command, "runs": runs})
    return 0


# -- the frontier mode: the embedded store's contract driven directly ---------------------------
FRONTIER_TITLE = "Frontier at scale: the embedded store driven as the scheduler drives it"
SPIDER = "fanout"


def fingerprint(url: str) -> bytes:
    """A page's key: 20 bytes, as Scrapy's request fingerprints (SHA-1 of the URL here)."""
    return hashlib.sha1(url.encode()).digest()


def request_template() -> dict:
    """``Request.to_dict()`` of a real Scrapy request of the fan-out spider (``parse`` callback,
    ``meta={"depth": d}``): what the scheduler stores in a JOBDIR state. Each page's request
    is this dict with its own URL and depth, pickled whole as the scheduler's ``_encode`` did
    before it stored only the fields that differ from a new request's
    (``scrapy_opic._scheduler.encode_request``): the rows measured here are the larger ones."""
    import scrapy

    class FanOut(scrapy.Spider):
        name = SPIDER

        def parse(self, response):  # pragma: no cover - never called
            return None

    spider = FanOut()
    request = scrapy.Request(page_url(0), callback=spider.parse, meta={"depth": 0})
    return request.to_dict(spider=spider)


def request_of(template: dict, k: int, depth: int) -> dict:
    data = dict(template)
    data["url"] = page_url(k)
    data["meta"] = {"depth": depth}
    return data


def encode_request(data: dict) -> bytes:
    """The scheduler's earlier ``_encode`` after ``to_dict``: ``pickle.dumps(..., protocol=4)``."""
    return pickle.dumps(data, protocol=4)


def malloc_trim() -> bool:
    """Hand the heap's free memory back to the system (glibc ``malloc_trim(0)``) before an RSS
    reading, so that RSS counts what is held, not what malloc kept after freeing it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def io_written() -> dict[str, int]:
    """This process's (all threads') I/O so far, from ``/proc/self/io`` (zeros where it is not
    available): ``wchar`` (bytes passed to ``write()``, the page cache included),
    ``write_bytes`` (bytes sent to storage) and ``read_bytes`` (bytes read from storage: what
    the page cache did not hold)."""
    out = {"wchar": 0, "write_bytes": 0, "read_bytes": 0}
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in out:
                    out[name] = int(value)
    except OSError:
        pass
    return out


def thread_cpu(tid: int | None) -> float:
    """CPU seconds (user + system) of thread ``tid`` of this process (0 if unknown)."""
    if tid is None:
        return 0.0
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def file_sizes(path: Path) -> dict[str, int]:
    """Apparent sizes of a state file and of its ``-wal`` beside it."""
    out = {}
    for suffix in ("", "-wal"):
        p = Path(f"{path}{suffix}")
        out["db" if not suffix else "wal"] = p.stat().st_size if p.exists() else 0
    return out


def _crawl_imports() -> None:
    """What a Scrapy crawl process with OPIC has imported before its first page, so that every
    baseline below includes it."""
    import scrapy.crawler  # noqa: F401
    import twisted.internet.reactor  # noqa: F401

    import scrapy_opic._scheduler  # noqa: F401


def _opic_settings(jobdir: Path):
    """The settings of a crawl with ``JOBDIR`` and OPIC's defaults (what the scheduler reads)."""
    from scrapy_opic._settings import OpicSettings

    return OpicSettings.from_settings({"JOBDIR": str(jobdir)})


def _open(jobdir: Path):
    """The frontier exactly as the scheduler opens it (:func:`scrapy_opic._state.open_frontier`
    with a JOBDIR: a resumable embedded store, resumed if the JOBDIR holds a state)."""
    from scrapy_opic._state import open_frontier

    settings = _opic_settings(jobdir)
    meta = {"spider": SPIDER, "settings": settings.as_dict()}
    return settings, open_frontier(settings, SPIDER, encode_request, meta)


def run_drive(args: argparse.Namespace) -> int:
    """The child that drives a fresh frontier until it knows ``--urls`` URLs: the scheduler's
    calls in the scheduler's order, with no Scrapy engine around them."""
    import gc

    from scrapy_opic.opic.frontier import Entry, Link

    options = json.loads(args.options)
    target, links, inflight = args.urls, options["links"], options["inflight"]
    progress = args.progress
    _crawl_imports()
    template = request_template()
    jobdir = Path(args.jobdir)
    gc.collect()
    malloc_trim()
    rss_imports = vm_rss()
    settings, frontier = _open(jobdir)
    path = Path(frontier.location)
    engine = frontier.engine
    conn = frontier.store.db.conn  # sqlitedict's writer thread (a read-only look at its queue)
    writer_tid = getattr(conn, "native_id", None)
    interval = settings.commit_visits
    # The last commits before the target are blocking (commit(wait=True)): their wall time is
    # what a checkpoint costs from the caller's side, the writer's work included.
    blocking_from = target - options["blocking_commits"] * interval * links
    commits: list[dict] = []
    last_io = io_written()
    original_commit = frontier.commit

    def commit(wait: bool = False) -> None:
        nonlocal last_io
        n = engine.n
        block = wait or n >= blocking_from
        t0 = time.perf_counter()
        original_commit(wait=block)
        wall = time.perf_counter() - t0
        io = io_written()
        record = {
            "visits": engine.visit_count,
            "n": n,
            "blocking": block,
            "close": closing,
            "wall": wall,
            **frontier.store.last_commit,
            "wchar": io["wchar"] - last_io["wchar"],
            "write_bytes": io["write_bytes"] - last_io["write_bytes"],
            "queue": conn.reqs.qsize(),
        }
        last_io = io
        if block:
            record.update(file_sizes(path))
        commits.append(record)
        if progress:
            print("c", engine.visit_count, flush=True)

    closing = False
    frontier.commit = commit  # (the frontier calls self.commit: this wrapper)
    # As the scheduler: a due checkpoint waits until the links a visit paid are filed (its
    # unfiled requests; each leaves the count just before its schedule call).
    unfiled = [0]
    frontier.ready = lambda: not unfiled[0]
    gc.collect()
    malloc_trim()
    rss_before = vm_rss()
    marks = [-(-target * k // 10) for k in range(1, 11)]
    deciles: list[dict] = []
    overhead = 0.0  # seconds spent measuring (RSS readings), taken out of the rates
    held: deque = deque()
    visits = pops = 0
    root = page_url(0)
    t_start = time.perf_counter()
    main_cpu0 = time.process_time()
    last_tick = t_start
    frontier.schedule([Entry(fingerprint(root), root, 0, HOST, request_of(template, 0, 0))])
    while engine.n < target:
        while len(held) < inflight:  # the scheduler's pops: up to its slot's limit in flight
            lease = frontier.pop(())
            if lease is None:
                break
            pops += 1
            held.append(lease)
        if not held:
            break
        lease = held.popleft()
        payload = lease.payload
        request = pickle.loads(payload) if isinstance(payload, bytes) else payload
        k = int(request["url"].rsplit("/", 1)[1])
        depth = request["meta"]["depth"] + 1
        first = k * links + 1
        kids = range(first, first + links)
        urls = [page_url(j) for j in kids]
        keys = [fingerprint(u) for u in urls]
        if options["filing"] == "visit":  # links filed by the visit (a shared frontier's way)
            frontier.visit(
                lease,
                [
                    Link(key, u, slot=HOST, payload=request_of(template, j, depth))
                    for key, u, j in zip(keys, urls, kids)
                ],
            )
        else:
            # The in-process scheduler's way: the visit pays the links (no payload: each code
            # NEEDS_PAYLOAD), then each request is filed on its own as it reaches
            # enqueue_request.
            frontier.visit(lease, [Link(key, u) for key, u in zip(keys, urls)])
            unfiled[0] = len(keys)
            for key, u, j in zip(keys, urls, kids):
                unfiled[0] -= 1
                frontier.schedule([Entry(key, u, 0, HOST, request_of(template, j, depth))])
        visits += 1
        if progress:
            print("v", visits, flush=True)
        now = time.perf_counter()
        if now - last_tick >= frontier.maintain_interval:  # the scheduler's upkeep tick
            frontier.maintain(list(held))
            frontier.figures()
            frontier.top_page()
            last_tick = now
        while len(deciles) < 10 and engine.n >= marks[len(deciles)]:
            m0 = time.perf_counter()
            malloc_trim()
            rss = vm_rss()
            deciles.append(
                {
                    "n": engine.n,
                    "t": m0 - t_start - overhead,
                    "visits": visits,
                    "pops": pops,
                    "rss": rss,
                    "commit_s": sum(c["wall"] for c in commits),
                    "commits": len(commits),
                    "queue": conn.reqs.qsize(),
                    "writer_cpu": thread_cpu(writer_tid),
                    "main_cpu": time.process_time() - main_cpu0,
                }
            )
            overhead += time.perf_counter() - m0
    t_end = time.perf_counter()
    gc.collect()
    malloc_trim()
    rss_end = vm_rss()
    peak = peak_rss()
    status = frontier.status
    parts = {
        "engine": engine.nbytes(),
        "index": frontier.keys.nbytes(),
        "selection": frontier.selection.nbytes(),
        "status_outcome_tier": len(status)
        + frontier.outcome.itemsize * len(frontier.outcome)
        + frontier.tier.itemsize * len(frontier.tier),
    }
    index = frontier.keys.index
    # What the index holds resident: its hashes for the pages known (the room past them is
    # calloc'd, untouched) and its whole table.
    parts_resident = {"index": 8 * len(index) + 4 * index.table_size}
    counts = dict(zip(("discovered", "pending", "in_flight", "visited"), frontier.counts))
    state = {
        "capacity": engine.capacity,
        "request_cache": len(frontier._cache),
        "payloads_in_memory": len(frontier.payloads),
        "queue": conn.reqs.qsize(),
        "counts": counts,
        "total_cash": frontier.total_cash(),
        "writer_cpu": thread_cpu(writer_tid),
        "main_cpu": time.process_time() - main_cpu0,
        "sizes_before_close": file_sizes(path),
    }
    closing = True
    t0 = time.perf_counter()
    frontier.close(list(held))
    close_s = time.perf_counter() - t0
    used, size = disk_usage(jobdir)
    result = {
        "urls": engine.n,
        "target": target,
        "visits": visits,
        "pops": pops,
        "wall": t_end - t_start - overhead,
        "measure_overhead_s": overhead,
        "close_s": close_s,
        "rss_imports": rss_imports,
        "rss_before": rss_before,
        "rss_end": rss_end,
        "peak_rss": peak,
        "parts": parts,
        "parts_resident": parts_resident,
        "state": state,
        "deciles": deciles,
        "commits": commits,
        "commit_visits": interval,
        "commit_seconds": settings.commit_seconds,
        "memory_requests": settings.memory_requests,
        "request_bytes": len(encode_request(request_of(template, target, 3))),
        "jobdir_bytes": used,
        "jobdir_apparent_bytes": size,
        "malloc_trim": malloc_trim(),
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


class _Timer:
    """Seconds spent inside some functions (wrapped on their class for one child process; the
    package is not changed)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, label: str, kind: str = "method") -> None:
        raw = owner.__dict__[name]
        func = raw.__func__ if kind == "classmethod" else raw
        seconds = self.seconds

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return func(*a, **kw)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, classmethod(timed) if kind == "classmethod" else timed)


def count_rows(path: Path, table: str) -> int:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    finally:
        con.close()


def run_resume(args: argparse.Namespace) -> int:
    """The child that resumes a state: the scheduler's open of its JOBDIR, timed to the first
    pop that hands out a lease, with the time inside each step of the load."""
    import gc

    from scrapy_opic._backends import sqlite as backend
    from scrapy_opic.opic.index import KeyIndex
    from scrapy_opic.opic.selection import TieredSelection

    _crawl_imports()
    jobdir = Path(args.jobdir)
    path = jobdir / "opic.sqlite"
    timer = _Timer()
    timer.wrap(backend.StateReader, "__init__", "reader_open")
    timer.wrap(backend.StateReader, "saved", "saved")
    timer.wrap(backend.StateReader, "meta", "meta")
    timer.wrap(KeyIndex, "from_hashes", "index", "classmethod")
    timer.wrap(backend.SqliteStore, "__init__", "store_open")
    timer.wrap(backend.SqliteFrontier, "_resume", "resume_arrays")
    timer.wrap(TieredSelection, "load", "selection")
    gc.collect()
    malloc_trim()
    rss_base = vm_rss()
    io0 = io_written()
    t0 = time.perf_counter()
    _settings, frontier = _open(jobdir)
    t1 = time.perf_counter()
    lease = frontier.pop(())
    t2 = time.perf_counter()
    read_bytes = io_written()["read_bytes"] - io0["read_bytes"]
    steps = dict(timer.seconds)
    malloc_trim()
    rss_after = vm_rss()
    peak = peak_rss()
    engine = frontier.engine
    counts = dict(zip(("discovered", "pending", "in_flight", "visited"), frontier.counts))
    # Every pending page has its request row (the popped one's row stays until its visit).
    requests = count_rows(path, backend.REQUESTS_TABLE)
    total = frontier.total_cash()
    # The same open without quick_check: the check's share of the reader's open.
    t3 = time.perf_counter()
    with backend.StateReader(path):
        pass
    plain_open = time.perf_counter() - t3
    t4 = time.perf_counter()
    frontier.close([lease] if lease is not None else [])
    close_s = time.perf_counter() - t4
    # quick_check once more, now that the resume has read the file: with the page cache
    # holding it, what the check itself costs.
    io1 = io_written()
    t5 = time.perf_counter()
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        con.execute("PRAGMA quick_check").fetchall()
    finally:
        con.close()
    check_again = time.perf_counter() - t5
    read_again = io_written()["read_bytes"] - io1["read_bytes"]
    result = {
        "open_s": t1 - t0,
        "first_pop_s": t2 - t1,
        "to_first_lease_s": t2 - t0,
        "lease": lease is not None,
        "steps": steps,
        "reader_open_unchecked_s": plain_open,
        "rss_base": rss_base,
        "rss_after": rss_after,
        "peak_rss": peak,
        "n": engine.n,
        "visits": engine.visit_count,
        "counts": counts,
        "request_rows": requests,
        "total_cash": total,
        "close_s": close_s,
        "read_bytes": read_bytes,
        "state_bytes": path.stat().st_size,
        "quick_check_again_s": check_again,
        "quick_check_again_read_bytes": read_again,
    }
    Path(args.result).write_text(json.dumps(result))
    return 0


def run_export(args: argparse.Namespace) -> int:
    """The child that reads a state as ``scrapy opic-export`` does: the full CSV export, or the
    top pages, with its peak RSS over its own baseline."""
    import gc

    import scrapy  # noqa: F401  (the export command runs in a Scrapy process)

    from scrapy_opic.export import open_state, write_export

    gc.collect()
    malloc_trim()
    rss_base = vm_rss()
    peak_base = peak_rss()
    t0 = time.perf_counter()
    with open_state(Path(args.jobdir) / "opic.sqlite") as state:
        if args.kind == "csv":
            rows = write_export(state, args.out)
            out_bytes = Path(args.out).stat().st_size
        else:
            rows = len(state.top(25))
            out_bytes = 0
    seconds = time.perf_counter() - t0
    peak = peak_rss()
    result = {
        "kind": args.kind,
        "seconds": seconds,
        "rows": rows,
        "out_bytes": out_bytes,
        "rss_base": rss_base,
        "peak_before": peak_base,
        "peak_rss": peak,
    }
    if args.kind == "csv":
        os.unlink(args.out)
    Path(args.result).write_text(json.dumps(result))
    return 0


def _child(mode: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.scale", mode, *extra]


def _run_child(cmd: list[str], result: Path, what: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env())
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"{what} failed (exit {proc.returncode})")
    out = json.loads(result.read_text())
    result.unlink()
    out["process_wall"] = time.perf_counter() - t0
    return out


def drive(urls: int, options: dict, jobdir: Path) -> dict:
    result = jobdir.parent / "drive.json"
    cmd = _child("_drive", "--urls", str(urls), "--options", json.dumps(options))
    cmd += ["--jobdir", str(jobdir), "--result", str(result)]
    return _run_child(cmd, result, f"driving the frontier to {urls:,} URLs")


def resume(jobdir: Path) -> dict:
    result = jobdir.parent / "resume.json"
    cmd = _child("_resume", "--jobdir", str(jobdir), "--result", str(result))
    return _run_child(cmd, result, f"resuming {jobdir}")


def export(jobdir: Path, kind: str) -> dict:
    result = jobdir.parent / f"export-{kind}.json"
    cmd = _child("_export", kind, "--jobdir", str(jobdir), "--result", str(result))
    cmd += ["--out", str(jobdir.parent / "export.csv")]
    return _run_child(cmd, result, f"the {kind} export of {jobdir}")


def kill_trial(urls: int, options: dict, workdir: Path, when: str, after: int) -> dict:
    """Drive a fresh frontier in a child and SIGKILL it after ``after`` full-interval commits:
    halfway to the next one (``when="mid"``) or the moment a commit is issued, while its rows
    are being written (``when="commit"``); then resume the state in a fresh process."""
    jobdir = workdir / f"kill-{when}" / "jobdir"
    jobdir.mkdir(parents=True)
    interval = options["commit_visits"]
    cmd = _child("_drive", "--urls", str(urls), "--options", json.dumps(options))
    cmd += ["--jobdir", str(jobdir), "--result", str(jobdir.parent / "unused.json"), "--progress"]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, text=True)
    issued: list[int] = []  # visit count of each commit issued
    done = 0  # visits completed

    def read(line: str) -> None:
        nonlocal done
        kind, _, value = line.partition(" ")
        if kind == "c":
            issued.append(int(value))
            # (A checkpoint can be taken inside a visit, while its links are filed: the
            # visit is done, in the engine's count, before its "v" line is printed.)
            done = max(done, int(value))
        elif kind == "v":
            done = int(value)

    killed_at = None
    assert proc.stdout is not None
    for line in proc.stdout:
        read(line)
        full = [c for c in issued if c >= interval]  # (past the first commits' doubling ramp)
        if len(full) >= after and (
            (when == "commit" and line.startswith("c") and issued[-1] >= interval)
            or (when == "mid" and done >= full[-1] + interval // 2)
        ):
            killed_at = done
            proc.send_signal(signal.SIGKILL)
            break
    rest = proc.stdout.read()  # what the child wrote before it died
    proc.wait()
    for line in rest.splitlines():
        read(line)
    if killed_at is None:
        raise RuntimeError("the driver ended before it could be killed")
    back = resume(jobdir)
    trial = {
        "when": when,
        "signal_at_visits": killed_at,
        "visits_done": done,
        "last_commit_issued": issued[-1] if issued else 0,
        "commits_issued": len(issued),
        "returncode": proc.returncode,
        "resumed_visits": back["visits"],
        "lost_visits": done - back["visits"],
        "commit_visits": interval,
        "resume": back,
    }
    shutil.rmtree(jobdir.parent)
    return trial


def frontier_report(command: str, options: dict, sizes: list[dict], kills: list[dict]) -> str:
    """The frontier section: memory, speed per tenth, commits, kill -9, resume, export."""
    import numpy
    import scrapy

    first = sizes[0]["drive"] if sizes else {}
    lines = [
        f"Generated by `{command}` ({os.cpu_count()} cores shared, Python "
        f"{sys.version.split()[0]}, Scrapy {scrapy.__version__}, numpy {numpy.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}).",
        "",
        "A process driving `SqliteFrontier` as `OpicScheduler` does with a JOBDIR (opened by "
        "`scrapy_opic._state.open_frontier` with OPIC's default settings: greedy, epsilon 0.15, "
        f"refresh 0, unbounded window, requests persisted, OPIC_MEMORY_REQUESTS="
        f"{first.get('memory_requests', '?')}, OPIC_COMMIT_VISITS="
        f"{first.get('commit_visits', '?')}, OPIC_COMMIT_SECONDS="
        f"{first.get('commit_seconds', '?')}), with no Scrapy engine: up to "
        f"{options['inflight']} pages leased at a time (the scheduler's limit for one download "
        "slot: twice the 8 requests per domain), then the oldest lease visited: each visited "
        f"page links to {options['links']} new pages (`http://web.test/p/<k>`, key: SHA-1 of "
        "the URL, 20 bytes; slot `web.test`), "
        + (
            "paid by the visit (links without payload, each code NEEDS_PAYLOAD) and then filed "
            "one `schedule([Entry])` call each, as the in-process scheduler files each request "
            "when it reaches `enqueue_request`"
            if options["filing"] == "schedule"
            else "filed by the visit itself (links with their payloads, a shared frontier's way)"
        )
        + f"; each request is Scrapy's `Request.to_dict()` of the fan-out spider's request "
        f"(URL, `parse`, meta depth) pickled as the scheduler does "
        f"({first.get('request_bytes', '?')} bytes). The scheduler's upkeep tick "
        "(`maintain`, `figures`, `top_page`) runs every `maintain_interval` seconds, and a due "
        "checkpoint waits for the visit's links to be filed (the scheduler's `ready`). Scrapy, "
        "Twisted's reactor and `scrapy_opic._scheduler` are imported before any baseline. The "
        f"last {options['blocking_commits']} checkpoints before the target are blocking "
        "(`commit(wait=True)`), the others periodic (non-blocking, as in a crawl). Every RSS "
        "figure is read after `gc.collect()` and glibc `malloc_trim(0)`.",
        "",
        *_goals(sizes, kills),
        "### Memory",
        "",
        "B/URL: bytes of RSS per known URL; grown: (RSS at the end - RSS before the first "
        "page) / URLs. Peak is `ru_maxrss`.",
        "",
        "| URLs known | visits | RSS after imports MB | RSS before first page MB | RSS at end MB "
        "| peak RSS MB | B/URL (end RSS) | B/URL grown | B/URL marginal | goal <= 100 B/URL "
        "| JOBDIR MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        d = s["drive"]
        n = d["urls"]
        per, grown = d["rss_end"] / n, (d["rss_end"] - d["rss_before"]) / n
        first_, last_ = d["deciles"][0], d["deciles"][-1]
        marginal = (
            (last_["rss"] - first_["rss"]) / (last_["n"] - first_["n"])
            if last_["n"] > first_["n"]
            else None
        )
        lines.append(
            f"| {n:,} | {d['visits']:,} | {_mb(d['rss_imports'])} | {_mb(d['rss_before'])} | "
            f"{_mb(d['rss_end'])} | {_mb(d['peak_rss'])} | {per:,.1f} | {grown:,.1f} | "
            f"{_fmt(marginal, ',.1f')} | {'yes' if per <= 100 else 'no'} | "
            f"{_mb(d['jobdir_bytes'])} |"
        )
    lines += [
        "",
        "Marginal: RSS grown from the first tenth of the URLs to the last over the URLs added "
        "meanwhile.",
    ]
    lines += [
        "",
        "Where the grown RSS is, by the structures' own `nbytes()`, in bytes per known URL. "
        "`nbytes()` counts each array at its capacity (room for pages, doubled as the frontier "
        "grows). The engine's arrays and the index's hash array grow by `np.zeros` (calloc: "
        "the room past the pages written is not resident): `rows` is the engine's nbytes for "
        "the pages known, `resident` the index's hashes for the pages known plus its whole "
        "table. The status, outcome and tier arrays (`bytearray`/`array` extended with zeros) "
        "and the selection's positions (`array('i')` extended with -1) are written out to "
        "capacity, so resident: `room` is their share for the pages not known yet, "
        "(capacity - URLs) x 11 B.",
        "",
        "| URLs known | capacity | engine (capacity) | engine (rows) | index (capacity) "
        "| index (resident) | selection | status+outcome+tier | sum (rows, resident) "
        "| RSS grown | other (grown - sum) | of the sum: room | requests in memory "
        "| writer queue at end |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        d = s["drive"]
        n, p, st = d["urls"], d["parts"], d["state"]
        rows = p["engine"] * n / st["capacity"]
        index = d["parts_resident"]["index"]
        total = rows + index + p["selection"] + p["status_outcome_tier"]
        grown = d["rss_end"] - d["rss_before"]
        room = (st["capacity"] - n) * 11
        lines.append(
            f"| {n:,} | {st['capacity']:,} | {p['engine'] / n:.1f} | {rows / n:.1f} | "
            f"{p['index'] / n:.1f} | {index / n:.1f} | {p['selection'] / n:.1f} | "
            f"{p['status_outcome_tier'] / n:.1f} | {total / n:.1f} | {grown / n:.1f} | "
            f"{(grown - total) / n:.1f} | {room / n:.1f} | "
            f"{st['request_cache'] + st['payloads_in_memory']:,} | {st['queue']:,} |"
        )
    lines += [
        "",
        "### Speed as the frontier grows",
        "",
        "Visits per second in each tenth of the URLs (each visit: one pop, one `visit` with "
        f"{options['links']} links, {options['links']} schedules; a pop and a visit per "
        "visit, so pops+visits/s is twice these). Last/first: the tenth 100% rate over the "
        "10% one (1 = no slowdown). Commit s: time inside `commit()` calls, all tenths.",
        "",
        "| URLs known | " + " | ".join(f"{k}0%" for k in range(1, 11)) + " | last/second "
        "| wall s | commit s | writer thread CPU s | main thread CPU s |",
        "|---|" + "---|" * 10 + "---|---|---|---|---|",
    ]
    for s in sizes:
        d = s["drive"]
        rates = _decile_rates(d["deciles"])
        drift = rates[-1] / rates[1] if len(rates) == 10 and rates[1] else None
        st = d["state"]
        lines.append(
            f"| {d['urls']:,} | "
            + " | ".join(f"{r:,.0f}" for r in rates)
            + f" | {_fmt(drift, '.2f')} | {d['wall']:,.0f} | "
            f"{sum(c['wall'] for c in d['commits'] if not c['close']):,.1f} | "
            f"{st['writer_cpu']:,.0f} | {st['main_cpu']:,.0f} |"
        )
    lines += [
        "",
        "RSS (MB) and the sqlitedict writer's queue (statements waiting) at each tenth:",
        "",
        "| URLs known | " + " | ".join(f"{k}0%" for k in range(1, 11)) + " |",
        "|---|" + "---|" * 10,
    ]
    for s in sizes:
        d = s["drive"]
        cells = " | ".join(f"{_mb(t['rss'])} / {t['queue']:,}" for t in d["deciles"])
        lines.append(f"| {d['urls']:,} | {cells} |")
    lines += [
        "",
        "### Checkpoints",
        "",
        "`SqliteStore.last_commit` of the periodic checkpoints in the last tenth "
        "(non-blocking: `build s` and the call's wall time are the caller's share; the "
        "writer thread writes the rows) and of the blocking ones (`commit(wait=True)`: the "
        "wall time includes writing the rows queued since the previous checkpoint, the "
        "request rows of the interval among them, and sqlite's COMMIT). Means per checkpoint. "
        "Written: `/proc/self/io` `wchar` (bytes passed to `write()` by the process, the "
        "WAL's and the checkpoints' copies back into the file included) between two "
        "checkpoints.",
        "",
        "| URLs known | kind | checkpoints | blocks | block MB | new pages | page MB | build s "
        "| call wall s | written MB (wchar) | to disk MB (write_bytes) | WAL MB after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        d = s["drive"]
        n = d["urls"]
        periodic = [
            c for c in d["commits"] if not c["blocking"] and not c["close"] and c["n"] >= 0.9 * n
        ]
        blocking = [c for c in d["commits"] if c["blocking"] and not c["close"]]
        for kind, group in (("periodic", periodic), ("blocking", blocking)):
            if not group:
                continue

            def mean(key: str, group: list = group) -> float:
                return statistics.fmean(c.get(key, 0) for c in group)

            lines.append(
                f"| {n:,} | {kind} | {len(group)} | {mean('blocks'):,.0f} | "
                f"{mean('block_bytes') / MB:,.1f} | {mean('pages'):,.0f} | "
                f"{mean('page_bytes') / MB:,.1f} | {mean('seconds'):.3f} | {mean('wall'):.3f} | "
                f"{mean('wchar') / MB:,.1f} | {mean('write_bytes') / MB:,.1f} | "
                f"{mean('wal') / MB if kind == 'blocking' else 0:,.0f} |"
            )
        close = [c for c in d["commits"] if c["close"]]
        if close:
            c = close[-1]
            lines.append(
                f"| {n:,} | close | 1 | {c['blocks']:,} | {c['block_bytes'] / MB:,.1f} | "
                f"{c['pages']:,} | {c['page_bytes'] / MB:,.1f} | {c['seconds']:.3f} | "
                f"{c['wall']:.3f} | {c['wchar'] / MB:,.1f} | {c['write_bytes'] / MB:,.1f} | "
                f"{c.get('wal', 0) / MB:,.0f} |"
            )
    if kills:
        lines += [
            "",
            "### kill -9",
            "",
            f"A fresh driver to {kills[0]['urls']:,} URLs in a child process, sent SIGKILL "
            "after a few checkpoints past the first ones' doubling ramp: halfway between two "
            "checkpoints (`mid`), or the moment a checkpoint was issued, its rows still being "
            "written by the writer thread (`commit`). Visits done: the visits the child had "
            "reported before it died. Then the JOBDIR is resumed in a fresh process. Lost: "
            "visits done - visits in the resumed state (goal: at most one interval, "
            f"{kills[0]['commit_visits']} visits). Pending (in flight ones back to pending) vs "
            "request rows; discovered: pages known with no request (none in this web, where "
            "each page is scheduled as it is discovered).",
            "",
            "| trial | exit | visits done | last checkpoint issued at | resumed visits | lost "
            "| <= interval | total cash after resume | abs(cash - 1) | pages | pending "
            "| request rows | discovered | resume s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for k in kills:
            r = k["resume"]
            cash = r["total_cash"]
            pending = r["counts"]["pending"] + r["counts"]["in_flight"]
            lines.append(
                f"| {k['when']} | {k['returncode']} | {k['visits_done']:,} | "
                f"{k['last_commit_issued']:,} | {k['resumed_visits']:,} | {k['lost_visits']:,} "
                f"| {'yes' if k['lost_visits'] <= k['commit_visits'] else 'no'} | {cash:.15f} "
                f"| {abs(cash - 1):.1e} | {r['n']:,} | {pending:,} | {r['request_rows']:,} | "
                f"{r['counts']['discovered']:,} | {r['to_first_lease_s']:.2f} |"
            )
    lines += [
        "",
        "### Resume",
        "",
        "The state reopened in a fresh process by the scheduler's call (`open_frontier`, "
        "JOBDIR: `SqliteFrontier.open(..., resume=True)`), timed to the first `pop()` that "
        "hands out a lease, as a restart would: the state was just written, but the page "
        "cache need not hold it all (`read from disk`: `/proc/self/io` `read_bytes` during "
        "the resume; this VM reclaims cold page cache). Steps, timed "
        "around the package's functions from the benchmark: the read-only open with "
        "`quick_check` (`StateReader.__init__`; `unchecked`: the same open without the check, "
        "done afterwards), the block load (`StateReader.saved` minus the index rebuild inside "
        "it), the index rebuild (`KeyIndex.from_hashes`), the store's open for writing "
        "(`SqliteStore.__init__`: WAL switch, tables), the frontier's arrays and the selection "
        "(`SqliteFrontier._resume`, of which `TieredSelection.load`). `quick_check again`: "
        "`PRAGMA quick_check` on a new connection after the resume (the file read once "
        "already). Goal: <= 10 s.",
        "",
        "| URLs known | state MB | to first lease s | open s | first pop s "
        "| reader open + quick_check s | unchecked s | block load s | index rebuild s "
        "| store open s | resume arrays s | of which selection load s | read from disk MB "
        "| quick_check again s | RSS before MB | RSS after resume MB | peak MB | total cash "
        "| close s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        r, n = s["resume"], s["drive"]["urls"]
        st = r["steps"]
        saved = st.get("saved", 0.0) - st.get("index", 0.0)
        lines.append(
            f"| {n:,} | {_mb(r['state_bytes'])} | {r['to_first_lease_s']:.2f} | "
            f"{r['open_s']:.2f} | {r['first_pop_s']:.3f} | {st.get('reader_open', 0):.2f} | "
            f"{r['reader_open_unchecked_s']:.3f} | {saved:.2f} | {st.get('index', 0):.2f} | "
            f"{st.get('store_open', 0):.2f} | {st.get('resume_arrays', 0):.2f} | "
            f"{st.get('selection', 0):.2f} | {_mb(r['read_bytes'])} | "
            f"{r['quick_check_again_s']:.2f} | {_mb(r['rss_base'])} | {_mb(r['rss_after'])} | "
            f"{_mb(r['peak_rss'])} | {r['total_cash']:.12f} | {r['close_s']:.2f} |"
        )
    lines += [
        "",
        "### Export",
        "",
        "In a fresh process each (Scrapy imported, as the `opic-export` command has it): "
        "`open_state(path)` then `write_export(state, out.csv)` (every page), and "
        "`open_state(path).top(25)`. Peak over baseline: `ru_maxrss` - RSS before "
        "`open_state`. Goal: bounded (the same at 1M and 10M).",
        "",
        "| URLs known | export | s | rows | output MB | RSS before MB | peak RSS MB "
        "| peak over baseline MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        n = s["drive"]["urls"]
        for e in (s["csv"], s["top"]):
            what = "CSV, all pages" if e["kind"] == "csv" else "top(25)"
            lines.append(
                f"| {n:,} | {what} | {e['seconds']:,.1f} | {e['rows']:,} | "
                f"{_mb(e['out_bytes'])} | {_mb(e['rss_base'])} | {_mb(e['peak_rss'])} | "
                f"{_mb(e['peak_rss'] - e['rss_base'])} |"
            )
    return "\n".join(lines) + "\n"


def _goals(sizes: list[dict], kills: list[dict]) -> list[str]:
    """The issue's goals against the figures below, largest size last."""
    if not sizes:
        return []
    small, big = sizes[0], sizes[-1]
    d, n = big["drive"], big["drive"]["urls"]
    per = d["rss_end"] / n
    rates = _decile_rates(d["deciles"])
    drift = rates[-1] / rates[1] if len(rates) == 10 and rates[1] else None

    def blocking(s: dict) -> float:
        walls = [c["wall"] for c in s["drive"]["commits"] if c["blocking"] and not c["close"]]
        return statistics.fmean(walls) if walls else float("nan")

    def peak(s: dict, kind: str) -> float:
        e = s[kind]
        return (e["peak_rss"] - e["rss_base"]) / MB

    rows = [
        (
            f"RSS per known URL at {n:,} URLs <= 100 B",
            f"{per:,.1f} B/URL at the end ({(d['rss_end'] - d['rss_before']) / n:,.1f} grown; "
            f"peak {d['peak_rss'] / n:,.1f})",
            per <= 100,
        ),
        (
            "no slowdown as the frontier grows",
            f"last tenth / second tenth visits/s: {_fmt(drift, '.2f')}",
            drift is not None and drift >= 0.9,
        ),
        (
            "a checkpoint costs what changed",
            f"blocking checkpoint {blocking(small):.3f} s at {small['drive']['urls']:,} URLs, "
            f"{blocking(big):.3f} s at {n:,}",
            blocking(big) <= 2 * blocking(small),
        ),
    ]
    if kills:
        worst_cash = max(abs(k["resume"]["total_cash"] - 1) for k in kills)
        worst_lost = max(k["lost_visits"] for k in kills)
        rows.append(
            (
                "kill -9: cash 1 within 1e-9, at most one interval of visits lost",
                f"max abs(cash - 1) {worst_cash:.1e}; max lost {worst_lost:,} visits "
                f"(interval {kills[0]['commit_visits']})",
                worst_cash <= 1e-9 and worst_lost <= kills[0]["commit_visits"],
            )
        )
    resume_s = big["resume"]["to_first_lease_s"]
    rows += [
        (
            f"resume at {n:,} URLs <= 10 s",
            f"{resume_s:.1f} s to the first lease, of which "
            f"{big['resume']['steps'].get('reader_open', 0):.1f} s open + quick_check",
            resume_s <= 10,
        ),
        (
            "export in bounded memory",
            f"CSV peak over baseline {peak(small, 'csv'):,.0f} MB at "
            f"{small['drive']['urls']:,} URLs, {peak(big, 'csv'):,.0f} MB at {n:,}; top(25) "
            f"{peak(small, 'top'):,.0f} / {peak(big, 'top'):,.0f} MB",
            peak(big, "csv") <= 1.25 * peak(small, "csv"),
        ),
    ]
    lines = ["### Goals", "", "| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {g} | {m} | {'yes' if ok else '**no**'} |" for g, m, ok in rows]
    return lines + [""]


def _decile_rates(deciles: list[dict]) -> list[float]:
    rates, prev_v, prev_t = [], 0, 0.0
    for d in deciles:
        dt = d["t"] - prev_t
        rates.append((d["visits"] - prev_v) / dt if dt > 0 else float("inf"))
        prev_v, prev_t = d["visits"], d["t"]
    return rates


def run_frontier(args: argparse.Namespace, command: str) -> int:
    sizes = sorted({int(x.replace("_", "")) for x in args.urls.split(",") if x.strip()})
    options = {
        "links": args.links,
        "inflight": args.inflight,
        "filing": args.filing,
        "blocking_commits": args.blocking_commits,
        "commit_visits": _opic_settings(Path(".")).commit_visits,
    }
    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="frontier-", dir=args.workdir))
    results: list[dict] = []
    kills: list[dict] = []
    kill_size = args.kill_urls or (sizes[0] if sizes else 0)

    def say(text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    try:
        for n in sizes:
            jobdir = work / f"urls-{n}" / "jobdir"
            jobdir.mkdir(parents=True)
            say(f"{n:,} URLs: driving...")
            d = drive(n, options, jobdir)
            say(
                f"{n:,} URLs: {d['visits']:,} visits in {d['wall']:.0f} s, RSS "
                f"{_mb(d['rss_end'])} MB ({d['rss_end'] / d['urls']:.1f} B/URL), JOBDIR "
                f"{_mb(d['jobdir_bytes'])} MB; resuming..."
            )
            r = resume(jobdir)
            say(f"{n:,} URLs: resumed in {r['to_first_lease_s']:.2f} s; exporting...")
            csv = export(jobdir, "csv")
            top = export(jobdir, "top")
            say(
                f"{n:,} URLs: CSV export {csv['seconds']:.1f} s, peak +"
                f"{_mb(csv['peak_rss'] - csv['rss_base'])} MB; top(25) {top['seconds']:.1f} s"
            )
            results.append({"drive": d, "resume": r, "csv": csv, "top": top})
            shutil.rmtree(jobdir.parent)
            if n == kill_size and args.kill:
                for when in ("mid", "commit"):
                    say(f"{n:,} URLs: kill -9 ({when})...")
                    trial = kill_trial(n, options, work, when, args.kill_after)
                    trial["urls"] = n
                    kills.append(trial)
                    say(
                        f"kill -9 ({when}): {trial['visits_done']:,} visits done, "
                        f"{trial['resumed_visits']:,} resumed, cash "
                        f"{trial['resume']['total_cash']:.12f}"
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = frontier_report(command, options, results, kills)
    print(f"## {FRONTIER_TITLE}\n\n{body}")
    write_section(args.out, FRONTIER_TITLE, body)
    for r in results:
        trim_commits(r["drive"])
    write_json(
        args.out.with_suffix(".json"),
        "frontier",
        {"command": command, "options": options, "sizes": results, "kills": kills},
    )
    return 0


def trim_commits(run: dict) -> dict:
    """A drive's checkpoints for the JSON file: totals over all of them, and the records of
    those the report reads (the last tenth's, the blocking ones, the close's)."""
    commits = run["commits"]
    if "commits_total" in run:
        return run
    n = run["urls"]
    run["commits_total"] = {
        "count": len(commits),
        "wall": sum(c["wall"] for c in commits),
        "seconds": sum(c.get("seconds", 0.0) for c in commits),
        "block_bytes": sum(c.get("block_bytes", 0) for c in commits),
        "page_bytes": sum(c.get("page_bytes", 0) for c in commits),
        "wchar": sum(c["wchar"] for c in commits),
    }
    run["commits"] = [c for c in commits if c["n"] >= 0.9 * n or c["blocking"] or c["close"]]
    return run


# -- the results file: one section per mode ----------------------------------------------------
TITLE = "# Scale: the OPIC scheduler as the frontier grows"
CRAWL_TITLE = "Fan-out crawl"


def write_section(path: Path, title: str, body: str) -> None:
    """Put ``## title`` with ``body`` into the markdown file ``path``, in place of that section
    if the file has it (the other modes' sections are kept as they are)."""
    text = path.read_text() if path.exists() else f"{TITLE}\n"
    parts = re.split(r"(?m)^(?=## )", text)
    head, sections = parts[0], parts[1:]
    new = f"## {title}\n\n{body.rstrip()}\n\n"
    for i, section in enumerate(sections):
        if section.splitlines()[0].strip() == f"## {title}":
            sections[i] = new
            break
    else:
        sections.append(new)
    if not head.endswith("\n\n"):
        head = head.rstrip("\n") + "\n\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((head + "".join(sections)).rstrip("\n") + "\n")


def write_json(path: Path, key: str, value: dict) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True, metavar="{crawl,frontier}")
    c = sub.add_parser("crawl", help="real Scrapy crawls of an in-process fan-out web")
    c.add_argument("--pages", type=int, default=10_000, help="CLOSESPIDER_PAGECOUNT")
    c.add_argument("--links", type=int, default=100, help="new URLs linked by each page")
    c.add_argument("--back", type=int, default=0, help="links back to each page's ancestors")
    c.add_argument("--hosts", type=int, default=1, help="hosts the pages are spread over")
    c.add_argument("--concurrency", type=int, default=32, help="CONCURRENT_REQUESTS")
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--schedulers", default=",".join(SCHEDULERS), help="in this order, each repeat")
    c.add_argument("--log-level", default="ERROR", choices=("ERROR", "WARNING", "INFO", "DEBUG"))
    c.add_argument("--profile", type=Path, help="run under cProfile, .prof files in this dir")
    c.add_argument("--out", type=Path, default=RESULTS)
    f = sub.add_parser("frontier", help="the embedded frontier driven directly, at scale")
    f.add_argument("--urls", default="1000000,10000000", help="URLs known at the end, per run")
    f.add_argument("--links", type=int, default=100, help="new URLs linked by each page")
    f.add_argument("--inflight", type=int, default=16, help="leases held at a time")
    f.add_argument(
        "--filing",
        choices=("schedule", "visit"),
        default="schedule",
        help="schedule: each request filed by a schedule call after the visit (the in-process "
        "scheduler); visit: links filed with their payloads by the visit",
    )
    f.add_argument(
        "--blocking-commits", type=int, default=3, help="the last N checkpoints are blocking"
    )
    f.add_argument("--no-kill", dest="kill", action="store_false", help="skip the kill -9 check")
    f.add_argument("--kill-urls", type=int, help="size of the kill -9 check (default: smallest)")
    f.add_argument("--kill-after", type=int, default=4, help="full-interval checkpoints first")
    f.add_argument("--workdir", type=Path, default=Path("/work/tmp-scale"), help="states here")
    f.add_argument("--out", type=Path, default=RESULTS)
    one = sub.add_parser("_one")  # one crawl, in the child process
    one.add_argument("scheduler", choices=SCHEDULERS)
    one.add_argument("--options", required=True)
    one.add_argument("--jobdir", required=True)
    one.add_argument("--result", required=True)
    one.add_argument("--profile")
    dr = sub.add_parser("_drive")  # the frontier mode's children
    dr.add_argument("--urls", type=int, required=True)
    dr.add_argument("--options", required=True)
    dr.add_argument("--jobdir", required=True)
    dr.add_argument("--result", required=True)
    dr.add_argument("--progress", action="store_true", help="print each visit and checkpoint")
    re_ = sub.add_parser("_resume")
    re_.add_argument("--jobdir", required=True)
    re_.add_argument("--result", required=True)
    ex = sub.add_parser("_export")
    ex.add_argument("kind", choices=("csv", "top"))
    ex.add_argument("--jobdir", required=True)
    ex.add_argument("--result", required=True)
    ex.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    children = {"_one": run_one, "_drive": run_drive, "_resume": run_resume, "_export": run_export}
    if args.mode in children:
        return children[args.mode](args)
    command = "python -m benchmarks.scale " + shlex.join(argv)
    if args.mode == "frontier":
        return run_frontier(args, command)
    return run_crawl(args, command)


if __name__ == "__main__":
    sys.exit(main())
