"""Freshness of a real continuous Scrapy crawl of a site whose pages change at known rates.

    python -m benchmarks.freshness_crawl [--set NAME=VALUE ...] [--rev REV]
        [--with-baseline [REV]] [--cases independent linked removal] [--pages 300]
        [--pace 60] [--seed 1] [--out benchmarks/results/freshness_crawl.md] [--json FILE]
        [--keep DIR]

    # today's crawl (the code of a revision) beside the tree's with new settings:
    python -m benchmarks.freshness_crawl --with-baseline b9d8351 --set OPIC_DISCOVERY=0.3
    # on Redis (each crawl under a key of its own, read back from there):
    python -m benchmarks.freshness_crawl --set OPIC_STORE=redis \
        --set OPIC_REDIS_URL=redis://127.0.0.1:6379/0

The site: ``tests.support.changing_site.PoissonSite`` on 127.0.0.1, ``N`` pages (a power-law
link graph,
every page reachable from page 0, the start URL), 30% of them never changing, the others
changing as Poisson processes of rates log-uniform over 0.1 to 10 changes per *pass* (``N``
fetches: at the server's fixed pace of ``--pace`` requests per second, ``N / pace`` seconds;
0.02 to 2 changes per second with the defaults), strong ETags and honest ``Last-Modified``.
The server answers at most ``pace`` requests per second whatever the crawler's concurrency, so
that a loaded machine changes little but the crawl's own share of the budget.

The crawl: ``FreshnessSpider`` below (follows every link), run by ``scrapy runspider`` in a
subprocess with the add-on (``ADDONS = {"scrapy_opic.Addon": 0}``), ``OPIC_CONTINUOUS = True``,
``CONCURRENT_REQUESTS = 4``, its state in ``OPIC_STATE_PATH``, and every ``--set NAME=VALUE``
as ``-s NAME=VALUE`` (the policy under test; none: the defaults). ``--rev REV`` crawls with
the ``scrapy_opic`` of a git revision (``git archive``, first on ``PYTHONPATH``), and
``--with-baseline [REV]`` first runs the defaults (of REV's code, or this tree's). It stops
with a SIGINT (a graceful stop) once the server has answered 6N page requests (5N in the
removal case): the server's count, exact whatever the crawler counts (the results say so if
Scrapy's ``response_received_count``, what ``CLOSESPIDER_PAGECOUNT`` counts, falls behind).
Everything is then measured from the **server's** access log and the site's true change
times, not from the crawler:

* **freshness**: importance-weighted freshness over the window from the 3N-th to the 6N-th page
  request (a page is fresh while the copy of its last 200 is its current version; a 304 leaves
  the copy as it was), weights the exact PageRank of the site's graph (damping 0.85, i.e.
  ``1 - OPIC_EPSILON``); **optimum**: ``sum w F(f, l) / sum w`` of
  ``optimal_allocation(w, true rates, budget)``, budget the window's measured fetches per
  second; *ratio* = freshness / optimum; *proportional*: the same for an allocation in
  proportion to PageRank (what a cash-driven crawl aims at), for reference;
* **unchanged 200s**: the share of the window's fetches that were full downloads of the
  version the crawler already had; **to static**: the share that went to pages that never
  change; **conditional**: requests with ``If-None-Match`` or ``If-Modified-Since``; **304**
  (*false*: of a page that had changed since the crawler's copy);
* **tau**: Kendall tau of the exported importance (``scrapy opic-export`` run with the crawl's
  code; 0 for a page the crawl does not know) against the true PageRank, at the end.

Cases: ``independent`` (rates drawn regardless of links), ``linked`` (the highest PageRank
changes fastest) and ``removal`` (independent rates; at the first page request after 3N, 10% of
the pages answer 404 and every link to them disappears, and a section of N/10 pages appears,
linked from page 0): the removed pages' share of the exported importance and tau against the
new graph's PageRank (pages that exist after the change) 2N fetches after the change.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scrapy

CASES = ("independent", "linked", "removal")
STATIC = 0.3
#: Change rates of the changing pages, in changes per pass (N fetches).
PER_PASS = (0.1, 10.0)
#: The removal case's change: after this many passes; its figures this many passes later.
CHANGE_AT, AFTER = 3, 2
CONCURRENCY = 4


class FreshnessSpider(scrapy.Spider):
    """Follows every link; no items. ``-a stats=FILE``: its final stats go there (JSON)."""

    name = "freshness"
    custom_settings = {
        "ADDONS": {"scrapy_opic.Addon": 0},
        "OPIC_CONTINUOUS": True,
        "CONCURRENT_REQUESTS": CONCURRENCY,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
    }

    def __init__(self, start_url: str = "", stats: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_url, self.stats_path = start_url, stats

    async def start(self) -> Any:
        yield scrapy.Request(self.start_url, dont_filter=True)

    def parse(self, response: Any) -> Any:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse)

    def closed(self, reason: str) -> None:
        if self.stats_path:
            stats = self.crawler.stats.get_stats()
            values = {k: v for k, v in stats.items() if isinstance(v, (int, float, str))}
            values["reason"] = reason
            values["code"] = str(Path(sys.modules["scrapy_opic"].__file__ or "").parent)
            Path(self.stats_path).write_text(json.dumps(values, indent=1))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- one crawl ----------------------------------------------------------------------------------
def crawl(
    site: Any, pages: int, sets: list[str], work: Path, timeout: float, env: dict[str, str]
) -> dict:
    """Run the spider against ``site`` until the server has answered ``pages`` page requests,
    then stop it with a SIGINT (a graceful stop: the state is saved); returns what happened."""
    work.mkdir(parents=True, exist_ok=True)
    stats = work / "stats.json"
    state: Path | str = work / "opic.sqlite"
    cmd = [sys.executable, "-m", "scrapy", "runspider", str(Path(__file__).resolve()),
           "-a", f"start_url={site.url(0)}", "-a", f"stats={stats}",
           "-s", f"OPIC_STATE_PATH={state}"]  # fmt: skip
    given = dict(s.split("=", 1) for s in sets)
    if given.get("OPIC_STORE") == "redis":  # (a crawl of its own, read back from Redis)
        key = f"freshness-{work.name}-{os.getpid()}"
        cmd += ["-s", f"OPIC_REDIS_KEY={key}", "-s", "OPIC_REDIS_RESET=True"]
        state = f"{given.get('OPIC_REDIS_URL', 'redis://127.0.0.1:6379/0')}#{key}"
    for s in sets:
        cmd += ["-s", s]
    t0 = time.perf_counter()
    problem = None
    with open(work / "crawl.log", "w") as err:
        proc = subprocess.Popen(cmd, cwd=work, stdout=err, stderr=subprocess.STDOUT, env=env)
        seen, quiet_since = -1, time.monotonic()
        while proc.poll() is None:
            time.sleep(0.05)
            if site.requests != seen:
                seen, quiet_since = site.requests, time.monotonic()
            if site.requests >= pages:
                pass
            elif time.perf_counter() - t0 > timeout:
                problem = f"only {site.requests} page requests after {timeout:.0f} s"
            elif time.monotonic() - quiet_since > 30:
                problem = f"no request for 30 s after {site.requests} page requests"
            else:
                continue
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                problem = problem or "still running 60 s after a SIGINT"
                proc.kill()
                proc.wait()
            break
    seconds = time.perf_counter() - t0
    out = {"cmd": cmd, "seconds": seconds, "returncode": proc.returncode, "problem": problem}
    out["stats"] = json.loads(stats.read_text()) if stats.exists() else {}
    out["state"] = state
    if proc.returncode != 0 and problem is None:
        tail = (work / "crawl.log").read_text()[-2000:]
        out["problem"] = f"exit code {proc.returncode}: {tail}"
    return out


def exported(state: Path | str, total: int, work: Path, env: dict[str, str]) -> np.ndarray:
    """The exported importance by page id (0 for pages the crawl does not know), written by
    ``scrapy opic-export`` with the code that crawled."""
    csv_path = work / "importance.csv"
    cmd = [sys.executable, "-m", "scrapy", "opic-export", "--state", str(state),
           "-o", str(csv_path)]  # fmt: skip
    subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True, timeout=120)
    x = np.zeros(total)
    with open(csv_path, newline="") as fh:
        for row in csv.DictReader(fh):
            path = row["url"].split("://", 1)[-1].partition("/")[2]
            if path.startswith("p/") and path[2:].isdigit() and int(path[2:]) < total:
                x[int(path[2:])] += float(row["importance"])
    return x


def code_env(rev: str | None, root: Path) -> dict[str, str]:
    """The environment of the crawl: with ``rev``, the ``scrapy_opic`` of that git revision
    (``git archive``, first on PYTHONPATH), else this tree's."""
    env = dict(os.environ)
    if rev is None:
        return env
    dest = root / f"code-{rev}"
    if not dest.exists():
        dest.mkdir(parents=True)
        repo = Path(__file__).resolve().parent.parent
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "scrapy_opic"],
                                 check=True, capture_output=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    env["PYTHONPATH"] = os.pathsep.join([str(dest), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(x, y).statistic)


# -- one case -----------------------------------------------------------------------------------
def run_case(
    case: str, n: int, seed: int, pace: float, sets: list[str], work: Path, env: dict[str, str]
) -> dict:
    from scrapy_opic.opic.freshness import (
        optimal_allocation,
        proportional_allocation,
        weighted_freshness,
    )
    from tests.support.changing_site import PoissonSite

    removal = case == "removal"
    rates = (PER_PASS[0] * pace / n, PER_PASS[1] * pace / n)
    site = PoissonSite(
        n,
        seed=seed,
        static=STATIC,
        rates=rates,
        linked_fastest=case == "linked",
        change_after=CHANGE_AT * n if removal else None,
        pace=pace,
    )
    stop = (CHANGE_AT + AFTER) * n if removal else 6 * n
    with site:
        run = crawl(site, stop, sets, work, 3.0 * stop / pace + 90.0, env)
        fetch_log = list(site.log)
    pages = [f for f in fetch_log if f.page >= 0]
    ok = isinstance(run["state"], str) or run["state"].exists()
    x = exported(run["state"], site.total, work, env) if ok else np.zeros(site.total)
    out: dict[str, Any] = {
        "case": case,
        "settings": sets,
        "seed": seed,
        "seconds": round(run["seconds"], 1),
        "fetches": len(pages),
        "finish_reason": run["stats"].get("reason"),
        "crawler responses": run["stats"].get("response_received_count"),
        "code": run["stats"].get("code"),
        "problem": run["problem"],
        "command": " ".join(run["cmd"]),
    }
    if removal:
        if site.change_time is None:
            out["problem"] = out["problem"] or "the site never changed"
            return out
        after = [f for f in pages if f.t >= site.change_time]
        alive = site.alive_after
        gone = set(site.removed.tolist())
        first_gone: dict[int, float] = {}
        for f in after:
            if f.page in gone and f.status != 200:
                first_gone.setdefault(f.page, f.t)
        new = set(site.new.tolist())
        out.update(
            {
                "fetches after the change": len(after),
                "removed importance": float(x[site.removed].sum()),
                "removed pagerank before": float(site.pagerank_before()[site.removed].sum()),
                "tau new": kendall(x[alive], site.pagerank_after()[alive]),
                "removed requests after the change": sum(f.page in gone for f in after),
                "removed requests after their 404": sum(
                    f.page in first_gone and f.t > first_gone[f.page] for f in after
                ),
                "new pages fetched": len({f.page for f in after if f.page in new}),
                "new pages": len(new),
                "new importance": float(x[site.new].sum()),
                "new pagerank": float(site.pagerank_after()[site.new].sum()),
            }
        )
        return out
    if len(pages) < 6 * n:
        out["problem"] = out["problem"] or f"only {len(pages)} page requests"
        return out
    t0, t1 = pages[3 * n - 1].t, pages[6 * n - 1].t
    window = pages[3 * n : 6 * n]
    w_all = site.pagerank_before()
    w, rate = w_all[:n], site.rates[:n]
    budget = len(window) / (t1 - t0)
    measured = site.weighted_freshness(fetch_log, t0, t1, w_all)
    optimum = weighted_freshness(optimal_allocation(w, rate, budget), rate, w)
    proportional = weighted_freshness(proportional_allocation(w, budget), rate, w)
    out.update(
        {
            "fetches/s": budget,
            "freshness": measured,
            "optimum": optimum,
            "ratio": measured / optimum,
            "proportional ratio": proportional / optimum,
            "unchanged 200s": sum(f.status == 200 and f.had for f in window) / len(window),
            "to static": sum(site.rates[f.page] == 0 for f in window) / len(window),
            "conditional": sum(f.inm or f.ims for f in window),
            "304": sum(f.status == 304 for f in window),
            "false 304": sum(f.status == 304 and not f.had for f in window),
            "tau": kendall(x[:n], w),
            "pages never fetched in the window": int(n - len({f.page for f in window})),
        }
    )
    return out


# -- the report ---------------------------------------------------------------------------------
def label(r: dict) -> str:
    """The crawl's code (a git revision, or this tree) and its settings."""
    sets = ", ".join(f"`{s}`" for s in r["settings"]) if r["settings"] else "defaults"
    return f"{r['rev'] or 'tree'}: {sets}"


def markdown(rows: list[dict], args: argparse.Namespace, command: str) -> str:
    n, pace = args.pages, args.pace
    lo, hi = (r * pace / n for r in PER_PASS)
    lines = [
        "# Freshness of a continuous crawl (`benchmarks/freshness_crawl.py`)",
        "",
        f"`{command}`",
        "",
        f"{n} pages served at {pace:g} requests/s (a pass: {n / pace:.1f} s), "
        f"{STATIC:.0%} never changing, the others {lo:.3g} to {hi:.3g} changes/s "
        f"(log-uniform); {CONCURRENCY} concurrent requests; seed {args.seed}. Measured from "
        "the server's log: the module docstring defines every column.",
    ]
    fresh = [r for r in rows if r["case"] != "removal"]
    if fresh:
        lines += [
            "",
            "## Freshness, fetches 3N to 6N",
            "",
            "| case | settings | fetches/s | freshness | optimum | ratio | proportional "
            "| unchanged 200s | to static | conditional | 304 (false) | tau | s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in fresh:
            if "ratio" not in r:
                lines.append(f"| {r['case']} | {label(r)} | {r['problem']} |")
                continue
            lines.append(
                f"| {r['case']} | {label(r)} | {r['fetches/s']:.1f} | "
                f"{r['freshness']:.3f} | {r['optimum']:.3f} | **{r['ratio']:.3f}** | "
                f"{r['proportional ratio']:.3f} | {r['unchanged 200s']:.1%} | "
                f"{r['to static']:.1%} | {r['conditional']} | {r['304']} ({r['false 304']}) | "
                f"{r['tau']:.3f} | {r['seconds']:.0f} |"
            )
    gone = [r for r in rows if r["case"] == "removal"]
    if gone:
        lines += [
            "",
            f"## Removal: 10% of the pages gone, N/10 new at fetch {CHANGE_AT}N; "
            f"figures {AFTER}N fetches later",
            "",
            "| settings | removed importance (PageRank before) | tau new | requests of removed "
            "pages (after their 404) | new pages fetched | new importance (PageRank) | s |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in gone:
            if "tau new" not in r:
                lines.append(f"| {label(r)} | {r['problem']} |")
                continue
            lines.append(
                f"| {label(r)} | {r['removed importance']:.4f} "
                f"({r['removed pagerank before']:.4f}) | {r['tau new']:.3f} | "
                f"{r['removed requests after the change']} "
                f"({r['removed requests after their 404']}) | "
                f"{r['new pages fetched']}/{r['new pages']} | {r['new importance']:.4f} "
                f"({r['new pagerank']:.4f}) | {r['seconds']:.0f} |"
            )
    behind = [
        f"{r['case']}, {label(r)}: {r['crawler responses']} of {r['fetches']}"
        for r in rows
        if (r["crawler responses"] or 0) + 2 * CONCURRENCY < r["fetches"]
    ]
    if behind:
        lines += [
            "",
            "Responses Scrapy counted (`response_received_count`, what `CLOSESPIDER_PAGECOUNT` "
            f"counts) of the page requests the server answered: {'; '.join(behind)}.",
        ]
    for r in rows:
        if r.get("problem"):
            lines += ["", f"Problem ({r['case']}, {label(r)}): {r['problem']}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Scrapy setting for the crawl (repeatable), as scrapy's -s",
    )
    p.add_argument("--rev", help="crawl with the scrapy_opic of this git revision")
    p.add_argument(
        "--with-baseline",
        nargs="?",
        const="",
        metavar="REV",
        help="first run the defaults (no --set), with the code of REV if given",
    )
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--pace", type=float, default=60.0, help="server requests per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    p.add_argument("--json", type=Path, help="write every figure here (JSON)")
    p.add_argument("--keep", type=Path, help="keep the crawls' state and logs in this directory")
    args = p.parse_args(argv)
    for s in args.sets:
        if "=" not in s:
            p.error(f"--set {s}: expected NAME=VALUE")
    configs: list[tuple[str | None, list[str]]] = [(args.rev, args.sets)]
    if args.with_baseline is not None:
        configs.insert(0, (args.with_baseline or None, []))
    rows = []
    with tempfile.TemporaryDirectory(prefix="freshness-crawl-") as tmp:
        root = args.keep or Path(tmp)
        for k, (rev, sets) in enumerate(configs):
            env = code_env(rev, root)
            for case in args.cases:
                work = root / f"{k}-{case}"
                log(f"{case}, {label({'rev': rev, 'settings': sets})}...")
                r = run_case(case, args.pages, args.seed, args.pace, sets, work, env)
                r["rev"] = rev
                log(f"  {json.dumps({a: b for a, b in r.items() if a != 'command'})}")
                rows.append(r)
    command = "python -m benchmarks.freshness_crawl " + " ".join(argv or sys.argv[1:])
    text = markdown(rows, args, command.strip())
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 1 if any(r.get("problem") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
