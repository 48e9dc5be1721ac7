"""Read a crawl's OPIC state and export per-URL and per-site importance (no Scrapy needed).

    from scrapy_opic.export import open_state

    with open_state(".scrapy/opic/site.sqlite") as state:
        for page in state.top(10):
            print(page.importance, page.url)
        for page in state.pages(fetched_only=True):   # streams, one chunk of pages at a time
            ...

A state is opened read-only and read inside one transaction: a crawl that keeps committing to the
same file meanwhile is neither blocked nor disturbed, and the reader sees one consistent snapshot
(the last commit before it opened).

Memory: the per-page numeric arrays of the snapshot (the engine's arrays, as in the crawl) plus
one chunk of URLs at a time; rows are never all built at once (``benchmarks/export_perf.py``
measures the peak).

PageRank: a crawl made with ``OPIC_KEEP_LINKS = True`` kept each page's out-links, and its pages
gain a ``pagerank`` column (after ``importance``): the exact PageRank of the crawled graph,
computed when the state is read (:meth:`OpicState.pagerank`), on the graph the engine's
importance estimates:

* the nodes are every known page (the importance's pages: both columns sum to 1 over them);
* the links are those of each page's last parsed visit, once per target page, no self-link
  (:func:`~scrapy_opic.opic.links.crawl_graph`); a closed page (a status other than ``ok`` that
  closed it: 404, robots.txt...) is no page to link to, a page that redirected stands for its
  target; pages with no links (not fetched yet, failed) are dangling;
* damping ``1 - OPIC_EPSILON`` (0.85 by default), teleport uniform, a dangling page's share
  spread uniformly: ``networkx.pagerank(G, alpha=1 - epsilon)``, the fixpoint OPIC converges to;
  link weights and boosts are not part of it (with their defaults the two coincide).

It is computed by power iteration from the importance (a start close to the answer) until the
L1 change is below :data:`PAGERANK_TOL`: for that moment about 10 bytes per link over the
state's load with scipy, 26 with numpy alone, 47 while building the graph of a crawl in which
a page redirected (a sort of all links); ``benchmarks/export_perf.py`` measures it. A state
without kept links has no such column.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from itertools import repeat
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from ._backends import StoreError, is_redis_location, masked_url, split_location
from ._backends.sqlite_state import StateReader
from ._formats import output_format
from ._series import Series
from .opic.change import (
    SUMS,
    ChangeRates,
    pool_sums,
    static_share,
    unseen_change_freshness,
)
from .opic.constants import (
    CLOSED,
    FETCHED,
    IN_FLIGHT,
    NO_OUTCOME,
    OK,
    PENDING,
    STATUSES,
    outcome_name,
)
from .opic.engine import OpicEngine
from .opic.importance import mix
from .opic.links import crawl_graph
from .opic.pagerank import pagerank
from .opic.refresh import PRIOR_RATE
from .opic.snapshot import engine_arrays, engine_from_header

logger = logging.getLogger("scrapy_opic._scheduler")

PAGE_COLUMNS = (
    "url",
    "importance",
    "cash",
    "history",
    "visits",
    "last_visit",
    "fetched",
    "status",
    "host",
)
#: The page columns of a state that kept its links (OPIC_KEEP_LINKS): ``pagerank`` beside
#: ``importance``, the two estimates of one quantity.
PAGERANK_COLUMNS = PAGE_COLUMNS[:2] + ("pagerank",) + PAGE_COLUMNS[2:]
#: The page columns of a continuous crawl that refetched by freshness (``OPIC_REFETCH``): each
#: page's estimated change rate (changes per day) and the estimated time of the last change
#: its refetches saw (ISO 8601, UTC; empty if none).
CHANGE_COLUMNS = PAGERANK_COLUMNS + ("change_rate", "last_changed")
SITE_COLUMNS = ("level", "site", "importance", "pages", "fetched")
#: Power iteration stops when an iteration changes the vector by less than this (L1): the error
#: left is below ``tol * d / (1 - d)``, 6e-10 over all pages at d = 0.85.
PAGERANK_TOL = 1e-10


class Page(NamedTuple):
    """One page of a state.

    ``importance`` sums to 1 over all known pages; ``cash`` is what the page holds now (sums to 1
    with the virtual page's cash); ``history`` is the link credit the page absorbed at its visits
    (within the window, for windowed policies: what its importance is measured on, see
    :mod:`scrapy_opic.opic.engine`); ``last_visit`` is the clock G at its last visit (0 if never
    fetched); ``fetched`` says that the page's last fetch gave a response that was parsed, and
    ``status`` how that fetch ended: ``ok``, ``http_<code>`` (an error response), ``dns``,
    ``timeout``, ``error`` (another download error), ``spider_error`` (the callback raised),
    ``forbidden`` (robots.txt), ``offsite``, ``filtered`` (a dupefilter), ``ignored`` (another
    IgnoreRequest), ``redirected``, ``lost`` (its request vanished with no outcome),
    or empty if it was never fetched. A page whose status is not ``ok`` is
    closed: links to it pay it nothing. ``pagerank`` is the exact PageRank of the crawled
    graph if the crawl kept its links (``OPIC_KEEP_LINKS``), else None (see the module
    docstring). ``change_rate`` (changes per day: the smoothed maximum-likelihood estimate from
    what its refetches found) and ``last_changed`` (the estimated time of the last change seen,
    ISO 8601 UTC; None if none) if the crawl refetched by freshness, else None.
    """

    url: str
    importance: float
    cash: float
    history: float
    visits: int
    last_visit: float
    fetched: bool
    status: str
    host: str
    pagerank: float | None = None
    change_rate: float | None = None
    last_changed: str | None = None


class Site(NamedTuple):
    """Importance of a host or of a registered domain: the sum over its known pages."""

    level: str  # "host" or "domain"
    site: str
    importance: float
    pages: int
    fetched: int


_NETLOC = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
_HOSTS: dict[str, str] = {}  # netloc -> host: a crawl has far fewer hosts than pages


def host_of(url: str) -> str:
    """The lower-cased host of ``url`` (no user info, no port); cheap enough for every row."""
    m = _NETLOC.match(url)
    netloc = m.group(1) if m else ""
    host = _HOSTS.get(netloc)
    if host is None:
        bare = netloc.rpartition("@")[2]
        if bare.startswith("["):  # IPv6 literal
            host = bare[1 : bare.find("]")] if "]" in bare else bare[1:]
        else:
            host = bare.partition(":")[0]
        host = host.lower()
        if len(_HOSTS) < 100_000:
            _HOSTS[netloc] = host
    return host


_EXTRACT: Any = None


def registered_domain(host: str) -> str:
    """The registered domain of ``host`` (``news.bbc.co.uk`` -> ``bbc.co.uk``), from the public
    suffix list bundled with tldextract (never fetched); the host itself for an IP address or a
    name with no public suffix (``localhost``)."""
    global _EXTRACT
    if _EXTRACT is None:
        import tldextract

        _EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    parts = _EXTRACT(host)
    domain = getattr(parts, "top_domain_under_public_suffix", None)
    if domain is None:  # tldextract < 5.3
        domain = parts.registered_domain
    return domain or host


class OpicState:
    """A read-only snapshot of a crawl's state (see the module docstring).

    Pages are read a batch of blocks at a time (:meth:`StateReader.columns`): every page-level
    method streams in bounded memory, whatever the number of pages, except :meth:`importance`,
    :meth:`fetched_mask` and :meth:`pagerank`, which return an array over all pages.

    :ivar engine: an :class:`~scrapy_opic.opic.engine.OpicEngine` with the snapshot's parameters
        and scalars and no page loaded (for :meth:`stats` and the formulas).
    :ivar meta: what the crawl recorded (spider, settings, time series).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        if is_redis_location(path):
            self.path: Any = path
            self._reader: Any = _redis_snapshot(str(path))
        else:
            self.path = Path(path)
            self._reader = StateReader(self.path)
        try:
            if self._reader.n is None:
                raise StoreError(f"{self.path} holds no OPIC state yet")
            self._header: dict = self._reader.header()
            # One instant for every page's estimate (a wall-clock window's "now").
            now = time.time()
            self._clock = lambda: now
            self.engine: OpicEngine = engine_from_header(self._header, time_fn=self._clock)
            self.meta: dict = self._reader.meta()
        except BaseException:
            self._reader.close()
            raise
        #: The crawl kept its pages' out-links (OPIC_KEEP_LINKS): :meth:`pagerank` answers.
        self.links_kept: bool = bool(getattr(self._reader, "links_kept", False))
        self._total: float | None = None  # the sum of the estimates: importance's normaliser
        self._counts: np.ndarray | None = None  # pages per status
        self._gone = 0  # pages fetched, then closed (importance 0)
        self._pooled_rate = PRIOR_RATE  # the change rate of all pages' observations together
        self._pagerank: np.ndarray | None = None

    @property
    def page_columns(self) -> tuple[str, ...]:
        """The columns of this state's pages: :data:`CHANGE_COLUMNS` if it refetched by
        freshness, else :data:`PAGERANK_COLUMNS` if it kept its links, else
        :data:`PAGE_COLUMNS`."""
        if self.changes_kept:
            return CHANGE_COLUMNS
        return PAGERANK_COLUMNS if self.links_kept else PAGE_COLUMNS

    @property
    def changes_kept(self) -> bool:
        """Whether the crawl refetched by freshness: its pages have change rates."""
        return self._reader.changes_kept

    # -- streaming over the pages -----------------------------------------------------------
    def _batches(self) -> Iterator[tuple[int, dict[str, np.ndarray], OpicEngine, np.ndarray]]:
        """``(first id, columns, engine, estimates)`` per batch of pages: ``engine`` holds the
        batch's pages only (ids from 0), with the snapshot's scalars."""
        for lo, cols in self._reader.columns():
            k = len(cols["f.status"])
            header = {**self._header, "scalars": {**self._header["scalars"], "n": k}}
            e = engine_from_header(header, time_fn=self._clock)
            for name, a in engine_arrays(e).items():
                a[:k] = cols[name]
            est = e.window.estimate(np.arange(k), e.held_credit[:k], e.now())
            try:
                yield lo, cols, e, est
            finally:
                # An engine and its window policy point at each other: without this, each
                # batch's arrays would wait for the cyclic garbage collector (memory growing
                # with the number of batches instead of staying at one batch's).
                e.window.engine = None

    def _scan(self) -> None:
        """One pass over the pages: the importance's normaliser (the open pages' estimates),
        the pages gone, and the status counts."""
        total = 0.0
        gone = 0
        counts = np.zeros(len(STATUSES), np.int64)
        pooled: dict[str, float] = {}
        for _lo, cols, _e, est in self._batches():
            closed = (cols["flags"] & CLOSED) != 0
            total += float(est[~closed].sum())
            gone += int((closed & ((cols["flags"] & FETCHED) != 0)).sum())
            counts += np.bincount(cols["f.status"], minlength=len(STATUSES))[: len(STATUSES)]
            if "r.u" in cols:
                for f, v in pool_sums({f: cols[f"r.{f}"] for f in (*SUMS, "n_u")}).items():
                    pooled[f] = pooled.get(f, 0.0) + v
        self._total, self._counts, self._gone = total, counts, gone
        if pooled:
            self._pooled_rate = ChangeRates(prior_rate=PRIOR_RATE).rate_of_sums(pooled)

    def _mix(self, est: np.ndarray, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Importance from the estimates of a batch (as :meth:`OpicEngine.importance`)."""
        if self._total is None:
            self._scan()
        kept = max(1, self.n - self._gone)
        return mix(est, cols["flags"], self.engine.teleport_share(), self._total or 0.0, kept)

    # -- figures ----------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of known pages."""
        return int(self._reader.n)

    def importance(self) -> np.ndarray:
        """Importance of every page by id (sums to 1): an array over all pages."""
        parts = [self._mix(est, cols) for _lo, cols, _e, est in self._batches()]
        return np.concatenate(parts) if parts else np.zeros(0)

    def pagerank(self) -> np.ndarray | None:
        """The exact PageRank of the crawled graph, by page id (sums to 1), or None if the
        crawl kept no links (see the module docstring). Computed on the first call: memory
        for the whole graph."""
        if not self.links_kept:
            return None
        if self._pagerank is None:
            pages, counts, targets, alias_pages, alias_targets = self._reader.links()
            n = self.n
            flags = np.zeros(n, np.uint8)
            for lo, cols in self._reader.columns(["flags"]):
                flags[lo : lo + len(cols["flags"])] = cols["flags"]
            closed = (flags & CLOSED) != 0
            del flags
            try:
                graph = crawl_graph(n, pages, counts, targets, closed, (alias_pages, alias_targets))
            except ValueError as exc:  # links that do not fit the snapshot
                raise StoreError(f"the OPIC state {self.path} is damaged ({exc})") from None
            del pages, counts, targets
            alpha = 1.0 - self.engine.epsilon
            self._pagerank = pagerank(graph, alpha, PAGERANK_TOL, x0=self.importance())
        return self._pagerank

    @property
    def pending(self) -> int:
        """Pages waiting to be fetched in the snapshot (in-flight ones count: they would be
        fetched again on resume)."""
        if self._counts is None:
            self._scan()
        counts = self._counts
        assert counts is not None  # (made by the scan)
        return int(counts[PENDING] + counts[IN_FLIGHT])

    def fetched_mask(self) -> np.ndarray:
        """Pages whose last fetch was parsed: an array over all pages."""
        parts = [cols["f.outcome"] == OK for _lo, cols in self._reader.columns(["f.outcome"])]
        return np.concatenate(parts) if parts else np.zeros(0, bool)

    def distribution(
        self, bins: int = 2000
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The importance distribution in bounded memory: ``(edges, fetched, not_yet,
        not_fetched)``, page counts per logarithmic bin of importance (``bins`` bins from the
        smallest importance a page can have, the teleport share ``a / n``, to 1), for a rank
        plot: pages whose last fetch was parsed (status ``ok``), pages never fetched yet (no
        status), and the others (failed, gone, refused, redirected: a status but not ``ok``)."""
        n = self.n
        if self._total is None:
            self._scan()
        low = max(self.engine.teleport_share() / max(n, 1), 1e-300) * 0.999
        edges = np.geomspace(low, 1.0, bins + 1)
        fetched = np.zeros(bins, np.int64)
        not_yet = np.zeros(bins, np.int64)
        other = np.zeros(bins, np.int64)
        for _lo, cols, _e, est in self._batches():
            k = np.clip(np.searchsorted(edges, self._mix(est, cols), side="right") - 1, 0, bins - 1)
            outcome = cols["f.outcome"]
            ok, never = outcome == OK, outcome == NO_OUTCOME
            fetched += np.bincount(k[ok], minlength=bins)
            not_yet += np.bincount(k[never], minlength=bins)
            other += np.bincount(k[~ok & ~never], minlength=bins)
        return edges, fetched, not_yet, other

    def stats(self) -> dict[str, float]:
        """The crawl's figures as the scheduler reports them: ``fetched`` is the pages whose
        last fetch was parsed (the ``fetched`` column's true rows: one meaning everywhere)."""
        out = self.engine.stats()
        fetched = getattr(self._reader, "fetched", None)
        if fetched is None:  # (a state saved before the figure was kept, a Redis crawl)
            fetched = int(self.fetched_mask().sum())
        out["fetched"] = fetched
        failed = getattr(self._reader, "failed_visits", None)
        if failed is not None:
            out["failed_visits"] = failed
        return out

    def total_cash(self) -> float:
        """All cash, the virtual page's included (1 up to rounding): one pass over the pages."""
        total = self.engine.virtual_cash
        for _lo, _cols, e, _est in self._batches():
            total += float(e.cash().sum())
        return total

    @property
    def series(self) -> Series:
        """The crawl's time series (one point per commit, thinned to a bounded length)."""
        return Series.from_list(self.meta.get("series", []))

    # -- pages ------------------------------------------------------------------------------
    def _pages(
        self,
        e: OpicEngine,
        cols: dict[str, np.ndarray],
        imp: np.ndarray,
        pr: np.ndarray | None,
        rows: np.ndarray,
        urls: list[str | None],
        first: int,
    ) -> list[Page]:
        """The pages at ``rows`` of a batch (ids ``first + rows``; ``pr``: the crawl's
        PageRank, by id, if it kept its links)."""
        cash = e.cash(rows).tolist()
        hist = e.hist[rows].tolist()
        seen = e.visits[rows]
        visits = seen.tolist()
        last = np.where(seen > 0, e.last_g[rows], 0.0).tolist()  # never visited: 0
        codes = cols["f.outcome"][rows]
        fetched = (codes == OK).tolist()
        status = [outcome_name(c) for c in codes.tolist()]
        if None in urls:  # a page whose URL was never recorded: name it by its id
            urls = [u if u is not None else str(first + int(r)) for u, r in zip(urls, rows)]
        hosts = [host_of(u) if u is not None else "" for u in urls]
        ranks = pr[first + rows].tolist() if pr is not None else repeat(None)
        if "r.u" in cols:
            rate, changed = self._changes(cols, rows)
        else:
            rate = changed = repeat(None)  # type: ignore[assignment]
        values = zip(
            urls, imp[rows].tolist(), cash, hist, visits, last, fetched, status, hosts, ranks,
            rate, changed,
        )  # fmt: skip
        return list(map(Page._make, values))

    def change_summary(self) -> dict[str, Any]:
        """How the open pages of a crawl that refetched by freshness change (``{}`` for another
        crawl), in one pass: ``bands``, per band of estimated change rate, ``(label, pages,
        importance)``, the pages never seen to change first; ``freshness``, the expected
        importance-weighted freshness of the copies at the last observation of the crawl (each
        fetched page's ``e^(-rate * age)``, its age the time since its last fetch that looked
        at its content: a 200 or a 304; for a page never seen to change, the chance that it
        did not change, by :func:`~scrapy_opic.opic.change.unseen_change_freshness`), and
        ``at``, that time (seconds since the epoch)."""
        if not self.changes_kept:
            return {}
        if self._total is None:
            self._scan()
        edges = [1 / 86400.0 / 7, 1 / 86400.0, 1 / 3600.0]  # per second: a week, a day, an hour
        labels = ["never seen to change", "less than weekly", "weekly to daily"]
        labels += ["daily to hourly", "more than hourly"]
        pages = np.zeros(len(labels), np.int64)
        weight = np.zeros(len(labels))
        parts = []
        changed = 0  # pages seen to change
        for _lo, cols, _e, est in self._batches():
            imp = self._mix(est, cols)
            seen = ~np.isnan(cols["r.last"]) & ((cols["flags"] & CLOSED) == 0)  # (open pages)
            rows = np.flatnonzero(seen)
            per_second = self._rates(cols, rows)[1]
            band = np.where(cols["r.n_c"][rows] > 0, 1 + np.searchsorted(edges, per_second), 0)
            np.add.at(pages, band, 1)
            np.add.at(weight, band, imp[rows])
            # (A page never seen to change, with no dated change either: see below.)
            unseen = (cols["r.n_c"][rows] == 0) & ~(cols["r.u_e"][rows] > 0)
            parts.append((imp[rows], per_second, cols["r.last"][rows], unseen, cols["r.u"][rows]))
            changed += int((cols["r.n_c"][rows] > 0).sum())
        at = max((float(p[2].max()) for p in parts if len(p[2])), default=float("nan"))
        # The copies of pages never seen to change are read from the mixture of static pages
        # and pages of the pooled rate (opic.change: a point rate would call them all fresh).
        unchanged = np.concatenate([p[4][p[3]] for p in parts]) if parts else np.zeros(0)
        static = static_share(unchanged, changed, self._pooled_rate)
        num = den = 0.0
        for imp, per_second, last, unseen, u in parts:
            age = np.maximum(at - last, 0.0)
            fresh = np.exp(-per_second * age)
            fresh[unseen] = unseen_change_freshness(
                u[unseen], age[unseen], static, self._pooled_rate
            )
            num += float((imp * fresh).sum())
            den += float(imp.sum())
        bands = list(zip(labels, pages.tolist(), weight.tolist()))
        return {"bands": bands, "freshness": num / den if den > 0 else float("nan"), "at": at}

    def _rates(
        self, cols: dict[str, np.ndarray], rows: np.ndarray
    ) -> tuple[ChangeRates, np.ndarray]:
        """The saved change observations of a batch's ``rows``, and their rates (per second,
        with the crawl's pooled rate as the prior, as the crawl planned with)."""
        if self._total is None:
            self._scan()
        rates = ChangeRates(prior_rate=PRIOR_RATE, capacity=len(rows))
        for f in ChangeRates.FIELDS:
            rates.a[f][: len(rows)] = cols[f"r.{f}"][rows]
        return rates, rates.rates(prior_rate=self._pooled_rate)

    def _changes(
        self, cols: dict[str, np.ndarray], rows: np.ndarray
    ) -> tuple[list[float], list[str | None]]:
        """The change rates (per day) and last changes (ISO 8601) of a batch's ``rows``."""
        rates, per_second = self._rates(cols, rows)
        last = rates.last_changed(rates=per_second)
        stamps = [
            None
            if t != t
            else datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")
            for t in last.tolist()
        ]
        return (per_second * 86400.0).tolist(), stamps

    def page_chunks(self, fetched_only: bool = False) -> Iterator[list[Page]]:
        """Pages in id (discovery) order, a chunk of stored URL rows at a time."""
        pr = self.pagerank()
        chunks = self._reader.page_chunks()
        for lo, cols, e, est in self._batches():
            imp = self._mix(est, cols)
            done = 0
            while done < len(est):
                first, rows = next(chunks)
                if first != lo + done:
                    raise StoreError(f"the OPIC state {self.path} is damaged (page rows)")
                idx = np.arange(done, done + len(rows))
                if fetched_only:
                    idx = idx[cols["f.outcome"][idx] == OK]
                urls = [rows[int(k) - done][1] for k in idx]
                yield self._pages(e, cols, imp, pr, idx, urls, lo)
                done += len(rows)

    def pages(self, fetched_only: bool = False) -> Iterator[Page]:
        """Every known page (or every fetched one), streamed in discovery order."""
        for chunk in self.page_chunks(fetched_only):
            yield from chunk

    def top(self, n: int = 10, fetched_only: bool = False) -> list[Page]:
        """The ``n`` most important pages, most important first (ties by id: discovery
        order), in one pass over the pages keeping ``n`` at a time."""
        if n <= 0:
            return []
        pr = self.pagerank()
        best: list[tuple[float, int, Page]] = []  # (-importance, id, page)
        for lo, cols, e, est in self._batches():
            imp = self._mix(est, cols)
            cand = np.arange(len(imp))
            if fetched_only:
                cand = cand[cols["f.outcome"] == OK]
            if len(cand) > n:
                # The n best of the batch (all those tied with the n-th too: ties go by id).
                cut = np.partition(imp[cand], len(cand) - n)[len(cand) - n]
                cand = cand[imp[cand] >= cut]
            if len(best) >= n:  # (n > 0: best has a last)
                cand = cand[imp[cand] >= -best[-1][0]]
            if not len(cand):
                continue
            urls = self._reader.urls_of((lo + cand).tolist())
            pages = self._pages(e, cols, imp, pr, cand, [urls[lo + int(k)] for k in cand], lo)
            best.extend((-p.importance, lo + int(k), p) for k, p in zip(cand, pages))
            best.sort(key=lambda t: (t[0], t[1]))
            del best[n:]
        return [p for _x, _i, p in best]

    def by_site(self, fetched_only: bool = False) -> list[Site]:
        """Site-level importance (the paper's proposal): importance summed per host and per
        registered domain, with page counts; hosts first, each level most important first."""
        hosts: dict[str, list] = {}
        for chunk in self.page_chunks(fetched_only):
            for p in chunk:
                acc = hosts.get(p.host)
                if acc is None:
                    hosts[p.host] = acc = [0.0, 0, 0]
                acc[0] += p.importance
                acc[1] += 1
                acc[2] += p.fetched
        domains: dict[str, list] = {}
        for host, (imp, pages, fetched) in hosts.items():
            acc = domains.setdefault(registered_domain(host), [0.0, 0, 0])
            acc[0] += imp
            acc[1] += pages
            acc[2] += fetched
        out: list[Site] = []
        for level, table in (("host", hosts), ("domain", domains)):
            rows = sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))
            out.extend(Site(level, site, imp, pages, f) for site, (imp, pages, f) in rows)
        return out

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> OpicState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_state(path: str | os.PathLike) -> OpicState:
    """Open a state read-only: a file, or a crawl in Redis given as ``redis://host:port/db#KEY``
    (``OPIC_REDIS_URL`` + ``#`` + the crawl's ``OPIC_REDIS_KEY``). :class:`StoreError` (one
    clear line) if it is missing, corrupt, empty, of an unknown format or unreachable.

    A Redis crawl is read page by page into memory (its arrays and its URLs): exact once its
    processes have stopped; while they run, each page is as it was when read."""
    return OpicState(path)


def read_redis_crawl(location: str, read: Callable[[Any, str], Any]) -> Any:
    """``read(client, key)`` on the crawl at ``redis://host:port/db#KEY`` (the client closed
    afterwards); an unreachable server, a missing package or a bad location is one
    :class:`StoreError` line."""
    try:
        import redis
    except ImportError:
        raise StoreError("reading a Redis crawl needs: pip install 'scrapy-opic[redis]'") from None
    from ._backends.redis import open_client

    url, key = split_location(location)
    try:
        client = open_client(url)
        try:
            return read(client, key)
        finally:
            client.close()
    except (redis.RedisError, redis.RedisClusterException, ValueError) as exc:
        raise StoreError(
            f"cannot read the OPIC crawl {key!r} at {masked_url(url)}: {exc}"
        ) from None


def _redis_snapshot(location: str) -> Any:
    from ._backends.redis_state import RedisSnapshot

    return read_redis_crawl(location, RedisSnapshot)


# -- writing ---------------------------------------------------------------------------------
def _json_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return repr(v)


# Characters that a URL must not hold for the fast page-row paths (else the general writer,
# with quoting or escaping, takes the chunk).
_CSV_SPECIAL = re.compile(r'[",\r\n]')
_JSON_SPECIAL = re.compile(r'["\\\x00-\x1f\x7f]')


def _fast_page_lines(
    chunk: list[Page], fmt: str, ranked: bool, changes: bool = False
) -> list[str] | None:
    """Page rows formatted with f-strings (faster than ``csv``/``json``), or
    ``None`` when a URL needs quoting or escaping. Floats are written with ``repr``: exact.
    ``ranked``: with the ``pagerank`` column (:data:`PAGERANK_COLUMNS`); ``changes``: and
    the change columns (:data:`CHANGE_COLUMNS`; a missing value is empty, or JSON's null:
    the values are floats and ISO 8601 times, nothing to quote or escape)."""
    if not chunk:
        return []
    urls = " ".join(p.url for p in chunk)
    if fmt == "csv":
        return None if _CSV_SPECIAL.search(urls) else _fast_csv_lines(chunk, ranked, changes)
    return None if _JSON_SPECIAL.search(urls) else _fast_json_lines(chunk, ranked, changes)


def _fast_csv_lines(chunk: list[Page], ranked: bool, changes: bool) -> list[str]:
    if changes:
        return [
            f"{u},{i!r},{'' if r is None else repr(r)},{c!r},{h!r},{v},{t!r},{f},{st},{host},"
            f"{'' if rate is None else repr(rate)},{last or ''}\n"
            for u, i, c, h, v, t, f, st, host, r, rate, last in chunk
        ]
    if ranked:
        return [
            f"{u},{i!r},{'' if r is None else repr(r)},{c!r},{h!r},{v},{t!r},{f},{st},{host}\n"
            for u, i, c, h, v, t, f, st, host, r, _rate, _last in chunk
        ]
    return [
        f"{u},{i!r},{c!r},{h!r},{v},{t!r},{f},{st},{host}\n"
        for u, i, c, h, v, t, f, st, host, _r, _rate, _last in chunk
    ]


def _fast_json_lines(chunk: list[Page], ranked: bool, changes: bool) -> list[str]:
    if changes:
        return [
            f'{{"url": "{u}", "importance": {i!r}, '
            f'"pagerank": {"null" if r is None else repr(r)}, "cash": {c!r}, '
            f'"history": {h!r}, "visits": {v}, "last_visit": {t!r}, '
            f'"fetched": {"true" if f else "false"}, "status": "{st}", "host": "{host}", '
            f'"change_rate": {"null" if rate is None else repr(rate)}, '
            f'"last_changed": {"null" if last is None else chr(34) + last + chr(34)}}}\n'
            for u, i, c, h, v, t, f, st, host, r, rate, last in chunk
        ]
    if ranked:
        return [
            f'{{"url": "{u}", "importance": {i!r}, '
            f'"pagerank": {"null" if r is None else repr(r)}, "cash": {c!r}, '
            f'"history": {h!r}, "visits": {v}, "last_visit": {t!r}, '
            f'"fetched": {"true" if f else "false"}, "status": "{st}", "host": "{host}"}}\n'
            for u, i, c, h, v, t, f, st, host, r, _rate, _last in chunk
        ]
    return [
        f'{{"url": "{u}", "importance": {i!r}, "cash": {c!r}, "history": {h!r}, '
        f'"visits": {v}, "last_visit": {t!r}, "fetched": {"true" if f else "false"}, '
        f'"status": "{st}", "host": "{host}"}}\n'
        for u, i, c, h, v, t, f, st, host, _r, _rate, _last in chunk
    ]


def _page_row(p: Page, ranked: bool, changes: bool = False) -> tuple:
    """A page's values in the order of its columns."""
    row = p[:2] + (p.pagerank,) + p[2:9] if ranked else p[:9]
    return row + (p.change_rate, p.last_changed) if changes else row


def _write_rows(
    fh: IO[str], fmt: str, columns: tuple[str, ...], chunks: Iterable[list[Any]]
) -> int:
    n = 0
    pages = columns in (PAGE_COLUMNS, PAGERANK_COLUMNS, CHANGE_COLUMNS)
    changes = columns == CHANGE_COLUMNS
    ranked = columns in (PAGERANK_COLUMNS, CHANGE_COLUMNS)
    writer = csv.writer(fh, lineterminator="\n")
    heads = [json.dumps(c) + ": " for c in columns]
    if fmt == "csv":
        writer.writerow(columns)
    for chunk in chunks:
        lines = _fast_page_lines(chunk, fmt, ranked, changes) if pages else None
        if lines is not None:
            fh.writelines(lines)
        else:
            rows = [_page_row(p, ranked, changes) for p in chunk] if pages else chunk
            if fmt == "csv":
                writer.writerows(rows)
            else:
                fh.writelines(_json_lines(heads, rows))
        n += len(chunk)
    return n


def _json_lines(heads: list[str], rows: Iterable[Any]) -> Iterator[str]:
    """Each row as a JSON object, one a line (``heads``: its columns' ``"name": ``)."""
    for row in rows:
        yield "{" + ", ".join(h + _json_value(v) for h, v in zip(heads, row)) + "}\n"


@contextlib.contextmanager
def output_file(out: str | os.PathLike) -> Iterator[IO[str]]:
    """A text handle for ``out`` (``-``: stdout).

    A regular file (or a new one) is written under a temporary name in its directory and
    renamed over it when the block ends without error, so a failed export or report never
    leaves a truncated file behind (nor the temporary one); it keeps the permissions of the file
    it replaces. A symbolic link is followed: its target is the file written, the link stays.
    Anything else (a device such as ``/dev/stdout`` or ``/dev/null``, a FIFO) is written
    through, as ``open(out, "w")`` would. Errors name ``out``, never the temporary file."""
    if str(out) == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    if str(out).endswith(("/", os.sep)) or os.path.isdir(out):
        raise ValueError(f"{out}: a directory, expected a file name")
    try:
        mode = os.stat(out)  # (through any symlinks)
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise _cannot_write(out, exc) from None
    if mode is not None and not stat.S_ISREG(mode.st_mode):
        try:
            with open(out, "w", newline="", encoding="utf-8") as fh:
                yield fh
        except OSError as exc:
            raise _cannot_write(out, exc) from None
        return
    with _replacing(out, mode) as fh:
        yield fh


@contextlib.contextmanager
def _replacing(out: str | os.PathLike, mode: os.stat_result | None) -> Iterator[IO[str]]:
    """A temporary file that replaces the regular file ``out`` (``mode``: its status, None if
    it is new) with its permissions when the block ends without error (see output_file)."""
    target = Path(os.path.realpath(out))  # a symlink's target is replaced, not the link
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise _cannot_write(out, exc) from None
    try:
        try:
            with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
                yield fh
            if mode is not None:
                os.chmod(tmp, stat.S_IMODE(mode.st_mode))
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target)
        except OSError as exc:
            raise _cannot_write(out, exc) from None
    finally:
        if os.path.exists(tmp):  # not renamed: failed, or the rename itself failed
            os.unlink(tmp)


def _cannot_write(out: Any, exc: OSError) -> OSError:
    return OSError(f"cannot write {out}: {exc.strerror or exc}")


def write_export(
    state: OpicState,
    out: str,
    *,
    fmt: str | None = None,
    top: int | None = None,
    fetched_only: bool = False,
    by_site: bool = False,
) -> int:
    """Write pages (columns :attr:`OpicState.page_columns`: :data:`PAGE_COLUMNS`, with
    ``pagerank`` if the crawl kept its links) or, with ``by_site``, sites (columns
    :data:`SITE_COLUMNS`, ``top`` per level) to ``out``; returns the number of rows."""
    fmt = output_format(out, fmt)
    columns: tuple[str, ...]
    chunks: Iterable[list[Any]]
    if by_site:
        sites = state.by_site(fetched_only)
        if top is not None:  # the top N of each level
            seen: dict[str, int] = {}
            trimmed = []
            for s in sites:
                seen[s.level] = seen.get(s.level, 0) + 1
                if seen[s.level] <= top:
                    trimmed.append(s)
            sites = trimmed
        columns, chunks = SITE_COLUMNS, [sites]
    elif top is not None:
        columns, chunks = state.page_columns, [state.top(top, fetched_only)]
    else:
        columns, chunks = state.page_columns, state.page_chunks(fetched_only)
    with output_file(out) as fh:
        return _write_rows(fh, fmt, columns, chunks)


def export_at_close(targets: dict[str, dict[str, Any]], location: str, spider: str) -> bool:
    """``OPIC_EXPORT``: write each target (``{spider}`` replaced) from the state a crawl just
    made durable. A failed export is logged, never raised (``scrapy opic-export`` can redo it):
    whether every target was written."""
    ok = True
    for out, options in targets.items():
        target = out.replace("{spider}", spider)
        try:
            with open_state(location) as state:
                n = write_export(state, target, **options)
        except Exception as exc:
            logger.error("OPIC export to %s failed: %s", target, exc)
            ok = False
        else:
            logger.info("OPIC importance of %d row%s exported to %s", n, "s"[: n != 1], target)
    return ok


__all__ = [
    "OpicState",
    "Page",
    "Site",
    "open_state",
    "write_export",
]
