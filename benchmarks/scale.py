"""Scale: the OPIC scheduler against Scrapy's own as the frontier grows.

    python -m benchmarks.scale crawl [--pages 10000] [--links 100] [--back 0] [--concurrency 32]
        [--repeats 3] [--out benchmarks/results]
    python -m benchmarks.scale frontier [--urls 1000000,10000000] [--links 100] [--kill-after 4]
        [--workdir /work/tmp-scale] [--out benchmarks/results]

``crawl``: Scrapy crawls, each in a fresh process with a JOBDIR, under Scrapy's default scheduler
and OPIC (the README's four settings lines) alternating, of an in-process web (no sockets) where
each page links to ``--links`` new URLs and ``--back`` of its ancestors. Measured: pages/s from
the engine's start to its stop (the scheduler's close included) and per tenth of the pages; the
URLs the scheduler knows (``scheduler/enqueued``, ``opic/pages``); peak RSS, RSS grown to the
last page per known URL; the JOBDIR's size on disk.

``frontier``: the embedded store alone, opened as the scheduler opens it with a JOBDIR and given
the scheduler's calls until it knows ``--urls`` URLs: ``INFLIGHT`` leases held, the oldest
visited paying ``--links`` new URLs, each request then filed by a ``schedule`` call of its own
(a due checkpoint waits for them), the upkeep tick every ``maintain_interval``. RSS is read
after ``malloc_trim``, with Scrapy, Twisted and the scheduler imported. Reported: RSS per known
URL; visits/s, and the last tenth's over the second's; what a checkpoint writes and its call
costs, periodic (the store's thread writes the rows) and the last ``BLOCKING``; two drivers at
the smallest size killed by SIGKILL after ``--kill-after`` full checkpoints (halfway to the
next, or as it is issued) and the visits lost; each state's resume to its first lease (total
cash, a request row per pending page); the CSV export and ``top(25)``. Each in a fresh process.

Each mode writes its section of ``scale.md`` (the other one's is kept) and ``scale_MODE.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import pickle
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._harness import RESULTS, child_env, peak_rss, rss_now, table, write_results

HOST, SPIDER, SCHEDULERS = "web.test", "fanout", ("scrapy", "opic")
#: The last checkpoints before the frontier's target are blocking (``commit(wait=True)``).
BLOCKING = 3
INFLIGHT = 16
MB = 1024 * 1024
TITLE = "# Scale: the OPIC scheduler as the frontier grows"
SECTIONS = {"crawl": "Fan-out crawl", "frontier": "Frontier at scale: the embedded store alone"}
_HREF = re.compile(rb'href="([^"]+)"')


def page_url(k: int) -> str:
    return f"http://{HOST}/p/{k}"


def page_body(k: int, links: int, back: int) -> bytes:
    """Page ``k`` of a tree: links to its ``links`` children ``k*links+1`` .. (no other page
    links to them), then to ``back`` of its ancestors up to the root (each a duplicate)."""
    hrefs = [page_url(i) for i in range(k * links + 1, k * links + links + 1)]
    while k and len(hrefs) < links + back:
        k = (k - 1) // links
        hrefs.append(page_url(k))
    inner = "".join(f'<a href="{h}">{h[-6:]}</a>\n' for h in hrefs)
    return f"<html><body>\n{inner}</body></html>".encode()


def rss(trim: bool = True) -> int:
    """Resident bytes now; with ``trim``, of what is held, not what malloc kept."""
    if trim:
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_now()


def disk_mb(path: Path) -> float:
    """MB on disk (allocated blocks, as ``du``) of the files under ``path``."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) / MB


def rows_table(rows: list[dict]) -> str:  # (each row has the same keys)
    return table(list(rows[0]), [list(row.values()) for row in rows]) if rows else "(not run)"


