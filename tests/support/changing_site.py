"""A site whose pages change at known Poisson rates, served on 127.0.0.1 (or ``host``): the
freshness tests' and ``benchmarks/freshness_crawl.py``'s ground truth.

    with PoissonSite(n=300, seed=1) as site:
        ...  # crawl site.url(0)
    site.weighted_freshness(site.log, t0, t1, site.pagerank_at(t0))

The site (deterministic from ``seed``):

* **pages** ``/p/0`` .. ``/p/<n-1>`` (page 0 is the start URL), plus a *new section* of
  ``new_pages`` pages (ids ``n`` ..) that exists from the change time ``T`` only;
* **links**: a power-law graph (``power_law_graph``: a few pages very linked), every page
  linking home, and a backbone that makes every page reachable from page 0 before and after the
  change: each page ``i > 0`` is linked from an earlier page, drawn among the pages that are
  never removed with a bias toward low ids (hubs);
* **change rates**: a share ``static`` of the pages never changes; the others change as Poisson
  processes of rates log-uniform over ``rates = (lo, hi)`` per second. ``linked_fastest``: the
  pages with the highest true PageRank get the fastest rates, rank for rank (the least ranked
  are the static ones); else the rates are drawn regardless of links;
* **change times** are drawn lazily per page (its own random stream of ``(seed, page)``), in
  seconds of the site's clock (0 when the server starts); a page's *version* at ``t`` is its
  number of changes up to ``t`` (a new page counts from ``T``); the last change before 0 of a
  page that changes is ``Exp(rate)`` seconds before it (its Last-Modified at a first look is
  that of a page that has always changed at its rate), of one that never changes its creation;
* **the change** at ``T`` (``change_at`` seconds, or the first page request after
  ``change_after`` of them, or :meth:`change`): ``remove_share`` of the old pages (never page 0)
  answer 404 (``gone_status``: 410) and every link to them disappears; the new section appears,
  its index page linked from page 0 (it links to each page of the section, they link to each
  other, to the index, home, and to two old pages each).

A page's body: its title, its links, a *content line* made of words drawn from (seed, page,
version), and the server's clock at the request inside a ``<script>`` (digits that change at
every request): the body's bytes always differ between two requests, its visible text
(:func:`scrapy_opic.opic.signature.signature` in ``text`` mode, digits kept or not) only when
the version did.

Validators: a strong ETag of (page, version) (``weak``: ``W/"..."``) and ``Last-Modified``,
the last change as an HTTP date. HTTP dates count whole seconds, so the date sent is the last
change rounded *up*, and only once that second is over (a page that changed within the current
second is sent without one: its date would be later than the response's, which RFC 9110
forbids). A copy whose date is ``D`` was thus downloaded after ``D``, so any later change falls
after ``D`` and ``If-Modified-Since: D`` is answered exactly. ``If-None-Match`` (weak
comparison, ``*`` too) wins over ``If-Modified-Since``; a match is a 304 with the validators
and no body. ``validators=False``: none sent, conditional headers ignored.
``lying="noisy"``: a new ETag and ``Last-Modified`` "now" at every response, never a 304.
``lying="stale"``: a constant ETag and ``Last-Modified`` per page while the content changes,
so that a conditional request gets a false 304. ``lying="always-304"``: honest validators on
full responses, and a 304 to every conditional request.

Requests are answered at most ``pace`` per second, ``1 / pace`` apart (a fixed fetch rate,
whatever the crawler's concurrency and the machine's load, as long as the crawler keeps a
request waiting), after an optional ``delay`` each. The access log :attr:`PoissonSite.log`
holds a :class:`Fetch` per request: site time, path, page, status, conditional headers sent,
the version served, and whether the crawler's copy was, and is now, current (the server tracks
the copy of one crawler: the version of the last 200 it served for each page).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

import numpy as np

from scrapy_opic.opic.graph import Graph, from_edges, power_law_graph
from scrapy_opic.opic.pagerank import pagerank

#: Damping of the true PageRank: ``1 - OPIC_EPSILON`` (0.15 by default).
ALPHA = 0.85
#: A page that never changed was last modified this long before the site started (seconds).
BIRTH = -86_400.0
LYING = (None, "noisy", "stale", "always-304")
WORDS = [
    "alpha",
    "amber",
    "apple",
    "arrow",
    "basil",
    "birch",
    "brick",
    "cedar",
    "cloud",
    "coral",
    "delta",
    "dune",
    "eagle",
    "ember",
    "fern",
    "flint",
    "frost",
    "grove",
    "harbor",
    "hazel",
    "iris",
    "ivory",
    "jade",
    "juniper",
    "kelp",
    "lark",
    "lemon",
    "lilac",
    "maple",
    "marsh",
    "meadow",
    "mint",
    "nectar",
    "oak",
    "olive",
    "onyx",
    "orchid",
    "pearl",
    "pine",
    "plum",
    "quartz",
    "raven",
    "reed",
    "river",
    "robin",
    "sage",
    "shore",
    "slate",
    "spruce",
    "stone",
    "swift",
    "thorn",
    "tide",
    "topaz",
    "tulip",
    "umber",
    "vale",
    "violet",
    "willow",
    "wren",
    "yarrow",
    "zephyr",
    "zinc).split(",
]


class Fetch(NamedTuple):
    """One request in the access log."""

    t: float  #: site time (seconds since the server started, monotonic) it was served at
    path: str
    page: int  #: the page id, -1 for a path that is no page
    status: int
    inm: bool  #: If-None-Match was sent
    ims: bool  #: If-Modified-Since was sent
    version: int  #: the page's version at ``t`` (-1 if it did not exist)
    had: bool  #: the crawler's copy was that version already (a 200: a needless download)
    current: bool  #: the crawler's copy is current after this response (a 304: ``had``)


def _bias_choice(rng: np.random.Generator, candidates: np.ndarray) -> int:
    """One of ``candidates`` (sorted), biased toward the first: the backbone's hubs."""
    return int(candidates[int(len(candidates) * rng.random() ** 2)])


