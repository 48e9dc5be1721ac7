"""Scale: the OPIC scheduler against Scrapy's own as the frontier grows.

    python benchmarks/scale.py crawl [--pages 10000] [--links 100] [--back 0] [--repeats 3]
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

Each mode writes its own section of ``benchmarks/results/scale.md`` (other sections are kept)
and its own key of ``scale.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REPO = ROOT.parent
sys.path.insert(0, str(REPO))  # run as a script: this checkout's scrapy_opic

RESULTS = ROOT / "results" / "scale.md"
HOST = "web.test"
SCHEDULERS = ("scrapy", "opic")

#: The four lines of the README's quick start (tests/crawl_runner.py's ``opic`` order).
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
    import resource

    options = json.loads(args.options)
    if args.scheduler == "opic":  # the code in memory before the baseline, as Scrapy's is
        import scrapy_opic.scheduler  # noqa: F401
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
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (KiB on Linux)
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
    sub = ap.add_subparsers(dest="mode", required=True, metavar="{crawl}")
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
    one = sub.add_parser("_one")  # one crawl, in the child process
    one.add_argument("scheduler", choices=SCHEDULERS)
    one.add_argument("--options", required=True)
    one.add_argument("--jobdir", required=True)
    one.add_argument("--result", required=True)
    one.add_argument("--profile")
    args = ap.parse_args(argv)
    if args.mode == "_one":
        return run_one(args)
    command = "python benchmarks/scale.py " + shlex.join(argv)
    return run_crawl(args, command)


if __name__ == "__main__":
    sys.exit(main())
