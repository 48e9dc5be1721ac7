"""The Redis store: one OPIC frontier that any number of crawling processes share.

Redis is the engine here, not a cache of it: the cash, history and status of every page, the
clock G, the virtual page and the pending queues live in Redis, and every change is one call of
one Lua script (``opic.lua``), which Redis runs atomically. So:

* two processes that visit and pay at the same moment never create or lose cash, and never
  lease the same page twice at once;
* the greedy pop is global: the page with the most cash across the whole frontier (among those
  of the highest priority, in a download slot the asking process has room for);
* the virtual page's payout stays O(1): the same per-page accumulators as
  :class:`~scrapy_opic.opic.engine.OpicEngine`, so queue scores never move on a payout;
* a popped page is *leased* for ``lease`` seconds (server time). Its process renews the leases
  it holds (:meth:`RedisFrontier.renew`); a process that dies stops renewing, and the next pop
  after expiry puts the page back in the queue with its cash intact (it kept growing meanwhile).
  An outcome reported under an expired lease (``stale``) changes nothing.

The script follows the embedded engine's formulas operation for operation, so a crawl replayed on
both agrees to float rounding (tested). Window policies: the unbounded history (every estimator)
and Interpolation (G or wall clock); the multi-measure windows (variable, fixed, improved) keep a
list of measures per page and are embedded-store only.

Keys (``ns`` is the crawl's key wrapped in a Redis Cluster hash tag, e.g. ``{opic:site}``): see
the header of ``opic.lua``. Memory (``benchmarks/redis_perf.py``): about 300 bytes of Redis per
visited page, about 760 per pending page with a 236-byte request.

Round trips: one per pop, one per visit (it also schedules the links it pays, so a fetched
page costs two), one per start request batch, retry, redirect or failure, and one per lease
renewal period per process. :attr:`RedisFrontier.round_trips` counts them.

Nothing here knows Scrapy: requests are opaque bytes and slots plain strings.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..opic.engine import OpicEngine
from ..opic.window import Interpolation, UnboundedHistory, parse_window
from .sqlite import CHUNK, StoreError

LUA = Path(__file__).with_name("opic.lua").read_text()

#: The schemes of a Redis location (``redis://host:port/db#key``) that :func:`is_redis_location`
#: recognises.
SCHEMES = ("redis://", "rediss://", "unix://")

#: Codes a schedule answers per request.
DUPLICATE, SCHEDULED, NEEDS_REQUEST = 0, 1, 2

#: The packed globals (``<ns>:s``), in the order of opic.lua's SCALARS.
SCALARS = (
    "eps", "refresh", "cont", "win", "est", "T", "wall", "mom", "n", "G", "greal", "vcash",
    "vhist", "acca", "accu", "nunf", "visits", "ema", "accba", "accbu", "accda", "accdu", "btot",
    "dtot", "rate", "st0", "st1", "st2", "st3", "reclaimed", "stale",
)  # fmt: skip
_GLOBALS = struct.Struct("<" + "d" * len(SCALARS))
#: A page's ``x`` (54 bytes: under Redis's hash-max-listpack-value, so page hashes stay compact).
_PAGE_DTYPE = np.dtype(
    [("s", "<f8"), ("h", "<f8"), ("lg", "<f8"), ("b", "<f8"), ("d", "<f8"), ("lt", "<f8"),
     ("v", "<u4"), ("f", "u1"), ("st", "u1")]
)  # fmt: skip
_PAGE = struct.Struct("<6dI2B")
_PARAMS = SCALARS[:8]
ESTIMATORS = ("blend", "lemma", "paper", "regression")


def is_redis_location(location: Any) -> bool:
    return isinstance(location, str) and location.startswith(SCHEMES)


def masked_url(url: str) -> str:
    """``url`` with any password hidden, for logs, errors and the settings kept in a state."""
    return re.sub(r"^([a-z]+://)[^@/]*@", r"\1***@", url)


def split_location(location: str) -> tuple[str, str]:
    """``redis://host:port/db#key`` -> (server URL, crawl key). The key is required."""
    url, _, key = location.partition("#")
    if not key:
        raise StoreError(f"{location}: name the crawl's key after '#' (redis://host:6379/0#KEY)")
    return url, key