def restricted_pagerank(graph: Graph, alive: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """PageRank over the pages of ``alive`` and the links between them, by page id (0 for the
    others; sums to 1)."""
    ids = np.flatnonzero(alive)
    dense = np.full(graph.n, -1, dtype=np.int64)
    dense[ids] = np.arange(ids.size)
    src, dst = graph.sources(), graph.indices.astype(np.int64)
    ok = alive[src] & alive[dst]
    sub = from_edges(dense[src[ok]], dense[dst[ok]], ids.size)
    out = np.zeros(graph.n)
    out[ids] = pagerank(sub, alpha)
    return out


def reachable(graph: Graph, alive: np.ndarray, start: int = 0) -> np.ndarray:
    """The pages of ``alive`` reachable from ``start`` over links between such pages."""
    seen = np.zeros(graph.n, dtype=bool)
    seen[start] = True
    todo = [start]
    while todo:
        i = todo.pop()
        for j in graph.children(i):
            if alive[j] and not seen[j]:
                seen[j] = True
                todo.append(int(j))
    return seen


class PoissonSite:
    """The site of the module docstring; a context manager (or :meth:`start`, :meth:`stop`).

    :param clock: the monotonic clock (seconds); :param wall: the wall-clock time of the
        site's time 0 (default: ``time.time()`` at start), for the HTTP dates. Tests pass a
        clock of their own. :param changes: change times (site seconds) of some pages, instead
        of drawn ones (tests)."""

    def __init__(
        self,
        n: int = 300,
        seed: int = 0,
        static: float = 0.3,
        rates: tuple[float, float] = (0.02, 2.0),
        linked_fastest: bool = False,
        validators: bool = True,
        weak: bool = False,
        lying: str | None = None,
        remove_share: float = 0.1,
        new_pages: int | None = None,
        gone_status: int = 404,
        change_at: float | None = None,
        change_after: int | None = None,
        pace: float | None = None,
        delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        wall: float | None = None,
        changes: Mapping[int, Sequence[float]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        if lying not in LYING:
            raise ValueError(f"lying must be one of {LYING}")
        if not 0 < rates[0] <= rates[1]:
            raise ValueError("rates must be 0 < lo <= hi")
        self.n, self.seed, self.host = n, seed, host
        self.validators, self.weak, self.lying = validators, weak, lying
        self.gone_status = gone_status
        self.pace, self.delay = pace, delay
        self.clock, self._wall_arg = clock, wall
        self.change_after = change_after
        m = max(2, round(0.1 * n)) if new_pages is None else new_pages
        self.total = n + m
        rng = np.random.default_rng(seed)
        k = round(remove_share * n)
        self.removed = np.sort(rng.choice(np.arange(1, n), min(k, n - 1), replace=False))
        self.new = np.arange(n, self.total)
        self.before, self.after = self._graphs(rng)
        self.alive_before = np.zeros(self.total, dtype=bool)
        self.alive_before[:n] = True
        self.alive_after = ~np.isin(np.arange(self.total), self.removed)
        #: The old pages whose links change at ``T`` (a change of their content too).
        same = [np.array_equal(self.before.children(i), self.after.children(i)) for i in range(n)]
        self.relinked = np.flatnonzero(self.alive_after[:n] & ~np.array(same, dtype=bool))
        self._relinked = set(self.relinked.tolist())
        # True rates: the old pages' by the chosen case, the new section's drawn regardless.
        self.rates = np.zeros(self.total)
        lo, hi = rates
        moving = n - round(static * n)
        drawn = lo * (hi / lo) ** rng.random(moving)
        if linked_fastest:
            pr = restricted_pagerank(self.before, self.alive_before)[:n]
            order = np.lexsort((np.arange(n), -pr))  # highest PageRank first
            self.rates[order[:moving]] = np.sort(drawn)[::-1]
        else:
            self.rates[rng.permutation(n)[:moving]] = drawn
        if m:
            moving_new = m - round(static * m)
            self.rates[n + rng.permutation(m)[:moving_new]] = lo * (hi / lo) ** rng.random(
                moving_new
            )
        # Change times, drawn lazily: page i's sorted times up to _horizon[i] are known.
        self._times: list[list[float]] = [[] for _ in range(self.total)]
        self._horizon = [0.0 if r > 0 else math.inf for r in self.rates]
        self._streams: dict[int, np.random.Generator] = {}
        self._given = set(changes or {})  # pages whose change times a test gave
        for i, times in (changes or {}).items():
            self._times[i] = sorted(float(t) for t in times)
            self._horizon[i] = math.inf
        self.change_time: float | None = change_at
        self.log: list[Fetch] = []
        self.requests = 0  # page requests so far
        self._copy: dict[int, int] = {}  # the crawler's copy: the version of its last 200
        self._noise = 0
        self._lock = threading.RLock()
        self._pace_lock = threading.Lock()
        self._next_slot = 0.0
        self.t0 = clock()
        self.wall0 = time.time() if wall is None else wall
        self.server: ThreadingHTTPServer | None = None
        self.port = 0

    # -- the graph -------------------------------------------------------------------------
    def _graphs(self, rng: np.random.Generator) -> tuple[Graph, Graph]:
        n, total = self.n, self.total
        removed = np.zeros(total, dtype=bool)
        removed[self.removed] = True
        keepers = np.flatnonzero(~removed[:n])  # (sorted; page 0 among them)
        pl = power_law_graph(n, seed=self.seed)
        back_src = [_bias_choice(rng, keepers[keepers < i]) for i in range(1, n)]
        src = np.concatenate([pl.sources(), back_src, np.arange(1, n)])
        dst = np.concatenate([pl.indices, np.arange(1, n), np.zeros(n - 1, dtype=np.int64)])
        src, dst = src.astype(np.int64), dst.astype(np.int64)
        before = from_edges(src, dst, total)
        keep = ~removed[src] & ~removed[dst]
        src, dst = src[keep], dst[keep]
        m = total - n
        if m:
            index, pages = n, np.arange(n + 1, total)
            inner = power_law_graph(max(pages.size, 1), seed=self.seed + 1)
            inner_src = n + 1 + inner.sources() if pages.size else np.zeros(0, np.int64)
            inner_dst = n + 1 + inner.indices.astype(np.int64) if pages.size else inner_src
            old = rng.choice(keepers, 2 * pages.size)
            src = np.concatenate([src, [0, index], np.full(pages.size, index), pages, pages,
                                  inner_src, np.repeat(pages, 2)])  # fmt: skip
            dst = np.concatenate([dst, [index, 0], pages, np.full(pages.size, index),
                                  np.zeros(pages.size, np.int64), inner_dst, old])  # fmt: skip
        return before, from_edges(src, dst, total)

    def changed(self, t: float) -> bool:
        """Whether the site has its new shape at site time ``t``."""
        return self.change_time is not None and t >= self.change_time

    def graph_at(self, t: float) -> Graph:
        """The links as served at site time ``t`` (on all ids; pages that do not exist then
        have none and no link points to them)."""
        return self.after if self.changed(t) else self.before

    def alive_at(self, t: float) -> np.ndarray:
        """The pages that exist at site time ``t``."""
        return self.alive_after if self.changed(t) else self.alive_before

    def pagerank_at(self, t: float, alpha: float = ALPHA) -> np.ndarray:
        """The true PageRank at site time ``t`` over the pages that exist then (0 for others)."""
        return restricted_pagerank(self.graph_at(t), self.alive_at(t), alpha)

    def pagerank_before(self, alpha: float = ALPHA) -> np.ndarray:
        return restricted_pagerank(self.before, self.alive_before, alpha)

    def pagerank_after(self, alpha: float = ALPHA) -> np.ndarray:
        return restricted_pagerank(self.after, self.alive_after, alpha)

    # -- change times ----------------------------------------------------------------------
    def _extend(self, i: int, t: float) -> list[float]:
        """Page ``i``'s change times, drawn at least up to ``t``."""
        with self._lock:
            times = self._times[i]
            while self._horizon[i] < t:
                stream = self._streams.get(i)
                if stream is None:
                    stream = self._streams[i] = np.random.default_rng([self.seed, i])
                gaps = stream.exponential(1.0 / self.rates[i], 64)
                start = times[-1] if times else 0.0
                times.extend((start + np.cumsum(gaps)).tolist())
                self._horizon[i] = times[-1]
            return times

    def _before(self, i: int) -> float:
        """Page ``i``'s last change before site time 0: a page that changes at rate ``l`` did
        so ``Exp(l)`` before (a Poisson process looks the same backwards), or at its creation
        if that is later (a page whose change times a test gave: at its creation). So its
        Last-Modified at a first look is honest about its rate."""
        born = self.created(i)
        if i >= self.n or not self.rates[i] > 0 or i in self._given:
            return born
        back = np.random.default_rng([self.seed, i, 1]).exponential(1.0 / self.rates[i])
        return max(born, -float(back))

    def created(self, i: int) -> float:
        """When page ``i`` came to exist (``BIRTH`` for the old pages; ``T`` for the new ones,
        inf before the change)."""
        if i < self.n:
            return BIRTH
        return math.inf if self.change_time is None else self.change_time

    def _shape_change(self, i: int) -> float | None:
        """``T`` if page ``i`` is an old page whose links change then, else None."""
        return self.change_time if i in self._relinked else None

    def version(self, i: int, t: float) -> int:
        """Page ``i``'s number of changes up to ``t`` since it was created (-1: not yet); the
        change of its links at ``T`` counts as one."""
        born = self.created(i)
        if t < born:
            return -1
        times = self._extend(i, t)
        shape = self._shape_change(i)
        extra = int(shape is not None and shape <= t)
        return bisect.bisect_right(times, t) - bisect.bisect_right(times, born) + extra

    def last_change(self, i: int, t: float) -> float:
        """Page ``i``'s last change (or its creation) at or before ``t``."""
        times = self._extend(i, t)
        k = bisect.bisect_right(times, t)
        last = max(self._before(i), times[k - 1] if k else -math.inf)
        shape = self._shape_change(i)
        return max(last, shape) if shape is not None and shape <= t else last

    def next_change(self, i: int, t: float) -> float:
        """Page ``i``'s first change after ``t`` (inf: none, as far as the site knows)."""
        shape = self._shape_change(i)
        bound = shape if shape is not None and shape > t else math.inf
        until = t
        while True:
            times = self._extend(i, until)
            k = bisect.bisect_right(times, t)
            if k < len(times):
                return min(times[k], bound)
            if self._horizon[i] == math.inf:
                return bound
            until = self._horizon[i] + 1.0

    def change_times(self, i: int, t0: float, t1: float) -> list[float]:
        """Page ``i``'s changes in ``(t0, t1]`` (its change of links at ``T`` included)."""
        times = self._extend(i, t1)
        out = times[bisect.bisect_right(times, t0) : bisect.bisect_right(times, t1)]
        shape = self._shape_change(i)
        return sorted([*out, shape]) if shape is not None and t0 < shape <= t1 else out

    # -- serving ---------------------------------------------------------------------------
    def now(self) -> float:
        """Site time: seconds since the server started."""
        return self.clock() - self.t0

    def change(self, t: float | None = None) -> None:
        """Change the site's shape at site time ``t`` (default: now)."""
        with self._lock:
            if self.change_time is None:
                self.change_time = self.now() if t is None else t

    def url(self, i: int) -> str:
        return f"http://{self.host}:{self.port}/p/{i}"

    def etag(self, i: int, version: int) -> str:
        tag = f'"p{i}v{version}-{self.seed}"'
        return "W/" + tag if self.weak else tag

    def http_date(self, t: float) -> str:
        """The HTTP date of site time ``t``."""
        return formatdate(self.wall0 + t, usegmt=True)

    def _wall_second(self, t: float) -> int:
        """The HTTP date (as Unix seconds) that stands for a change at site time ``t``: rounded
        up."""
        return math.ceil(self.wall0 + t)

    def body(self, i: int, version: int, t: float, links: Iterable[int]) -> bytes:
        """The HTML of page ``i`` at ``version``, served at site time ``t``."""
        digest = hashlib.blake2b(f"{self.seed}:{i}:{version}".encode(), digest_size=8).digest()
        words = " ".join(WORDS[b % len(WORDS)] for b in digest)
        items = "".join(f'<li><a href="/p/{j}">page {j}</a></li>' for j in links)
        return (
            f"<html><head><title>Page {i}</title></head><body><h1>Page {i}</h1>"
            f'<p class="content">Revision {version}: {words}.</p><ul>{items}</ul>'
            f'<script>var servedAt = "{self.wall0 + t:.6f}"; var request = {len(self.log)};'
            "</script></body></html>"
        ).encode()

    def respond(self, path: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
        """The answer to ``GET path`` with request ``headers``; logs it. Thread-safe."""
        inm, ims = headers.get("If-None-Match"), headers.get("If-Modified-Since")
        page = -1
        if path.startswith("/p/"):
            try:
                page = int(path[3:])
            except ValueError:
                page = -1
            if not 0 <= page < self.total or path != f"/p/{page}":
                page = -1
        with self._lock:
            if page >= 0:
                self.requests += 1
                if (
                    self.change_after is not None
                    and self.change_time is None
                    and self.requests > self.change_after
                ):
                    self.change_time = self.now()
            t = self.now()
            if page < 0 or not self.alive_at(t)[page]:
                gone = page >= 0 and self.changed(t) and page in self.removed
                status = self.gone_status if gone else 404
                self.log.append(
                    Fetch(t, path, page, status, bool(inm), bool(ims), -1, False, False)
                )
                return status, {"Content-Type": "text/plain"}, b"not found"
            version = self.version(page, t)
            out = {"Content-Type": "text/html; charset=utf-8"}
            if self.validators:
                out.update(self._validators(page, version, t))
            copy = self._copy.get(page)
            had = copy == version
            if self._not_modified(page, t, out, inm, ims):
                self.log.append(Fetch(t, path, page, 304, bool(inm), bool(ims), version, had, had))
                return 304, out, b""
            self._copy[page] = version
            body = self.body(page, version, t, self.graph_at(t).children(page).tolist())
            self.log.append(Fetch(t, path, page, 200, bool(inm), bool(ims), version, had, True))
            return 200, out, body

    def _validators(self, i: int, version: int, t: float) -> dict[str, str]:
        if self.lying == "noisy":
            self._noise += 1
            return {"ETag": f'"p{i}n{self._noise}"', "Last-Modified": self.http_date(t)}
        if self.lying == "stale":
            return {"ETag": self.etag(i, 0), "Last-Modified": self.http_date(BIRTH)}
        out = {"ETag": self.etag(i, version)}
        second = self._wall_second(self.last_change(i, t))
        if second <= self.wall0 + t:  # (a change within the current second: no date yet)
            out["Last-Modified"] = formatdate(second, usegmt=True)
        return out

    def _not_modified(
        self, i: int, t: float, out: dict[str, str], inm: str | None, ims: str | None
    ) -> bool:
        """Whether the conditional headers ask for a 304 (RFC 9110 13.2.2 order)."""
        if not self.validators or self.lying == "noisy":
            return False
        if self.lying == "always-304" and (inm is not None or ims is not None):
            return True
        if inm is not None:
            tags = {tag.strip().removeprefix("W/") for tag in inm.split(",")}
            return "*" in tags or out["ETag"].removeprefix("W/") in tags
        if ims is not None:
            try:
                since = parsedate_to_datetime(ims).timestamp()
            except (TypeError, ValueError, IndexError):
                return False
            if self.lying == "stale":
                return since >= self.wall0 + BIRTH
            return self._wall_second(self.last_change(i, t)) <= since
        return False

    # -- the server ------------------------------------------------------------------------
    def _wait_for_slot(self) -> None:
        """Sleep until this request's turn at ``pace`` requests per second."""
        if self.delay:
            time.sleep(self.delay)
        if not self.pace:
            return
        with self._pace_lock:
            now = time.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + 1.0 / self.pace
        if slot > now:
            time.sleep(slot - now)

    def start(self) -> PoissonSite:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep output quiet
                pass

            def do_GET(self) -> None:
                site._wait_for_slot()
                sent = {k.title(): v for k, v in self.headers.items()}
                status, headers, body = site.respond(self.path, sent)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if status != 304:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.t0 = self.clock()
        if self._wall_arg is None:
            self.wall0 = time.time()
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> PoissonSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- freshness from a log --------------------------------------------------------------
    def fresh_seconds(self, log: Iterable[Fetch], t0: float, t1: float) -> np.ndarray:
        """Per page, the seconds of ``[t0, t1]`` during which the crawler's copy was current.

        A copy is the content of the page's last 200; it is current from that download until
        the page's next change. A 304 leaves the copy as it was: current after it if and only
        if it was current before (no change since its download; a false 304 of a lying server
        leaves it stale). So: the union over the page's 200s at ``s_k`` of ``[s_k,
        min(next change after s_k, s_(k+1)))``, clipped to the window. A page never
        downloaded was never current."""
        downloads: dict[int, list[float]] = {}
        for f in log:
            if f.page >= 0 and f.status == 200:
                downloads.setdefault(f.page, []).append(f.t)
        out = np.zeros(self.total)
        for i, times in downloads.items():
            times.sort()
            for k, s in enumerate(times):
                if s >= t1:
                    break
                end = min(self.next_change(i, s), times[k + 1] if k + 1 < len(times) else t1, t1)
                out[i] += max(0.0, end - max(s, t0))
        return out

    def freshness(self, log: Iterable[Fetch], t0: float, t1: float) -> np.ndarray:
        """Per page, the share of ``[t0, t1]`` its copy was current."""
        return self.fresh_seconds(log, t0, t1) / (t1 - t0)

    def weighted_freshness(
        self, log: Iterable[Fetch], t0: float, t1: float, weights: np.ndarray
    ) -> float:
        """``sum w fresh / sum w``: the importance-weighted freshness over ``[t0, t1]``."""
        w = np.asarray(weights, float)
        return float((w * self.freshness(log, t0, t1)).sum() / w.sum())


__all__ = ["ALPHA", "BIRTH", "LYING", "Fetch", "PoissonSite", "reachable", "restricted_pagerank"]