# -- the children, each in a fresh process: their results are rows of the tables ---------------
def crawl_child(p: dict) -> dict:
    """One crawl of the in-process web under ``p["scheduler"]``."""
    import scrapy
    import scrapy.core.scheduler  # noqa: F401  (in memory before the baseline)
    import scrapy.pqueues  # noqa: F401
    import scrapy.squeues  # noqa: F401
    from scrapy.core.downloader.handlers.base import BaseDownloadHandler
    from scrapy.crawler import CrawlerProcess
    from scrapy.http import HtmlResponse

    pages, links, back, opic = p["pages"], p["links"], p["back"], p["scheduler"] == "opic"
    marks = [0, *(-(-pages * k // 10) for k in range(1, 11))]  # the pages parsed at each tenth
    times, rss_end = [0.0], []

    class Web(BaseDownloadHandler):
        lazy = False

        async def download_request(self, request):
            body = page_body(int(request.url.rsplit("/", 1)[1]), links, back)
            return HtmlResponse(request.url, body=body, encoding="utf-8")

    class FanOut(scrapy.Spider):
        """Follows every link (a regex, no link extractor: the scheduler's share shows)."""

        name, start_urls, parsed = SPIDER, [page_url(0)], 0

        def parse(self, response):
            self.parsed += 1
            if self.parsed in marks:
                times.append(time.perf_counter() - t0)
                if self.parsed == pages:
                    rss_end.append(rss(trim=False))
            for m in _HREF.finditer(response.body):
                yield scrapy.Request(m.group(1).decode("ascii"))

    settings = {"JOBDIR": p["jobdir"], "CONCURRENT_REQUESTS": p["concurrency"]}
    settings |= {"CLOSESPIDER_PAGECOUNT": pages, "DOWNLOAD_HANDLERS": {"http": Web}}
    settings |= {"ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "ERROR"}
    if opic:  # the README's four settings lines (the scheduler imported before the baseline)
        from tests.support.crawl_runner import OPIC

        settings.update(OPIC)
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(FanOut)
    process.crawl(crawler)
    gc.collect()
    baseline = rss(trim=False)
    t0 = time.perf_counter()
    process.start()
    wall = time.perf_counter() - t0
    done = crawler.spider.parsed
    known = crawler.stats.get_value("opic/pages" if opic else "scheduler/enqueued")
    run = {
        "pages": done,
        "pages/s": done / wall,
        "known URLs": known,
        "peak RSS MB": peak_rss() / MB,
    }
    run |= {"RSS grown B/URL": (rss_end[0] - baseline) / known}
    run |= {"JOBDIR MB": disk_mb(Path(p["jobdir"]))}
    rates = [(marks[i] - marks[i - 1]) / (times[i] - times[i - 1]) for i in range(1, 11)]
    return run | {"tenths": {f"{k}0%": rate for k, rate in enumerate(rates, 1)}}


def open_frontier(jobdir: Path):
    """The frontier as the scheduler opens it with a JOBDIR (resumed if it holds one), with
    what a Scrapy crawl with OPIC imports imported."""
    import scrapy.crawler  # noqa: F401
    import twisted.internet.reactor  # noqa: F401

    import scrapy_opic._scheduler  # noqa: F401
    from scrapy_opic._settings import OpicSettings
    from scrapy_opic._state import open_frontier

    settings = OpicSettings.from_settings({"JOBDIR": str(jobdir)})
    meta = {"spider": SPIDER, "settings": settings.as_dict()}
    # (each request pickled whole: larger rows than the scheduler's own encode_request)
    encode = lambda r, url=None: pickle.dumps(r, protocol=4)  # noqa: E731
    return settings, open_frontier(settings, SPIDER, encode, meta)


def drive_child(p: dict) -> dict:
    """A fresh frontier driven to ``p["urls"]`` URLs. With ``p["kill"]``, SIGKILL after
    ``p["after"]`` full-interval checkpoints: as the next is issued (``"commit"``: its rows still
    being written by the store's thread) or halfway to it (``"mid"``)."""
    import scrapy

    from scrapy_opic.opic.contract import Entry, Link

    target, links, kill = p["urls"], p["links"], p.get("kill")
    # Each request: Request.to_dict() of the fan-out spider's (callback parse).
    template = {**scrapy.Request(page_url(0), meta={"depth": 0}).to_dict(), "callback": "parse"}
    settings, frontier = open_frontier(Path(p["jobdir"]))
    engine = frontier.fleet.parts[0].frontier.engine
    commit, commits, interval = frontier.commit, [], settings.commit_visits
    full: list[int] = []  # the visits at each checkpoint past the first ones' doubling ramp
    landed = [0]  # the visits at each blocking checkpoint (on disk when its call returned)
    # A driver to be killed waits for each checkpoint to land but the one its kill catches: what
    # a kill loses is then the visits since a checkpoint on disk, not a writer's lag.
    blocking_from = float("inf") if kill else target - BLOCKING * interval * links

    def die() -> None:
        died = {"visits done": engine.visit_count, "last checkpoint at": full[-1]}
        died |= {"on disk at": landed[-1], "commit interval": interval}
        Path(p["result"]).write_text(json.dumps(died))
        signal.raise_signal(signal.SIGKILL)

    def timed_commit(wait: bool = False) -> None:
        n, blocking = engine.n, wait or engine.n >= blocking_from
        caught = kill == "commit" and engine.visit_count >= interval and len(full) + 1 >= p["after"]
        blocking = blocking or bool(kill and not caught)
        t0 = time.perf_counter()
        commit(wait=blocking)
        if blocking:
            landed.append(engine.visit_count)
        wall = time.perf_counter() - t0
        last = frontier.store.file.last_commit
        commits.append({"n": n, "blocking": blocking, "wall": wall, **last})
        if engine.visit_count >= interval:
            full.append(engine.visit_count)
            if kill == "commit" and len(full) >= p["after"]:
                die()

    frontier.commit = timed_commit  # (the frontier's periodic checkpoints call self.commit)
    unfiled = 0  # the requests of the last visit's links not filed yet
    frontier.ready = lambda: not unfiled
    rss_before = rss()
    deciles = [(0.0, 0)]  # (seconds, visits) as the URLs known reach each tenth of the target
    held: list = []
    t_start = last_tick = time.perf_counter()
    frontier.schedule(
        [Entry(hashlib.sha1(page_url(0).encode()).digest(), page_url(0), 0, HOST, template)]
    )
    while engine.n < target:
        while len(held) < INFLIGHT and (lease := frontier.pop(())) is not None:
            held.append(lease)
        if not held:
            break
        lease = held.pop(0)
        request = pickle.loads(lease.payload) if isinstance(lease.payload, bytes) else lease.payload
        k, meta = int(request["url"].rsplit("/", 1)[1]), {"depth": request["meta"]["depth"] + 1}
        urls = [page_url(j) for j in range(k * links + 1, k * links + links + 1)]
        keys = [hashlib.sha1(u.encode()).digest() for u in urls]  # (as Scrapy's fingerprints)
        # The visit pays the links (no payload: each code NEEDS_PAYLOAD), then each request is
        # filed on its own as it reaches the scheduler's enqueue_request.
        frontier.visit(lease, [Link(key, u) for key, u in zip(keys, urls)])
        unfiled = len(keys)
        for key, u in zip(keys, urls):
            unfiled -= 1
            frontier.schedule([Entry(key, u, 0, HOST, {**template, "url": u, "meta": meta})])
        visits = engine.visit_count
        if kill == "mid" and len(full) >= p["after"] and visits >= full[-1] + interval // 2:
            die()
        now = time.perf_counter()
        if now - last_tick >= frontier.maintain_interval:  # the scheduler's upkeep tick
            frontier.maintain(list(held))
            frontier.figures()
            frontier.top_page()
            last_tick = now
        deciles += [(now - t_start, visits)] * (min(engine.n * 10 // target, 10) + 1 - len(deciles))
    wall = time.perf_counter() - t_start
    rss_end, n = rss(), engine.n
    rates = [(v1 - v0) / max(t1 - t0, 1e-9) for (t0, v0), (t1, v1) in zip(deciles, deciles[1:])]
    checkpoints, blocking = [], [c for c in commits if c["blocking"]]
    periodic = [c for c in commits if not c["blocking"] and c["n"] >= target / 2]
    for kind, group in (("periodic", periodic), ("blocking", blocking)):
        if group:
            mean = {k: statistics.fmean(c[k] for c in group) for k in group[0]}
            checkpoints.append(
                {"URLs known": n, "kind": kind, "checkpoints": len(group), "blocks": mean["blocks"]}
                | {"block MB": mean["block_bytes"] / MB, "new pages": mean["pages"]}
                | {"page MB": mean["page_bytes"] / MB, "build s": mean["seconds"]}
                | {"call wall s": mean["wall"]}
            )
    memory = {"URLs known": n, "visits": engine.visit_count, "visits/s": engine.visit_count / wall}
    memory |= {"last tenth / second tenth visits/s": rates[-1] / rates[1]}
    memory |= {"peak RSS MB": peak_rss() / MB, "B/URL at end": rss_end / n}
    # (the engine's arrays grow by np.zeros: the room past the pages known is not resident)
    memory |= {"B/URL grown": (rss_end - rss_before) / n}
    memory |= {"of which the engine's B/URL": engine.nbytes() / engine.capacity}
    frontier.close(held)
    memory["JOBDIR MB"] = disk_mb(Path(p["jobdir"]))
    return {"memory": memory, "checkpoints": checkpoints}


def resume_child(p: dict) -> dict:
    """A state resumed as the scheduler resumes its JOBDIR, timed to the first lease."""
    from scrapy_opic._backends.sqlite_state import REQUESTS_TABLE

    path = Path(p["jobdir"]) / "opic.sqlite"
    gc.collect()
    t0 = time.perf_counter()
    _settings, frontier = open_frontier(path.parent)
    lease = frontier.pop(())
    seconds = time.perf_counter() - t0
    state = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)  # (closed at exit)
    pages = frontier.fleet.parts[0].frontier
    _, pending, in_flight, _ = pages.counts  # (discovered, pending, in flight, visited)
    rows = state.execute(f'SELECT count(*) FROM "{REQUESTS_TABLE}"').fetchone()[0]
    result = {"resume s": seconds, "RSS after MB": rss() / MB, "URLs known": pages.engine.n}
    result |= {"visits": pages.engine.visit_count, "pending": pending, "in flight": in_flight}
    result |= {"request rows": rows, "abs(cash - 1)": abs(frontier.total_cash() - 1)}
    frontier.close([lease])
    return result


def export_child(p: dict) -> dict:
    """A state read as ``scrapy opic-export`` reads it: the full CSV, or ``top(25)``."""
    import scrapy  # noqa: F401  (the export command runs in a Scrapy process)

    from scrapy_opic.export import open_state, write_export

    baseline = rss()
    t0 = time.perf_counter()
    with open_state(Path(p["jobdir"]) / "opic.sqlite") as state:
        rows = write_export(state, p["out"]) if p["kind"] == "CSV" else len(state.top(25))
    what, s, over = p["kind"], time.perf_counter() - t0, (peak_rss() - baseline) / MB
    return {f"{what} s": s, f"{what} rows": rows, f"{what} peak MB": over}


def run_child(child: str, work: Path, **params: object) -> dict:
    """A child process, run in ``work``: its result (it must exit 0, or be killed if told to)."""
    result = work / f"{child}.json"
    args = ["-m", "benchmarks.scale", "_child", child, json.dumps(params | {"result": str(result)})]
    code = subprocess.run([sys.executable, *args], env=child_env(), cwd=work).returncode
    if code != (-signal.SIGKILL if "kill" in params else 0):
        raise RuntimeError(f"the {child} child exited with {code}")
    return json.loads(result.read_text())


# -- the modes, and the page ----------------------------------------------------------------
def write_section(out: Path, mode: str, command: str, prose: str, *tables: str, **data) -> int:
    """``mode``'s section of ``out/scale.md`` (the other mode's kept), ``out/scale_<mode>.json``."""
    path = out / "scale.md"
    old = path.read_text().split("\n## ")[1:] if path.exists() else []
    sections = {s.split("\n", 1)[0]: s.strip() for s in old}  # (a new one replaces its old one)
    sections[SECTIONS[mode]] = "\n\n".join([SECTIONS[mode], f"`{command}`", prose, *tables])
    write_results(f"scale_{mode}", data, None, out)
    path.write_text("\n\n## ".join([TITLE, *sections.values()]) + "\n")
    return 0


def run_crawl(args: argparse.Namespace, command: str) -> int:
    options = {k: getattr(args, k) for k in ("pages", "links", "back", "concurrency")}
    runs, tenths = [], []
    for repeat in range(1, args.repeats + 1):
        for name in SCHEDULERS:
            with tempfile.TemporaryDirectory(prefix=f"scale-{name}-") as tmp:
                jobdir = str(Path(tmp) / "jobdir")
                run = run_child("crawl", Path(tmp), scheduler=name, jobdir=jobdir, **options)
            print(f"[{repeat}] {name}: {run['pages/s']:.1f} pages/s", file=sys.stderr)
            tenths.append({"#": repeat, "scheduler": name} | run.pop("tenths"))
            # (the crawl before an OPIC one is Scrapy's of the same repeat)
            ratio = run["pages/s"] / runs[-1]["pages/s"] if name == "opic" else None
            runs.append({"#": repeat, "scheduler": name, **run, "OPIC / Scrapy": ratio})
    prose = (
        f"Every page links to {args.links} new URLs and back to {args.back} of its ancestors, "
        f"{args.concurrency} concurrent requests. RSS grown: from before the crawl to its last "
        "page, per URL the scheduler knows. Then pages/s in each tenth of the crawl."
    )
    tables = rows_table(runs), rows_table(tenths)
    return write_section(args.out, "crawl", command, prose, *tables, runs=runs, tenths=tenths)


def run_frontier(args: argparse.Namespace, command: str) -> int:
    urls = sorted(int(x) for x in args.urls.replace("_", "").split(","))
    args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="frontier-", dir=args.workdir))
    memory, checkpoints, resumes, exports, kills = [], [], [], [], []
    trials = [(n, None) for n in urls] + [(urls[0], "mid"), (urls[0], "commit")]
    try:
        for n, kill in trials:  # each size driven, then two drivers killed at the smallest
            jobdir = work / "jobdir"
            jobdir.mkdir()
            params = {"kill": kill, "after": args.kill_after} if kill else {}
            drive = run_child("drive", work, urls=n, jobdir=str(jobdir), links=args.links, **params)
            back = run_child("resume", work, jobdir=str(jobdir))
            resumes.append({"state": f"kill -9 ({kill})" if kill else f"{n:,} URLs", **back})
            if kill:
                lost = drive["visits done"] - back["visits"]
                kills.append(
                    {"trial": kill, **drive, "visits resumed": back["visits"], "lost": lost}
                )
            else:
                memory.append(drive["memory"])
                checkpoints += drive["checkpoints"]
                exports.append({"URLs known": drive["memory"]["URLs known"]})
                for kind in ("CSV", "top(25)"):
                    out = str(work / "export.csv")
                    exports[-1] |= run_child("export", work, kind=kind, jobdir=str(jobdir), out=out)
            shutil.rmtree(jobdir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    prose = (
        f"Each visit links {args.links} new URLs, up to {INFLIGHT} leases held. B/URL: bytes "
        "of RSS per known URL; grown: over the RSS before the first page. Checkpoints: means; "
        "periodic: the non-blocking ones past half the URLs. Export peak: RSS over the baseline."
    )
    tables = [
        "### Memory and speed", rows_table(memory),
        "### Checkpoints", rows_table(checkpoints),
        f"### kill -9 at {urls[0]:,} URLs", rows_table(kills),
        "### Resume to the first lease", rows_table(resumes),
        "### Export", rows_table(exports),
    ]  # fmt: skip
    data = {"memory": memory, "checkpoints": checkpoints, "kills": kills, "resumes": resumes}
    return write_section(args.out, "frontier", command, prose, *tables, **data, exports=exports)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:  # one measurement, in a fresh process
        params = json.loads(argv[2])
        Path(params["result"]).write_text(json.dumps(globals()[f"{argv[1]}_child"](params)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("crawl", help="real Scrapy crawls of an in-process fan-out web")
    c.add_argument("--pages", type=int, default=10_000, help="CLOSESPIDER_PAGECOUNT")
    c.add_argument("--back", type=int, default=0, help="links back to each page's ancestors")
    c.add_argument("--concurrency", type=int, default=32, help="CONCURRENT_REQUESTS")
    c.add_argument("--repeats", type=int, default=3)
    f = sub.add_parser("frontier", help="the embedded frontier driven directly, at scale")
    f.add_argument("--urls", default="1000000,10000000", help="URLs known at the end, per run")
    f.add_argument("--kill-after", type=int, default=4, help="full checkpoints before a kill")
    f.add_argument("--workdir", type=Path, default=Path("/work/tmp-scale"), help="states here")
    for mode in (c, f):
        mode.add_argument("--links", type=int, default=100, help="new URLs linked by each page")
        mode.add_argument("--out", type=Path, default=RESULTS, help="the results directory")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.scale " + " ".join(argv)
    return (run_frontier if args.mode == "frontier" else run_crawl)(args, command)


if __name__ == "__main__":
    sys.exit(main())