def window_params(window: str) -> dict[str, float]:
    """The script's parameters for a window spec, or :class:`ValueError` for a window the Redis
    store does not run."""
    policy = parse_window(window)
    if isinstance(policy, UnboundedHistory):
        return {
            "win": 0.0,
            "est": float(ESTIMATORS.index(policy.estimator)),
            "T": 0.0,
            "wall": 0.0,
            "mom": 1.0 if policy.needs_moments else 0.0,
        }
    if isinstance(policy, Interpolation):
        return {
            "win": 1.0,
            "est": 0.0,
            "T": policy.T,
            "wall": 1.0 if policy.clock == "wall" else 0.0,
            "mom": 0.0,
        }
    raise ValueError(
        f"the Redis store runs the unbounded and interpolation windows, not {window!r} "
        "(the variable, fixed and improved windows are embedded-store only)"
    )


def window_spec(g: dict[str, float]) -> str:
    """The window spec of a crawl's parameters (the inverse of :func:`window_params`)."""
    if g["win"] == 1.0:
        return f"interpolation:{g['T']:g}" + (":wall" if g["wall"] == 1.0 else "")
    est = ESTIMATORS[int(g["est"])]
    return "unbounded" if est == "blend" else f"unbounded:{est}"


class Popped(NamedTuple):
    """A page leased to this process: its fingerprint, request bytes and download slot."""

    fp: bytes
    data: bytes
    slot: str


@dataclass
class Visited:
    """What a visit answered: ``ok`` false for a stale lease (nothing changed); ``codes`` per
    link (:data:`SCHEDULED`, :data:`DUPLICATE`, :data:`NEEDS_REQUEST`); the page's importance
    just after the visit (``None`` for windowed policies)."""

    ok: bool
    codes: list[int]
    importance: float | None


class Link(NamedTuple):
    """A followed link of a visit: the child page and, to schedule it, its request."""

    fp: bytes
    url: str
    weight: float = 1.0
    boost: float = 0.0
    again: bool = False  # fetch even if visited (dont_filter)
    priority: int = 0
    slot: str = ""
    data: bytes = b""  # empty: the caller knows the page is no longer new


def _glob(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _f(x: float) -> str:
    return repr(float(x))


class RedisFrontier:
    """A crawl's OPIC frontier in Redis (see the module docstring).

    :param client: a ``redis.Redis`` client (``decode_responses`` must be off: fingerprints are
        raw bytes).
    :param key: the crawl's name on the server, e.g. ``opic:myspider``; several crawls share a
        server under different keys.
    :param lease: seconds a popped page stays leased without renewal.
    """

    def __init__(self, client: Any, key: str, lease: float = 60.0) -> None:
        self.client = client
        self.key = key
        self.ns = "{" + key + "}"
        self.lease_ms = max(1, int(lease * 1000))
        self._script = client.register_script(LUA)
        self.round_trips = 0

    @classmethod
    def from_url(cls, url: str, key: str, **kw: Any) -> RedisFrontier:
        import redis

        return cls(redis.Redis.from_url(url), key, **kw)

    def _call(self, *args: Any) -> Any:
        self.round_trips += 1
        return self._script(keys=[self.ns], args=args)

    # -- crawl ------------------------------------------------------------------------------
    def open(
        self,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        continuous: bool = False,
        window: str = "unbounded",
    ) -> bool:
        """Join the crawl under this key, creating it if there is none. Returns whether this
        call created it. :class:`ValueError` if the crawl was started with other parameters
        (two processes running different formulas on one frontier would make no sense)."""
        mine = {
            "eps": float(epsilon),
            "refresh": float(refresh),
            "cont": 1.0 if continuous else 0.0,
            **window_params(window),
        }
        self.round_trips += 1
        existed = bool(self.client.exists(self.ns + ":s"))
        stored = self._call("init", *(repr(mine[name]) for name in _PARAMS))
        stored = dict(zip(_PARAMS, (float(v) for v in stored)))
        differ = {k: (stored[k], mine[k]) for k in _PARAMS if stored[k] != mine[k]}
        if differ:
            what = ", ".join(f"{k}: crawl {a!r}, here {b!r}" for k, (a, b) in differ.items())
            raise ValueError(f"the OPIC crawl {self.key!r} in Redis has other parameters ({what})")
        return not existed

    def globals(self) -> dict[str, float] | None:
        """The crawl's parameters and global scalars (``None`` if there is no crawl)."""
        self.round_trips += 1
        blob = self.client.get(self.ns + ":s")
        return None if blob is None else dict(zip(SCALARS, _GLOBALS.unpack(blob)))

    def clear(self) -> int:
        """Delete every key of this crawl; returns how many."""
        pattern = _glob(self.ns) + ":*"
        n = 0
        batch: list[bytes] = []
        for k in self.client.scan_iter(match=pattern, count=1000):
            batch.append(k)
            if len(batch) >= 1000:
                n += self.client.unlink(*batch)
                batch = []
        if batch:
            n += self.client.unlink(*batch)
        return n

    # -- scheduling -------------------------------------------------------------------------
    def schedule(
        self, requests: Sequence[tuple[bytes, str, int, str, bytes]], again: bool = False
    ) -> list[int]:
        """Schedule ``(fp, url, priority, slot, request bytes)`` each; a code per request."""
        if not requests:
            return []
        args: list[Any] = ["sched", "1" if again else "0"]
        for fp, url, priority, slot, data in requests:
            args += [fp, url, int(priority), slot, data]
        return [int(c) for c in self._call(*args)]

    def pop(self, token: str, full_slots: Iterable[str] = ()) -> Popped | None:
        """Lease the best page (greedy, global) whose slot is not in ``full_slots``."""
        got = self._call("pop", token, self.lease_ms, *full_slots)
        if not got:
            return None
        fp, data, slot = got
        return Popped(fp, data, slot.decode())

    # -- outcomes ---------------------------------------------------------------------------
    def visit(
        self,
        fp: bytes,
        token: str,
        links: Sequence[Link],
        plain: bool = True,
        boosts: bool = False,
        virtual_weight: float = 0.0,
    ) -> Visited:
        """The visit of leased page ``fp``: its cash goes into its history and is paid to
        ``links`` (weights, boosts and ``virtual_weight`` as in :meth:`OpicEngine.visit`;
        ``plain``: equal shares, weights ignored), and each link with request bytes is
        scheduled, in one atomic step."""
        args: list[Any] = [
            "visit",
            fp,
            token,
            "1" if plain else "0",
            "1" if boosts else "0",
            _f(virtual_weight),
        ]
        for link in links:
            args += [
                link.fp,
                link.url,
                _f(link.weight),
                _f(link.boost),
                "1" if link.again else "0",
                int(link.priority),
                link.slot,
                link.data,
            ]
        out = self._call(*args)
        if not int(out[0]):
            return Visited(False, [], None)
        imp = float(out[1])
        return Visited(True, [int(c) for c in out[2:]], None if imp < 0 else imp)

    def fail(self, fp: bytes, token: str) -> bool:
        """Fetched, nothing to follow: a visit with no out-links (cash to the virtual page)."""
        return bool(int(self._call("fail", fp, token)[0]))

    def forfeit(self, fp: bytes, token: str = "", pending: bool = False) -> bool:
        """Give the page up unfetched: its cash goes to the virtual page. With ``token``, a page
        leased under it; without, a page never scheduled, or with ``pending`` also a pending
        one (never one in flight or visited)."""
        return bool(int(self._call("forfeit", fp, token, "1" if pending else "0")[0]))

    def redirect(
        self, fp: bytes, token: str, target: bytes, url: str, priority: int, slot: str, data: bytes
    ) -> tuple[bool, int]:
        """Leased page ``fp`` redirected to ``target``: the cash moves there and the target is
        scheduled. Returns (lease was valid, schedule code)."""
        out = self._call("redirect", fp, token, target, url, int(priority), slot, data)
        return bool(int(out[0])), (int(out[1]) if len(out) > 1 else DUPLICATE)

    def retry(self, fp: bytes, token: str, priority: int, slot: str, data: bytes) -> bool:
        """Pending again with a new request; no money moves."""
        return bool(int(self._call("retry", fp, token, int(priority), slot, data)[0]))

    def release(self, leases: Iterable[tuple[bytes, str]]) -> int:
        """Hand leased pages back (a process leaving the crawl): pending again, cash intact."""
        args: list[Any] = ["release"]
        for fp, token in leases:
            args += [fp, token]
        return int(self._call(*args)) if len(args) > 1 else 0

    def renew(self, leases: Iterable[tuple[bytes, str]]) -> int:
        """Extend the leases still held under these tokens; returns how many."""
        args: list[Any] = ["renew", self.lease_ms]
        for fp, token in leases:
            args += [fp, token]
        return int(self._call(*args)) if len(args) > 2 else 0

    # -- figures ----------------------------------------------------------------------------
    def status(self) -> dict[str, float]:
        """The crawl's global figures (one round trip): pages, pending, in flight, leases...
        O(1)."""
        self.round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.ns + ":s")
        pipe.zcard(self.ns + ":leases")
        blob, leases = pipe.execute()
        g = dict(zip(SCALARS, _GLOBALS.unpack(blob))) if blob else {}

        def num(name: str) -> float:
            return float(g.get(name, 0.0))

        G = num("G")
        n = int(num("n"))
        return {
            "pages": n,
            "fetched": n - int(num("nunf")),
            "unfetched": int(num("nunf")),
            "visits": int(num("visits")),
            "G": G,
            "error_factor": 1.0 / G if G > 0 else float("inf"),
            "virtual_cash": num("vcash"),
            "discovered": int(num("st0")),
            "pending": int(num("st1")),
            "in_flight": int(num("st2")),
            "visited": int(num("st3")),
            "leases": int(leases),
            "reclaimed": int(num("reclaimed")),
            "stale": int(num("stale")),
        }

    def heartbeat(self, worker: str) -> None:
        """Record that process ``worker`` is alive (its last beat, server-independent time)."""
        self.round_trips += 1
        self.client.hset(self.ns + ":workers", worker, time.time())

    def leave(self, worker: str) -> None:
        self.round_trips += 1
        self.client.hdel(self.ns + ":workers", worker)

    def workers(self) -> int:
        """Processes that joined the crawl and have not left (a killed one stays listed)."""
        self.round_trips += 1
        return int(self.client.hlen(self.ns + ":workers"))

    def add_point(self, point: dict[str, float], keep: int = 10_000) -> None:
        """Append a point of the crawl's time series (bounded to the last ``keep``)."""
        self.round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.ns + ":series", json.dumps(point))
        pipe.ltrim(self.ns + ":series", -keep, -1)
        pipe.execute()

    def series(self) -> list[dict[str, float]]:
        return [json.loads(x) for x in self.client.lrange(self.ns + ":series", 0, -1)]

    def set_meta(self, meta: dict[str, Any]) -> None:
        self.round_trips += 1
        self.client.set(self.ns + ":meta", json.dumps(meta, default=str))

    def meta(self) -> dict[str, Any]:
        self.round_trips += 1
        raw = self.client.get(self.ns + ":meta")
        return json.loads(raw) if raw else {}

    def snapshot(self) -> RedisSnapshot:
        """Read every page into an :class:`OpicEngine` (for exports and checks). Pages are read
        a chunk at a time while the crawl may go on: a stopped crawl reads exactly; a running
        one gives each page as it was when its chunk was read."""
        return RedisSnapshot(self)

    def check(self) -> list[str]:
        """The frontier's structural invariants, read back from Redis: a pending page is in
        exactly one queue (of its priority, fetched or not) scored by its stored cash, and no
        other page is queued; the tiers are the priorities with queued pages; the leases are
        the in-flight pages; pending and in-flight pages have a request; the status counts
        match. Returns the problems found (none when all hold). O(pages), for tests and
        diagnostics while no process runs."""
        c, ns = self.client, self.ns
        problems: list[str] = []
        snap = self.snapshot()
        prefix = (ns + ":p:").encode()
        queued: dict[bytes, list[tuple[str, float]]] = {}
        heads: dict[str, dict[str, float]] = {}  # head index key -> slot -> best stored cash
        tiers_seen = set()
        qprefix = ns + ":q:"
        for q in c.scan_iter(match=_glob(qprefix) + "*"):
            name = q.decode()
            pr, side, slot = name[len(qprefix) :].split(":", 2)
            members = c.zrange(q, 0, -1, withscores=True)
            if members:
                tiers_seen.add(pr)
                heads.setdefault(f"{ns}:h:{pr}:{side}", {})[slot] = max(x for _, x in members)
            for fp, score in members:
                queued.setdefault(fp, []).append((name, score))
        stored_heads: dict[str, dict[str, float]] = {}
        for h in c.scan_iter(match=_glob(ns + ":h:") + "*"):
            rows = c.zrange(h, 0, -1, withscores=True)
            stored_heads[h.decode()] = {slot.decode(): x for slot, x in rows}
        if {k: v for k, v in stored_heads.items() if v} != heads:
            problems.append(f"slot heads {stored_heads}, queues say {heads}")
        # (A priority whose queues emptied may linger in the tiers until a pop looks at it.)
        tiers = {t.decode() for t in c.zrange(ns + ":tiers", 0, -1)}
        if not tiers_seen <= tiers:
            problems.append(f"tiers {sorted(tiers)} miss queued priorities {sorted(tiers_seen)}")
        leases = set(c.zrange(ns + ":leases", 0, -1))
        counts = [0, 0, 0, 0]
        for k, fp in enumerate(snap.keys):
            st = snap.status[k]
            counts[st] += 1
            pr, sl, w, x = c.hmget(prefix + fp, "pr", "sl", "w", "x")
            r = c.hget(ns + ":r", fp)
            fields = _PAGE.unpack(x)
            s_, f = fields[0], fields[7]
            where = queued.pop(fp, [])
            if st == 1:
                side = "f" if f == 1 else "u"
                want = f"{ns}:q:{(pr or b'?').decode()}:{side}:{(sl or b'').decode()}"
                if [q for q, _ in where] != [want]:
                    problems.append(f"pending page {k} queued in {where}, not {want}")
                elif where[0][1] != s_:
                    problems.append(f"pending page {k} scored {where[0][1]}, stored cash {s_}")
            elif where:
                problems.append(f"page {k} with status {st} is queued in {where}")
            if (st == 2) != (fp in leases) or (st == 2 and w is None):
                problems.append(f"page {k} with status {st}: lease {fp in leases}, token {w}")
            if st in (1, 2) and r is None:
                problems.append(f"page {k} with status {st} has no request")
        if queued:
            problems.append(f"{len(queued)} queued fingerprints are not pages")
        waiting = sum(1 for st in snap.status if st in (1, 2))
        if c.hlen(ns + ":r") != waiting:
            problems.append(f"{c.hlen(ns + ':r')} stored requests for {waiting} waiting pages")
        stored = [int(snap.figures[name]) for name in ("discovered", "pending", "in_flight")]
        stored.append(int(snap.figures["visited"]))
        if stored != counts:
            problems.append(f"status counts {stored}, pages say {counts}")
        return problems

    def total_cash(self) -> float:
        """All cash, virtual page included (1 up to rounding when no process is running).
        O(pages)."""
        return self.snapshot().engine().total_cash()


class RedisSnapshot:
    """The pages of a Redis crawl read into numpy arrays and an :class:`OpicEngine`, with the
    same reading interface as :class:`~scrapy_opic.backends.sqlite.StateReader` (``n``, ``status``,
    ``continuous``, :meth:`engine`, :meth:`meta`, :meth:`page_chunks`, :meth:`urls_of`), so
    that the export commands and API read Redis the same way as a state file."""

    def __init__(self, frontier: RedisFrontier) -> None:
        client, ns = frontier.client, frontier.ns
        g = frontier.globals()
        if g is None:
            raise StoreError(f"no OPIC crawl under the key {frontier.key!r} in Redis")
        self._meta = frontier.meta()
        self._meta.setdefault("series", frontier.series())
        n = int(g["n"])
        keys: list[bytes] = []
        urls: list[str | None] = []
        for lo in range(0, n, CHUNK):
            for entry in client.lrange(ns + ":keys", lo, min(n, lo + CHUNK) - 1):
                k = entry[0]  # the fingerprint's length, then the fingerprint, then the URL
                keys.append(entry[1 : 1 + k])
                urls.append(entry[1 + k :].decode())
        n = len(keys)
        packed = bytearray()
        prefix = (ns + ":p:").encode()
        blank = bytes(_PAGE.size)
        for lo in range(0, n, CHUNK):
            pipe = client.pipeline(transaction=False)
            for fp in keys[lo : lo + CHUNK]:
                pipe.hget(prefix + fp, "x")
            for x in pipe.execute():
                packed += x if x is not None else blank
        cols = np.frombuffer(bytes(packed), dtype=_PAGE_DTYPE, count=n)
        s_, h, lg, b, d, lt = (cols[k].astype(float) for k in ("s", "h", "lg", "b", "d", "lt"))
        v, st = cols["v"], cols["st"]
        flags = cols["f"].astype(np.uint8)
        arrays = {
            "s": s_,
            "hist": h,
            "last_g": lg,
            "visits": v.astype(np.uint32),
            "flags": flags,
        }
        if g["wall"] == 1.0:
            arrays["last_t"] = lt
        if g["mom"] == 1.0:
            arrays["b"], arrays["d"] = b, d
        self._state = {
            "params": {
                "epsilon": g["eps"],
                "refresh": g["refresh"],
                "window": window_spec(g),
                "self_links": False,
            },
            "scalars": {
                "n": n,
                "G": g["G"],
                "g_real": g["greal"],
                "virtual_cash": g["vcash"],
                "virtual_history": g["vhist"],
                "acc_all": g["acca"],
                "acc_unfetched": g["accu"],
                "n_unfetched": int(n - int(flags.sum())),
                "n_initial": 0,
                "c0": 0.0,
                "visit_count": int(g["visits"]),
                "_cash_at_visit_ema": g["ema"],
                "accb_all": g["accba"],
                "accb_unfetched": g["accbu"],
                "accd_all": g["accda"],
                "accd_unfetched": g["accdu"],
                "b_total": g["btot"],
                "d_total": g["dtot"],
                "default_rate": g["rate"],
            },
            "arrays": arrays,
            "window": {},
            "keys": keys,
        }
        self.n = n
        self.status = bytes(st.astype(np.uint8))
        self.continuous = g["cont"] == 1.0
        self.urls = urls
        self.keys = keys
        self.figures = frontier.status()

    def engine(self, **engine_kw: Any) -> OpicEngine:
        try:
            return OpicEngine.from_state(self._state, **engine_kw)
        except Exception as exc:
            raise StoreError(f"cannot read the OPIC crawl in Redis: {exc}") from None

    def meta(self) -> dict:
        return self._meta

    def page_chunks(self, first: int = 0) -> Iterator[tuple[int, list[tuple[Any, str | None]]]]:
        for lo in range(first * CHUNK, self.n, CHUNK):
            hi = min(self.n, lo + CHUNK)
            yield lo, list(zip(self.keys[lo:hi], self.urls[lo:hi]))

    def urls_of(self, ids: Sequence[int]) -> dict[int, str | None]:
        return {int(i): self.urls[int(i)] for i in ids}

    def close(self) -> None:
        pass


__all__ = [
    "DUPLICATE",
    "NEEDS_REQUEST",
    "SCHEDULED",
    "Link",
    "Popped",
    "RedisFrontier",
    "RedisSnapshot",
    "Visited",
    "is_redis_location",
    "split_location",
    "window_params",
]
