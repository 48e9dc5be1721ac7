"""The Redis backend: one OPIC frontier that any number of crawling processes share.

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
  it holds (:meth:`RedisFrontier.maintain`); a process that dies stops renewing, and the next
  pop after expiry puts the page back in the queue with its cash intact (it kept growing
  meanwhile). An outcome reported under an expired lease (``stale``) changes nothing.

One source: the script runs the embedded engine's formulas operation for operation, and every
number the two share (statuses, schedule codes, estimator ids, decay rates, the blend weight, the
packed layouts of the globals and of a page) is generated into the script from Python
(:func:`lua_constants`) when it is loaded, never copied by hand. ``tests/test_differential.py``
replays one random sequence of every operation on this frontier and on the embedded one, for
every window and estimator the script runs, and compares every number after every step.

Window policies: the unbounded history (every estimator) and Interpolation (G or wall clock);
the multi-measure windows (variable, fixed, improved) keep a list of measures per page and are
embedded-store only. Selection: Greedy only.

Keys (``ns`` is the crawl's key wrapped in a Redis Cluster hash tag, e.g. ``{opic:site}``): see
the header of ``opic.lua``. Memory per page and round trips per fetched page are measured by
``benchmarks/redis_perf.py`` (README, "Figures"): a fetched page costs one call to pop it and
one to visit it, which also schedules the links it pays; :attr:`RedisFrontier.round_trips`
counts every call.

Nothing here knows Scrapy: payloads are encoded by the function the frontier is given, slots are
strings.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..opic.constants import (
    BLEND_LEMMA,
    CODES,
    DEAD,
    DUPLICATE,
    ERROR,
    ESTIMATORS,
    FETCHED,
    FILTERED,
    FINAL_OUTCOMES,
    FORBIDDEN,
    LOCAL,
    NEEDS_PAYLOAD,
    OK,
    RATE_DECAY,
    REDIRECTED,
    SCHEDULED,
    SLOPE_NOISE,
    STATUSES,
    VISIT_DECAY,
)
from ..opic.engine import OpicEngine
from ..opic.frontier import Entry, Lease, Link, Visit, require_payload
from ..opic.window import Interpolation, UnboundedHistory, parse_window
from ..series import FIELDS as SERIES_FIELDS
from . import StoreError
from .sqlite import CHUNK

#: The packed globals of a crawl (``<ns>:s``, little-endian doubles), in order: the parameters
#: first (:data:`PARAMS`), then the clock, the virtual page, the accumulators, the status counts
#: and the clock time of the last wall-clock window step (``clock``).
SCALARS = (
    "eps", "refresh", "cont", "win", "est", "T", "wall", "mom", "layout", "n", "G", "greal",
    "vcash", "vhist", "acca", "accu", "nunf", "visits", "ema", "accc", "ctot", "cpass", "cdang",
    "btot", "dtot", "rate", "st0", "st1", "st2", "st3", "reclaimed", "stale", "clock", "debt",
    "ndead", "parts", "part", "vin", "vinu", "vcred", "gother", "octot", "ocpass", "ocdang",
    "obtot", "odtot", "on",
)  # fmt: skip
PARAMS = SCALARS[:9]
#: The version of the crawl's layout in Redis (globals and page fields), a parameter that every
#: process compares with its own: a crawl started by a version that stored pages otherwise is
#: refused instead of misread. (A date: no count from an older layout can take its value.)
LAYOUT = 20261124.0
_GLOBALS = struct.Struct("<" + "d" * len(SCALARS))


def _unpack_globals(blob: bytes) -> dict[str, float]:
    # A crawl started by an older version packed fewer globals: the new ones read as 0.
    return dict(zip(SCALARS, _GLOBALS.unpack(blob.ljust(_GLOBALS.size, b"\0"))))


def page_fields(mom: bool, wall: bool) -> tuple[tuple[str, str], ...]:
    """The doubles at the head of a page's packed numbers: stored cash s, (credit) history h,
    teleport-credit baseline cb, link credit held lc, G at the last visit lg, then the
    received-credit moments b and d (estimators that need them) or the wall time of the last
    visit lt (wall-clock windows). :class:`PageLayout` tells the rest."""
    extra = ("b", "d") if mom else ("lt",) if wall else ()
    return tuple((name, "d") for name in ("s", "h", "cb", "lc", "lg", *extra))


#: The three layouts, by the script's id: 0 plain, 1 with moments, 2 with a wall clock.
LAYOUTS = (page_fields(False, False), page_fields(True, False), page_fields(False, True))
#: Pages per bucket on average (the script's linear hashing, opic.lua ``bucket_of``): a bucket
#: holds about this many to twice as many pages, and must stay under Redis's
#: hash-max-listpack-entries (128) to keep its compact encoding.
BUCKET_LOAD = 40
#: URLs per list of the URL store (``<ns>:u:<chunk>``): a pop reads one with LINDEX, whose cost
#: grows with the list; a list's fixed cost is shared by this many pages.
URL_CHUNK = 1024
# The header byte after the doubles: status (2 bits), flags (3 bits: FETCHED, INITIAL, DEAD),
# has an outcome entry, has an alias entry, visits take 4 bytes (else 1).
_ST, _F, _HAS_O, _HAS_A, _WIDE = 0, 2, 5, 6, 7


class PageLayout:
    """The packing of one crawl's pages (moments and wall clock are crawl parameters): the
    doubles of :func:`page_fields`, a header byte (status, flags, whether the page has an
    outcome and an alias entry, the width of v), the visits v (1 byte below 256, else 4) and
    the page's id (little-endian, in as few bytes as it needs, at most 4: a crawl holds fewer
    than 2**32 pages; the rest of the string). With moments, a page of a crawl under 16,777,216
    pages visited under 256 times packs into 61 bytes, at most 64 up to that size: under Redis's
    hash-max-listpack-value (64), so that its bucket keeps the compact listpack encoding."""

    def __init__(self, mom: bool, wall: bool) -> None:
        self.fields = page_fields(mom, wall)
        self.doubles = tuple(name for name, _ in self.fields)
        self.names = (*self.doubles, "v", "f", "st", "id", "ho", "ha")
        self.head = 8 * len(self.doubles)
        self.struct = struct.Struct("<" + "d" * len(self.doubles))
        self.dtype = np.dtype(
            [(name, "<f8") for name in self.doubles]
            + [("v", "<u4"), ("f", "u1"), ("st", "u1"), ("id", "<i8"), ("ho", "u1"), ("ha", "u1")]
        )

    @classmethod
    def of(cls, g: dict[str, float]) -> PageLayout:
        return cls(g["mom"] == 1.0, g["wall"] == 1.0)

    def pack(self, page: dict[str, float]) -> bytes:
        """The bytes the script stores for ``page`` (the inverse of :meth:`unpack`; the script
        packs in Lua, this is for tests)."""
        v, ident = int(page["v"]), int(page["id"])
        head = int(page["st"]) << _ST | int(page["f"]) << _F
        head |= int(page.get("ho", 0)) << _HAS_O | int(page.get("ha", 0)) << _HAS_A
        wide = v >= 256
        width = max(1, (ident.bit_length() + 7) // 8)
        return (
            self.struct.pack(*(page[name] for name in self.doubles))
            + bytes([head | wide << _WIDE])
            + v.to_bytes(4 if wide else 1, "little")
            + ident.to_bytes(width, "little")
        )

    def unpack(self, x: bytes) -> dict[str, float]:
        out: dict[str, float] = dict(zip(self.doubles, self.struct.unpack_from(x)))
        head = x[self.head]
        at = self.head + 1  # v, then the id
        width = 4 if head >> _WIDE & 1 else 1
        out.update(
            v=int.from_bytes(x[at : at + width], "little"),
            f=head >> _F & 7,
            st=head >> _ST & 3,
            id=int.from_bytes(x[at + width :], "little"),
            ho=head >> _HAS_O & 1,
            ha=head >> _HAS_A & 1,
        )
        for name in ("b", "d", "lt"):
            out.setdefault(name, 0.0)
        return out

    def unpack_many(self, xs: Sequence[bytes]) -> np.ndarray:
        """Many pages at once, as a record array of :attr:`dtype` (vectorised: a snapshot
        decodes every page of the crawl)."""
        n = len(xs)
        out = np.zeros(n, self.dtype)
        if not n:
            return out
        width = self.head + 9  # the longest: header, 4 bytes of v, 4 of id
        lengths = np.fromiter(map(len, xs), np.int64, n)
        raw = np.frombuffer(b"".join(x.ljust(width, b"\0") for x in xs), np.uint8)
        raw = raw.reshape(n, width)
        doubles = raw[:, : self.head].copy().view("<f8")
        for k, name in enumerate(self.doubles):
            out[name] = doubles[:, k]
        head = raw[:, self.head].astype(np.int64)
        wide = (head >> _WIDE & 1).astype(bool)
        rows = np.arange(n)
        v = np.zeros(n, np.int64)
        for k in range(4):
            byte = raw[:, min(self.head + 1 + k, width - 1)].astype(np.int64)
            v += np.where(k == 0 or wide, byte << (8 * k), 0)
        start = self.head + np.where(wide, 5, 2)
        ident = np.zeros(n, np.int64)
        for k in range(4):
            col = np.minimum(start + k, width - 1)
            ident += np.where(start + k < lengths, raw[rows, col].astype(np.int64) << (8 * k), 0)
        out["v"] = v
        out["f"] = head >> _F & 7
        out["st"] = head >> _ST & 3
        out["id"] = ident
        out["ho"] = head >> _HAS_O & 1
        out["ha"] = head >> _HAS_A & 1
        return out


def fingerprint_hash(fp: bytes) -> int:
    """The hash that places a page in a bucket (opic.lua ``fphash``): for a 20-byte fingerprint
    (a SHA-1, as Scrapy's), the XOR of its five big-endian 32-bit words; for any other key, the
    first 32 bits of its SHA-1."""
    if len(fp) == 20:
        a, b, c, d, e = struct.unpack(">5I", fp)
        return a ^ b ^ c ^ d ^ e
    return int.from_bytes(hashlib.sha1(fp).digest()[:4], "big")


def bucket_of(fp: bytes, n: int) -> int:
    """The bucket of the page ``fp`` in a crawl of ``n`` pages (opic.lua ``bucket_of``)."""
    buckets = max(1, n // BUCKET_LOAD)
    m = 1 << (buckets.bit_length() - 1)
    h = fingerprint_hash(fp)
    b = h % (2 * m)
    return b if b < buckets else h % m


def n_buckets(n: int) -> int:
    """How many buckets a crawl of ``n`` pages has."""
    return max(1, n // BUCKET_LOAD)


def request_entry(value: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """A request entry's parts (``<ns>:r:<b>``, opic.lua ``flush``): priority, download slot,
    URL (empty: the page's) and the request's bytes."""
    at = 1 + value[0]
    pr = value[1:at]
    n = int.from_bytes(value[at : at + 2], "little")
    sl = value[at + 2 : at + 2 + n]
    at += 2 + n
    n = int.from_bytes(value[at : at + 4], "little")
    return pr, sl, value[at + 4 : at + 4 + n], value[at + 4 + n :]


#: URL prefixes stored as one byte (code k + 1 for URL_PREFIXES[k]): every URL of a crawl
#: begins with one, and a URL never begins with a control byte. A URL that does is stored after
#: a 0 byte.
URL_PREFIXES = ("https://www.", "http://www.", "https://", "http://")


def pack_url(url: str) -> bytes:
    """A URL as the crawl stores it (:func:`unpack_url` gives it back)."""
    raw = url.encode()
    for k, prefix in enumerate(URL_PREFIXES):
        if url.startswith(prefix):
            return bytes([k + 1]) + raw[len(prefix) :]
    return b"\0" + raw if raw[:1] and raw[0] <= len(URL_PREFIXES) else raw


def unpack_url(data: bytes) -> str:
    code = data[0] if data else 0xFF
    if code > len(URL_PREFIXES):
        return data.decode()
    if code == 0:
        return data[1:].decode()
    return URL_PREFIXES[code - 1] + data[1:].decode()


#: Window policies the script runs, by id.
WINDOWS = ("unbounded", "interpolation")


def lua_constants() -> str:
    """The Lua definitions of every number the script shares with Python (prepended to
    ``opic.lua`` when it is loaded)."""

    def lua(x: Any) -> str:
        return repr(x) if isinstance(x, (int, float)) else "'" + str(x) + "'"

    def table(names: Sequence[str]) -> str:
        return "{" + ", ".join(f"[{k}] = {lua(v)}" for k, v in enumerate(names)) + "}"

    def layout(fields: tuple[tuple[str, str], ...]) -> str:
        # Straight-line unpack and pack per layout: they run for every page a call touches.
        # (PageLayout tells the format: the doubles, a header byte, v in 1 or 4 bytes, the id
        # in the bytes left.)
        names = [name for name, _ in fields]
        head = 8 * len(names)
        dfmt = "<" + "d" * len(names)
        absent = [f"{n} = 0" for n in ("b", "d", "lt") if n not in names]
        record = ", ".join(
            [f"{n} = {n}" for n in names]
            + absent
            + [
                f"st = H % {1 << _F}",
                f"f = bit.band(bit.rshift(H, {_F}), 7)",
                f"ho = bit.band(bit.rshift(H, {_HAS_O}), 1)",
                f"ha = bit.band(bit.rshift(H, {_HAS_A}), 1)",
                "v = v",
                "id = id",
            ]
        )
        tail = {1: "I1", 4: "I4"}
        ufmt = [
            "{" + ", ".join(f"'{dfmt}B{tail[wv]}I{wi}'" for wi in (1, 2, 3, 4)) + "}"
            for wv in (1, 4)
        ]
        # (The formats by the width of v and the width of the id, built once per call.)
        return (
            f"(function()\n"
            f"  local U1 = {ufmt[0]}\n"
            f"  local U4 = {ufmt[1]}\n"
            f"  return {{unpack = function(x)\n"
            f"    local H = string.byte(x, {head + 1})\n"
            f"    local {', '.join(names)}, v, id\n"
            f"    if H >= {1 << _WIDE} then\n"
            f"      {', '.join(names)}, H, v, id = struct.unpack(U4[#x - {head + 5}], x)\n"
            f"    else\n"
            f"      {', '.join(names)}, H, v, id = struct.unpack(U1[#x - {head + 2}], x)\n"
            f"    end\n"
            f"    return {{{record}}}\n"
            f"  end,\n"
            f"  pack = function(p, ho, ha)\n"
            f"    local H = p.st + {1 << _F} * p.f + {1 << _HAS_O} * ho + {1 << _HAS_A} * ha\n"
            f"    local id = p.id\n"
            f"    local w = id < 256 and 1 or (id < 65536 and 2 or (id < 16777216 and 3 or 4))\n"
            f"    if p.v >= 256 then\n"
            f"      return struct.pack(U4[w], {', '.join('p.' + n for n in names)}, "
            f"H + {1 << _WIDE}, p.v, id)\n"
            f"    end\n"
            f"    return struct.pack(U1[w], {', '.join('p.' + n for n in names)}, H, p.v, id)\n"
            f"  end}}\n"
            f"end)()"
        )

    lines = [
        "-- Generated from Python (scrapy_opic/backends/redis.py, scrapy_opic/opic/constants.py)",
        "-- when the script is loaded: the one source of every number both sides share.",
        "local SCALARS = {" + ", ".join(lua(x) for x in SCALARS) + "}",
        f"local N_PARAMS = {len(PARAMS)}",
        "local LAYOUTS = {"
        + ", ".join(f"[{k}] = {layout(f)}" for k, f in enumerate(LAYOUTS))
        + "}",
        f"local LAYOUT = {LAYOUT!r}",
        f"local BUCKET_LOAD = {BUCKET_LOAD}",
        f"local URL_CHUNK = {URL_CHUNK}",
        *(f"local {name.upper()} = {k}" for k, name in enumerate(STATUSES)),
        *(f"local {name.upper()} = {k}" for k, name in enumerate(CODES)),
        f"local FETCHED, DEAD, OK, REDIRECTED = {FETCHED}, {DEAD}, {OK}, {REDIRECTED}",
        "local FINAL_OUTCOMES = {"
        + ", ".join(f"[{k}] = true" for k in sorted(FINAL_OUTCOMES))
        + "}",
        f"local ESTIMATORS = {table(ESTIMATORS)}",
        f"local WIN_INTERPOLATION = {WINDOWS.index('interpolation')}",
        f"local VISIT_DECAY = {VISIT_DECAY!r}",
        f"local RATE_DECAY = {RATE_DECAY!r}",
        f"local BLEND_LEMMA = {BLEND_LEMMA!r}",
        f"local SLOPE_NOISE = {SLOPE_NOISE!r}",
        # (layout: the crawl's, set when its globals load; fields it lacks read as 0.)
        "local layout",
        "local function unpack_page(x) return layout.unpack(x) end",
        "local function pack_page(p, ho, ha) return layout.pack(p, ho, ha) end",
    ]
    return "\n".join(lines) + "\n"


def lua_script() -> str:
    """The whole script: the generated constants, then ``opic.lua``."""
    return lua_constants() + Path(__file__).with_name("opic.lua").read_text()


def window_params(window: str) -> dict[str, float]:
    """The script's parameters for a window spec, or :class:`ValueError` for a window the Redis
    store does not run."""
    policy = parse_window(window)
    if isinstance(policy, UnboundedHistory):
        return {
            "win": float(WINDOWS.index("unbounded")),
            "est": float(ESTIMATORS.index(policy.estimator)),
            "T": 0.0,
            "wall": 0.0,
            "mom": 1.0 if policy.needs_moments else 0.0,
        }
    if isinstance(policy, Interpolation):
        return {
            "win": float(WINDOWS.index("interpolation")),
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
    if WINDOWS[int(g["win"])] == "interpolation":
        return f"interpolation:{g['T']:g}" + (":wall" if g["wall"] == 1.0 else "")
    est = ESTIMATORS[int(g["est"])]
    return "unbounded" if est == "blend" else f"unbounded:{est}"


def status_figures(g: dict[str, float], leases: int, holds: int, workers: int) -> dict[str, Any]:
    """A crawl's figures from its globals ``g`` (a partition's, or a sharded crawl's summed)
    and its lease, hold and process counts. Virtual cash counts what a partition's virtual
    page received from the others and has not paid out yet (0 unsharded)."""

    def num(name: str) -> float:
        return float(g.get(name, 0.0))

    G = num("G")
    n = int(num("n"))
    visits = num("visits")
    gathered = 1.0 - VISIT_DECAY**visits
    return {
        "pages": n,
        "fetched": n - int(num("nunf")) - int(num("ndead")),
        "unfetched": int(num("nunf")),
        "closed": int(num("ndead")),
        "visits": int(visits),
        "G": G,
        "error_factor": 1.0 / G if G > 0 else float("inf"),
        "virtual_cash": num("vcash") + num("vin") + num("vinu"),
        "cash_at_visit_x_n": num("ema") / gathered if gathered > 0 else 0.0,
        **{name: int(num(f"st{k}")) for k, name in enumerate(STATUSES)},
        "leases": leases,
        "holds": holds,
        "workers": workers,
        "reclaimed": int(num("reclaimed")),
        "stale": int(num("stale")),
    }


def entries_of(reply: Sequence[bytes]) -> list[tuple[str, str, bytes]]:
    """The outbox entries a call wrote, from its reply: (destination, id, entry)."""
    return [
        (reply[k].decode(), reply[k + 1].decode(), reply[k + 2]) for k in range(0, len(reply), 3)
    ]


def parse_head(head: Sequence[bytes]) -> tuple[float, float] | None:
    """A partition's head as the script tells it (tier, true cash), ``None`` for none."""
    if len(head) < 2 or not head[0]:
        return None
    return float(head[0]), float(head[1])


def _glob(text: str) -> str:
    """``text`` as a literal in a Redis glob pattern (SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _f(x: float) -> str:
    return repr(float(x))


def open_client(url: str) -> Any:
    """A client of the Redis at ``url``: ``redis.cluster.RedisCluster`` if that server is a node
    of a Redis Cluster (``INFO cluster`` says ``cluster_enabled:1``: one call, here), which
    finds the other nodes from it and sends each call to the node of its key's hash slot; else
    ``redis.Redis``. A server that refuses ``INFO`` (an ACL without ``@dangerous``, a renamed
    command) gets the plain client, as before this check existed.

    Errors are the ``redis`` package's: ``redis.RedisError`` (unreachable, refused) or
    ``redis.RedisClusterException`` (a cluster that cannot be mapped, a database other than 0
    or a unix socket on a cluster)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        enabled = client.info("cluster").get("cluster_enabled")
    except redis.ResponseError:
        return client
    except BaseException:
        client.close()
        raise
    if not enabled:
        return client
    client.close()
    return redis.RedisCluster.from_url(url)


#: Fingerprints a process remembers as no longer new (scheduled or fetched by someone): a visit
#: sends no payload for them. Bounded: the set is emptied when it reaches this size, which only
#: costs some encoding afterwards.
KNOWN_LIMIT = 500_000
#: Seconds before asking again when every slot with pending pages is full for the fleet (a
#: lease ends in another process: nothing tells this one).
POLL = 0.2


class RedisFrontier:
    """A crawl's OPIC frontier in Redis: the :class:`~scrapy_opic.opic.frontier.Frontier`
    contract (see the module docstring).

    :param client: a ``redis.Redis`` client, or a ``redis.RedisCluster`` one for a Redis Cluster
        (``decode_responses`` must be off: fingerprints are raw bytes). On a cluster the whole
        crawl is in the hash slot of its namespace, so on one node (one shard).
    :param key: the crawl's name on the server, e.g. ``opic:myspider``; several crawls share a
        server under different keys.
    :param lease: seconds a popped page stays leased without renewal.
    :param encode: ``encode(payload, url)`` turns a payload into bytes (``None`` if it cannot):
        payloads travel to the other processes as bytes. It may leave ``url`` out of them, the
        URL of the entry or link that brings the payload: a pop hands it back as
        :attr:`Lease.url` (the crawl stores it once, with the page, or with the request when
        the page is known under another URL).
    :param series_seconds: seconds between two points of the crawl's time series (added by
        :meth:`maintain`).
    :param location: where readers find this crawl (``redis://host:port/db#key``).
    """

    shared = True

    def __init__(
        self,
        client: Any,
        key: str,
        lease: float = 60.0,
        encode: Callable[[Any], bytes | None] | None = None,
        series_seconds: float = 10.0,
        location: str | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.ns = "{" + key + "}"
        #: A Redis Cluster client (``redis.cluster.RedisCluster``): it routes each call by its
        #: key, and a SCAN must name the node to scan (:meth:`_scan`).
        self.cluster = hasattr(client, "get_node_from_key")
        self.lease_ms = max(1, int(lease * 1000))
        self._script = client.register_script(lua_script())
        self._encode = encode or (lambda payload, url: None)
        self.location = location
        self.round_trips = 0
        self.continuous = False
        #: The share of pops owed to pages never fetched in a continuous crawl (the debt is the
        #: crawl's, in Redis; each process's pops add its own share).
        self.discovery = 0.0
        #: Links to closed pages pay the virtual page (OpicEngine.closed_links_virtual).
        self.closed_links_virtual = False
        self.maintain_interval = max(0.05, min(lease / 3.0, series_seconds))
        self._series_seconds = series_seconds
        self._last_point = 0.0
        self._started = time.time()
        #: This process in the crawl: host, pid and a random 64-bit tag (a pid can be reused).
        self._tag = uuid.uuid4().hex[:16]
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{self._tag}"
        self._seq = 0  # lease tokens are <tag>.<seq>: short, since a page keeps its last one
        self._known: set[bytes] = set()
        self._figures: dict[str, float] = {}
        #: After a pop that found nothing: seconds until a page may be leasable (the fleet's
        #: politeness holds every slot that has pending pages), or None.
        self.wake_in: float | None = None
        #: Tokens of this process's visits whose links still have to be filed (``<ns>:holds``).
        self._holds: list[str] = []
        #: Set by the scheduler: whether every link that a visit answered NEEDS_PAYLOAD for has
        #: been filed (or dropped on its way) since.
        self.ready: Callable[[], bool] = lambda: True
        #: In a sharded crawl (:class:`~scrapy_opic.backends.sharded.ShardedRedisFrontier`):
        #: this partition's number, the number of partitions, the ids of outbox entries that
        #: their destinations applied (acknowledged in the next call here), and the head of
        #: the partition as the last pop left it (tier, true cash), ``None`` if it has none.
        self.part, self.parts = 0, 1
        self.acks: list[str] = []
        self.head: tuple[float, float] | None = None
        self.vcash = 0.0
        #: Before the next visit here: ``vs`` and the partitions' page counts, to send this
        #: partition's virtual cash in the same call (set by the sharded frontier).
        self.send_virtual: list[Any] | None = None

    @classmethod
    def connect(cls, url: str, key: str, **kw: Any) -> RedisFrontier:
        """A frontier on the server at ``url`` (the ``redis`` package's URL forms), a plain
        server or any node of a Redis Cluster (see :func:`open_client`)."""
        kw.setdefault("location", f"{url}#{key}")
        return cls(open_client(url), key, **kw)

    def _call(self, *args: Any) -> Any:
        self.round_trips += 1
        if self.acks:
            acks = self.acks
            self.acks = []
            try:
                return self._script(keys=[self.ns], args=["ack", len(acks), *acks, *args])
            except BaseException:
                self.acks = acks + self.acks  # (not sent: the next call carries them)
                raise
        return self._script(keys=[self.ns], args=args)

    # -- the crawl ----------------------------------------------------------------------------
    def open(
        self,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        continuous: bool = False,
        window: str = "unbounded",
        meta: dict[str, Any] | None = None,
    ) -> bool:
        """Join the crawl under this key, creating it if there is none (with ``meta`` for its
        readers: spider, settings). Returns whether this call created it. :class:`ValueError`
        if the crawl was started with other parameters (two processes running different
        formulas on one frontier would make no sense)."""
        if not 0.0 < epsilon <= 1.0:
            raise ValueError(f"epsilon must be in (0, 1], not {epsilon!r}")
        if not 0.0 <= refresh <= 1.0:
            raise ValueError(f"refresh must be in [0, 1], not {refresh!r}")
        mine = {
            "eps": float(epsilon),
            "refresh": float(refresh),
            "cont": 1.0 if continuous else 0.0,
            **window_params(window),
            "layout": LAYOUT,
        }
        self.round_trips += 1
        existed = bool(self.client.exists(self.ns + ":s"))
        if not existed and self.parts == 1:
            shards = self.client.get(self.ns + ":shards")
            if shards is not None:
                raise ValueError(
                    f"the OPIC crawl {self.key!r} in Redis runs on {int(shards)} partitions, "
                    f"not 1 (OPIC_REDIS_SHARDS={int(shards)} to join it)"
                )
        stored = self._call(
            "init",
            *(repr(mine[name]) for name in PARAMS),
            str(self.part),  # (the endowment: in partition 0's virtual page)
            str(self.parts),
        )
        stored = dict(zip(PARAMS, (float(v) for v in stored)))
        if stored["layout"] != LAYOUT:
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis was started by an older scrapy-opic, "
                "which stored its pages otherwise: finish it with that version, or start afresh "
                "(OPIC_REDIS_RESET=True)"
            )
        differ = {k: (stored[k], mine[k]) for k in PARAMS if stored[k] != mine[k]}
        if differ:
            what = ", ".join(f"{k}: crawl {a!r}, here {b!r}" for k, (a, b) in differ.items())
            raise ValueError(f"the OPIC crawl {self.key!r} in Redis has other parameters ({what})")
        self.continuous = bool(continuous)
        self.layout = PageLayout(mine["mom"] == 1.0, mine["wall"] == 1.0)
        if not existed and meta is not None:
            self.set_meta({**meta, "started": time.time()})
        self._started = float(self.meta().get("started", time.time()))
        self.heartbeat()
        self._figures = self.status()
        return not existed

    def globals(self) -> dict[str, float] | None:
        """The crawl's parameters and global scalars (``None`` if there is no crawl)."""
        self.round_trips += 1
        blob = self.client.get(self.ns + ":s")
        return None if blob is None else _unpack_globals(blob)

    def _scan(self, pattern: str) -> Iterator[bytes]:
        """The keys matching ``pattern``, one of this crawl's (``<ns>:...``). On a Redis
        Cluster only the node that serves the crawl's hash slot is scanned: every key of the
        crawl is in that slot, so the other nodes have none of them."""
        if self.cluster:
            node = self.client.get_node_from_key(self.ns)
            return self.client.scan_iter(match=pattern, count=1000, target_nodes=node)
        return self.client.scan_iter(match=pattern, count=1000)

    def clear(self) -> int:
        """Delete every key of this crawl; returns how many."""
        pattern = _glob(self.ns) + ":*"
        n = 0
        batch: list[bytes] = []
        for k in self._scan(pattern):
            batch.append(k)
            if len(batch) >= 1000:
                n += self.client.unlink(*batch)
                batch = []
        if batch:
            n += self.client.unlink(*batch)
        return n

    # -- payloads ----------------------------------------------------------------------------
    def _data(self, payload: Any, url: str | None) -> bytes | None:
        if payload is None or isinstance(payload, bytes):
            return payload
        return self._encode(payload, url)

    def _remember(self, fp: bytes) -> None:
        if len(self._known) >= KNOWN_LIMIT:
            self._known.clear()
        self._known.add(fp)

    def _codes(self, keys: Iterable[bytes], codes: Iterable[Any], unencodable: list[bool]):
        """The script's schedule codes, with LOCAL for a page whose payload could not be
        encoded; remembers the pages that are no longer new."""
        out = []
        for key, code, local in zip(keys, (int(c) for c in codes), unencodable):
            if code == NEEDS_PAYLOAD and local:
                code = LOCAL
            if code != NEEDS_PAYLOAD and code != LOCAL:
                self._remember(key)
            out.append(code)
        return out

    def _token(self) -> str:
        self._seq += 1
        return f"{self._tag}.{self._seq:x}"

    # -- the contract ---------------------------------------------------------------------------
    def schedule(self, entries: Sequence[Entry], again: bool = False) -> list[int]:
        if not entries:
            return []
        args: list[Any] = ["sched", "1" if again else "0"]
        local = []
        for key, url, priority, slot, payload in entries:
            data = self._data(payload, url)
            local.append(payload is not None and data is None)
            args += [key, pack_url(url), int(priority), str(slot), data or b""]
        codes = self._codes((e.key for e in entries), self._call(*args), local)
        if self._holds:
            self._unhold()
        return codes

    def pop(self, full_slots: Collection[Hashable] = ()) -> Lease | None:
        token = self._token()
        share = _f(self.discovery if self.continuous else 0.0)
        # (The delay's jitter draws from this process: a script's random numbers repeat.)
        u = _f(random.random())  # noqa: S311 (not for security)
        got = self._call("pop", token, self.lease_ms, share, u, *(str(s) for s in full_slots))
        if not got or not got[0]:
            # Pages wait in slots the fleet's politeness holds: ask again when the first one
            # opens (its delay) or, if all wait for leases to end elsewhere, after a short poll.
            # (-3: none held; then the partition's head, its best page in a slot full here.)
            wait = int(got[1]) if got else None
            self.head = parse_head(got[2]) if len(got) > 2 else None
            if wait == -3:
                wait = None
            self.wake_in = None if wait is None else POLL if wait < 0 else wait / 1000.0
            return None
        self.wake_in = None
        fp, (url, data), slot, head = got
        self.head = parse_head(head)
        return Lease(fp, token, data, slot.decode(), unpack_url(url))

    def visit(
        self,
        lease: Lease,
        links: Sequence[Link],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
    ) -> Visit | None:
        got = self.visit_out(lease, links, (), virtual_weight, importance, payload)
        return None if got is None else got[0]

    def visit_out(
        self,
        lease: Lease,
        links: Sequence[Link],
        dests: Sequence[str],
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
    ) -> tuple[Visit, list[tuple[str, str, bytes]], list[bool]] | None:
        """:meth:`visit`, with the links of other partitions of a sharded crawl: ``dests[k]``
        is the partition of link ``k`` (``""``: this one; no ``dests``: all here). Their shares
        go to this partition's outbox; returns the visit (``-1`` as those links' codes: their
        partition answers), the entries written (destination, id, entry), and per link
        whether its payload could not be encoded."""
        plain = not virtual_weight and all(link.weight == 1.0 for link in links)
        boosts = any(link.boost for link in links)
        args: list[Any] = [
            "visit",
            lease.key,
            lease.token,
            "1" if plain else "0",
            "1" if boosts else "0",
            _f(virtual_weight),
            self._later(payload, lease),
            "1" if self.closed_links_virtual else "0",
            self.lease_ms,
        ]
        local = []
        for k, link in enumerate(links):
            data = None
            # (A page this process knows is no longer new gets no payload: the common case of
            # a link to a known page costs no encoding and no bytes on the wire. Should it be
            # schedulable all the same, its code says NEEDS_PAYLOAD.)
            if link.payload is not None and (link.again or link.key not in self._known):
                data = self._data(link.payload, link.url)
                local.append(data is None)
            else:
                local.append(False)
            args += [
                link.key,
                pack_url(link.url),
                _f(link.weight),
                _f(link.boost),
                "1" if link.again else "0",
                int(link.priority),
                str(link.slot),
                data or b"",
                dests[k] if dests else "",
            ]
        if self.send_virtual:
            args = [*self.send_virtual, *args]
            self.send_virtual = None
        out = self._call(*args)
        if not int(out[0]):
            return None
        if any(int(c) == NEEDS_PAYLOAD for c in out[2]):
            self._holds.append(lease.token)  # (the script holds the crawl open for them)
        codes = self._codes((link.key for link in links), out[2], local)
        imp = float(out[1])
        if len(out) > 5:  # (a partition of a sharded crawl: its head and virtual cash)
            self.head = parse_head(out[4])
            self.vcash = float(out[5])
        return Visit(codes, None if imp < 0 or not importance else imp), entries_of(out[3]), local

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        out = self._call("fail", lease.key, lease.token, int(outcome), self._later(payload, lease))
        return bool(int(out[0]))

    def _later(self, payload: Any, lease: Lease) -> bytes:
        """The bytes of a page's payload for its later fetches (``b""``: keep the one it has;
        also when it cannot be encoded)."""
        if payload is None or not self.continuous:
            return b""
        return self._data(payload, lease.url) or b""

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        return bool(int(self._call("forfeit", lease.key, lease.token, int(outcome))[0]))

    def drop(self, key: Hashable, outcome: int = FILTERED) -> bool:
        return bool(int(self._call("forfeit", key, "", int(outcome))[0]))

    def retry(self, lease: Lease, entry: Entry) -> int | None:
        require_payload(entry)
        data = self._data(entry.payload, lease.url)  # (the page's request keeps its URL)
        if data is None:  # cannot travel: this process fetches it, its cash goes
            return LOCAL if self.forfeit(lease) else None
        out = self._call(
            "retry", lease.key, lease.token, int(entry.priority), str(entry.slot), data
        )
        return SCHEDULED if int(out[0]) else None

    def redirect(self, lease: Lease, entry: Entry, permanent: bool = False) -> int | None:
        got = self.redirect_out(lease, entry, permanent)
        return got if got is None or isinstance(got, int) else DUPLICATE

    def redirect_out(
        self, lease: Lease, entry: Entry, permanent: bool = False, dest: str = ""
    ) -> int | list[tuple[str, str, bytes]] | None:
        """:meth:`redirect`, to a target in partition ``dest`` of a sharded crawl (``""``:
        this one): then the cash travels in an outbox entry, returned (destination, id,
        entry) for the caller to apply."""
        require_payload(entry)
        data = self._data(entry.payload, entry.url)
        if data is None:
            return LOCAL if self.forfeit(lease) else None
        out = self._call(
            "redirect",
            lease.key,
            lease.token,
            entry.key,
            pack_url(entry.url),
            int(entry.priority),
            str(entry.slot),
            data,
            "1" if permanent else "0",
            dest,
        )
        if not int(out[0]):
            return None
        if dest:
            return entries_of(out[2])
        code = int(out[1]) if len(out) > 1 else DUPLICATE
        self._remember(entry.key)
        return code

    def set_politeness(
        self,
        concurrency: int,
        delay: float = 0.0,
        jitter: float = 0.0,
        slots: dict[str, tuple[int, float, float]] | None = None,
    ) -> None:
        """Politeness for the whole fleet: per download slot, every process together leases at
        most ``concurrency`` pages at once, and leases a page of it at least ``delay`` seconds
        (times a uniform factor in ``1 ± jitter``, as Scrapy's downloader draws) after the
        slot's last lease. ``slots``: the slots with limits of their own (slot -> concurrency,
        delay, jitter). A concurrency of 0 switches it off (each process's own limits only).
        The last process to call it sets it for every process of the crawl."""
        args: list[Any] = ["polite", int(concurrency), int(round(delay * 1000)), _f(jitter)]
        for slot, (conc, d, j) in (slots or {}).items():
            args += [str(slot), int(conc), int(round(d * 1000)), _f(j)]
        self._call(*args)

    def politeness(self) -> dict[str, Any] | None:
        """The fleet's politeness (concurrency, delay in seconds, jitter, and the slots with
        limits of their own), or ``None`` when each process keeps its own."""
        self.round_trips += 1
        raw = self.client.hgetall(self.ns + ":pol")
        if not raw:
            return None
        own = {
            k.decode(): tuple(float(x) for x in v.split())
            for k, v in self.client.hgetall(self.ns + ":lim").items()
        }
        return {
            "concurrency": int(raw[b"conc"]),
            "delay": int(raw[b"delay"]) / 1000.0,
            "jitter": float(raw[b"jitter"]),
            "slots": {k: (int(c), d / 1000.0, j) for k, (c, d, j) in own.items()},
        }

    def release(self, leases: Iterable[Lease]) -> int:
        args: list[Any] = ["release"]
        for lease in leases:
            args += [lease.key, lease.token]
        return int(self._call(*args)) if len(args) > 1 else 0

    def renew(self, leases: Iterable[Lease]) -> int:
        """Extend the leases still held under these tokens, and this process's holds; returns
        how many leases."""
        args: list[Any] = ["renew", self.lease_ms, len(self._holds), *self._holds]
        for lease in leases:
            args += [lease.key, lease.token]
        return int(self._call(*args)) if len(args) > 3 else 0

    def _unhold(self, leaving: bool = False) -> None:
        """End this process's holds once the links they wait for are filed (:attr:`ready`), or
        as it ``leaving`` (what it did not file, nobody will)."""
        if leaving or self.ready():
            self.round_trips += 1
            self.client.zrem(self.ns + ":holds", *self._holds)
            self._holds = []

    def maintain(self, leases: Collection[Lease]) -> None:
        """End or renew this process's holds, renew its leases, mark it alive and, every
        ``series_seconds``, add a point to the crawl's time series."""
        if self._holds:
            self._unhold()
        if leases or self._holds:
            self.renew(leases)
        self.heartbeat()
        f = self.series_tick(self.status)
        if f is not None:
            self._figures = f

    def series_tick(self, figures: Callable[[], dict[str, float]]) -> dict[str, float] | None:
        """Every ``series_seconds``: add a point of ``figures()`` to the crawl's time series and
        return the figures (else ``None``)."""
        now = time.monotonic()
        if now - self._last_point < self._series_seconds:
            return None
        self._last_point = now
        f = figures()
        point = {name: f[name] for name in SERIES_FIELDS if name in f}
        self.add_point({**point, "elapsed": time.time() - self._started})
        return f

    def close(self, leases: Collection[Lease]) -> None:
        """Hand ``leases`` back (a process can leave a running crawl at any time) and leave."""
        try:
            if leases:
                self.release(leases)
            if self._holds:
                self._unhold(leaving=True)
            self.leave()
        finally:
            self.client.close()

    def has_pending(self) -> bool:
        f = self._figures = self.status()
        return f["pending"] > 0 or f["leases"] > 0 or f["holds"] > 0

    def __len__(self) -> int:
        return int(self._figures.get("pending", 0))

    def figures(self) -> dict[str, float]:
        self._figures = self.status()
        return dict(self._figures)

    def _page(self, key: Hashable) -> dict[str, float] | None:
        g = self.globals()
        if g is None:
            return None
        while True:
            # (The page's bucket depends on n: read again if another process split it.)
            self.round_trips += 1
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(f"{self.ns}:p:{bucket_of(key, int(g['n']))}", key)
            pipe.get(self.ns + ":s")
            x, blob = pipe.execute()
            now = _unpack_globals(blob)
            if n_buckets(int(now["n"])) == n_buckets(int(g["n"])):
                return None if x is None else self.layout.unpack(x)
            g = now

    def status_of(self, key: Hashable) -> str | None:
        page = self._page(key)
        return None if page is None else STATUSES[int(page["st"])]

    def cash_of(self, key: Hashable) -> float | None:
        page = self._page(key)
        g = self.globals()
        if page is None or g is None:
            return None
        f = int(page["f"])
        if f & DEAD:
            return page["s"]
        return page["s"] + g["acca"] + (g["accu"] if not f & FETCHED else 0.0)

    def total_cash(self) -> float:
        """All cash, virtual page included (1 up to rounding when no process is running).
        O(pages)."""
        return self.snapshot().engine().total_cash()

    def top_page(self) -> tuple[str, float] | None:
        return None  # O(pages) over the network: the export commands tell it

    # -- figures and the crawl's records ------------------------------------------------------
    def status(self) -> dict[str, float]:
        """The crawl's global figures (one round trip): pages, pending, in flight, leases, holds
        (visits whose links their process has yet to file), the processes that joined and have
        not left (``workers``: a killed one stays listed)...
        O(1)."""
        self.round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        pipe.get(self.ns + ":s")
        pipe.zcard(self.ns + ":leases")
        pipe.hlen(self.ns + ":workers")
        pipe.zcard(self.ns + ":holds")
        blob, leases, workers, holds = pipe.execute()
        g = _unpack_globals(blob) if blob else {}
        return status_figures(g, int(leases), int(holds), int(workers))

    def slot_figures(self) -> tuple[int, int]:
        """Download slots held by the fleet's politeness, and slots with pages in flight."""
        self.round_trips += 1
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.ns + ":blocked")
        pipe.hlen(self.ns + ":busy")
        blocked, busy = pipe.execute()
        return int(blocked), int(busy)

    def heartbeat(self) -> None:
        """Record that this process is alive (its last beat, this machine's clock)."""
        self.round_trips += 1
        self.client.hset(self.ns + ":workers", self.worker, time.time())

    def leave(self) -> None:
        self.round_trips += 1
        self.client.hdel(self.ns + ":workers", self.worker)

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
        """The frontier's structural invariants, read back from Redis: every page is in the
        bucket its fingerprint and the number of pages say, once, with its own id (ids 0 to
        n - 1, each with its URL), and no bucket lies beyond the bucket count; a page has a
        request entry exactly while it is pending or in flight, a lease token exactly while in
        flight, an outcome or alias entry exactly when its header says so; a pending page is in
        exactly one queue (of its request's priority and slot, fetched or not) scored by its
        stored cash, and no other page is queued; the slot heads are the queues' best scores,
        for the slots not blocked by the fleet's politeness, and a slot's lease count is its
        leases; the tiers hold the priorities with queued pages; the leases are the in-flight
        pages; the status counts match. Returns the problems found (none when all hold).
        O(pages), for tests and diagnostics while no process runs."""
        c, ns = self.client, self.ns
        problems: list[str] = []
        g = self.globals()
        if g is None:
            return ["no crawl"]
        snap = self.snapshot()
        n = int(g["n"])
        layout = PageLayout.of(g)
        buckets = n_buckets(n)
        # Every bucket entry of every family, by family: fingerprint -> (bucket, value).
        entries: dict[str, dict[bytes, tuple[int, bytes]]] = {f: {} for f in "proa"}
        for k in self._scan(_glob(ns) + ":[proa]:*"):
            family, b = k.decode()[len(ns) + 1 :].split(":", 1)
            if not b.isdigit():
                continue  # (the queue keys <ns>:q:... match too)
            if int(b) >= buckets:
                problems.append(f"bucket {k.decode()} beyond the {buckets} buckets")
            for fp, value in c.hgetall(k).items():
                if fp in entries[family]:
                    problems.append(f"{fp.hex()} in two {family} buckets")
                entries[family][fp] = (int(b), value)
                if bucket_of(fp, n) != int(b):
                    problems.append(f"{fp.hex()} in {family} bucket {b}, not its own")
        if len(entries["p"]) != n:
            problems.append(f"{len(entries['p'])} pages in the buckets, {n} counted")
        ids = sorted(layout.unpack(x)["id"] for _, x in entries["p"].values())
        if ids != list(range(len(ids))):
            problems.append("page ids are not 0 to n - 1, once each")
        stored_urls = sum(c.llen(f"{ns}:u:{k}") for k in range(-(-n // URL_CHUNK)))
        if stored_urls != n or c.exists(f"{ns}:u:{-(-n // URL_CHUNK)}"):
            problems.append(f"{stored_urls} URLs stored for {n} pages")
        tokens = c.hgetall(ns + ":w")
        queued: dict[bytes, list[tuple[str, float]]] = {}
        heads: dict[str, dict[str, float]] = {}  # head index key -> slot -> best stored cash
        tiers_seen = set()
        qprefix = ns + ":q:"
        for q in self._scan(_glob(qprefix) + "*"):
            name = q.decode()
            pr, side, slot = name[len(qprefix) :].split(":", 2)
            members = c.zrange(q, 0, -1, withscores=True)
            if members:
                tiers_seen.add(pr)
                heads.setdefault(f"{ns}:h:{pr}:{side}", {})[slot] = max(x for _, x in members)
            for fp, score in members:
                queued.setdefault(fp, []).append((name, score))
        # A blocked slot (fleet politeness: no room) is out of every head index.
        blocked = {sl.decode() for sl in c.zrange(ns + ":blocked", 0, -1)}
        heads = {
            h: {sl: x for sl, x in by_slot.items() if sl not in blocked}
            for h, by_slot in heads.items()
        }
        heads = {h: by_slot for h, by_slot in heads.items() if by_slot}
        stored_heads: dict[str, dict[str, float]] = {}
        for h in self._scan(_glob(ns + ":h:") + "*"):
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
            fields = layout.unpack(entries["p"][fp][1])  # (the snapshot found every page)
            s_, f = fields["s"], fields["f"]
            request = entries["r"].get(fp)
            pr = sl = b"?"
            if request is not None:
                pr, sl, _, _ = request_entry(request[1])
            where = queued.pop(fp, [])
            if st == 1:
                side = "f" if f & 1 else "u"
                # (A refetch in a continuous crawl waits at priority 0: opic.lua's tier.)
                tier = "0" if snap.continuous and f & 1 else pr.decode()
                want = f"{ns}:q:{tier}:{side}:{sl.decode()}"
                if [q for q, _ in where] != [want]:
                    problems.append(f"pending page {k} queued in {where}, not {want}")
                elif where[0][1] != s_:
                    problems.append(f"pending page {k} scored {where[0][1]}, stored cash {s_}")
            elif where:
                problems.append(f"page {k} with status {st} is queued in {where}")
            w = tokens.pop(fp, None)
            if (st == 2) != (fp in leases) or (st == 2) != (w is not None):
                problems.append(f"page {k} with status {st}: lease {fp in leases}, token {w}")
            if (st in (1, 2)) != (request is not None):
                problems.append(f"page {k} with status {st}: request entry {request is not None}")
            for family, flag in (("o", "ho"), ("a", "ha")):
                if bool(fields[flag]) != (fp in entries[family]):
                    problems.append(f"page {k}: {flag} {fields[flag]}, {family} entry")
            o = entries["o"].get(fp)
            if o is not None and int(o[1]) in (0, OK):
                problems.append(f"page {k} keeps the outcome {int(o[1])}")
        if queued:
            problems.append(f"{len(queued)} queued fingerprints are not pages")
        if tokens:
            problems.append(f"{len(tokens)} lease tokens of pages not in flight")
        polite = self.politeness()
        if polite is not None:
            per_slot: dict[str, int] = {}
            for fp in leases:
                request = entries["r"].get(fp)
                slot = request_entry(request[1])[1].decode() if request is not None else "?"
                per_slot[slot] = per_slot.get(slot, 0) + 1
            busy = {k.decode(): int(v) for k, v in c.hgetall(ns + ":busy").items()}
            if busy != per_slot:
                problems.append(f"slot lease counts {busy}, leases say {per_slot}")
            for slot, count in per_slot.items():
                limit = polite["slots"].get(slot, (polite["concurrency"],))[0]
                if count >= limit and slot not in blocked:
                    problems.append(f"slot {slot!r} holds {count} leases of {limit}, not blocked")
        elif c.exists(ns + ":blocked", ns + ":busy"):
            problems.append("slots blocked or counted with no fleet politeness")
        stored = [int(snap.figures[name]) for name in ("discovered", "pending", "in_flight")]
        stored.append(int(snap.figures["visited"]))
        if stored != counts:
            problems.append(f"status counts {stored}, pages say {counts}")
        return problems


def _read_pages(
    frontier: RedisFrontier, n: int, layout: PageLayout
) -> tuple[list[bytes], np.ndarray, dict[int, int]]:
    """The pages of ids below ``n``: their fingerprints and unpacked numbers in id order, and
    the outcomes of those that have one (id -> outcome). Buckets are read a chunk at a time,
    each chunk in one transaction; buckets that split meanwhile (the crawl went on) are read
    after, so a page moved by a split is read at least once."""
    client, ns = frontier.client, frontier.ns
    fps: list[bytes] = []
    xs: list[bytes] = []
    outs: dict[bytes, bytes] = {}
    done, buckets = 0, n_buckets(n)
    while done < buckets:
        for lo in range(done, buckets, 256):
            pipe = client.pipeline(transaction=True)
            for b in range(lo, min(buckets, lo + 256)):
                pipe.hgetall(f"{ns}:p:{b}")
                pipe.hgetall(f"{ns}:o:{b}")
            res = pipe.execute()
            for pages, failed in zip(res[::2], res[1::2]):
                fps.extend(pages)
                xs.extend(pages.values())
                outs.update(failed)
        done = buckets
        g = frontier.globals()
        buckets = n_buckets(int(g["n"])) if g is not None else done
    cols = layout.unpack_many(xs)
    at = np.full(n, -1, np.int64)  # id -> where it was read (the last read of a page read twice)
    read = np.nonzero(cols["id"] < n)[0]
    at[cols["id"][read]] = read
    if n and at.min() < 0:
        raise StoreError(
            f"the OPIC crawl {frontier.key!r} in Redis lacks {int((at < 0).sum())} of its "
            f"{n} pages (deleted while it was read?)"
        )
    outcomes = {
        int(k): int(outs[fps[at[k]]]) for k in np.nonzero(cols["ho"][at])[0] if fps[at[k]] in outs
    }
    return [fps[k] for k in at], cols[at], outcomes


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
        if g["layout"] != LAYOUT:
            raise StoreError(
                f"the OPIC crawl {frontier.key!r} in Redis was started by an older scrapy-opic, "
                "which stored its pages otherwise: read it with that version"
            )
        layout = PageLayout.of(g)
        self._meta = frontier.meta()
        self._meta.setdefault("series", frontier.series())
        n = int(g["n"])
        urls: list[str | None] = []
        chunks = -(-n // URL_CHUNK)
        for lo in range(0, chunks, 64):
            pipe = client.pipeline(transaction=False)
            for c in range(lo, min(chunks, lo + 64)):
                pipe.lrange(f"{ns}:u:{c}", 0, -1)
            for rows in pipe.execute():
                urls.extend(unpack_url(u) for u in rows)
        del urls[n:]  # (pages added since n was read)
        keys, cols, outcomes = _read_pages(frontier, n, layout)
        flags = cols["f"].astype(np.uint8)
        outcome = np.where(flags & FETCHED, OK, 0).astype(np.uint16)
        for k, o in outcomes.items():
            outcome[k] = o
        v, st = cols["v"], cols["st"]
        arrays = {
            "s": cols["s"].astype(float),
            "hist": cols["h"].astype(float),
            "cb": cols["cb"].astype(float),
            "lc": cols["lc"].astype(float),
            "last_g": cols["lg"].astype(float),
            "visits": v.astype(np.uint32),
            "flags": flags,
        }
        if g["wall"] == 1.0:
            arrays["last_t"] = cols["lt"].astype(float)
        if g["mom"] == 1.0:
            arrays["b"], arrays["d"] = cols["b"].astype(float), cols["d"].astype(float)
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
                "n_unfetched": int(((flags & (FETCHED | DEAD)) == 0).sum()),
                "n_dead": int(g["ndead"]),
                "n_initial": 0,
                "c0": 0.0,
                "visit_count": int(g["visits"]),
                "_cash_at_visit_ema": g["ema"],
                "acc_credit": g["accc"],
                "credit_total": g["ctot"],
                "credit_passed": g["cpass"],
                "credit_dangling": g["cdang"],
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
        self.outcome = outcome.tobytes()
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

    def header(self) -> dict:
        """The engine's parameters and scalars (as :meth:`OpicEngine.header`)."""
        return {"params": self._state["params"], "scalars": self._state["scalars"], "window": {}}

    def columns(
        self, names: Sequence[str] | None = None, batch: int = 0
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """The per-page columns, as :meth:`StateReader.columns` has them (one batch: the pages
        are in memory already)."""
        n = self.n
        cols = {k: a[:n] for k, a in self.engine().page_arrays().items()}
        cols["f.status"] = np.frombuffer(self.status, np.uint8)
        cols["f.outcome"] = np.frombuffer(self.outcome, np.uint16)
        if n:
            yield 0, cols if names is None else {k: cols[k] for k in names}

    def page_chunks(self, first: int = 0) -> Iterator[tuple[int, list[tuple[Any, str | None]]]]:
        for lo in range(first * CHUNK, self.n, CHUNK):
            hi = min(self.n, lo + CHUNK)
            yield lo, list(zip(self.keys[lo:hi], self.urls[lo:hi]))

    def urls_of(self, ids: Sequence[int]) -> dict[int, str | None]:
        return {int(i): self.urls[int(i)] for i in ids}

    def close(self) -> None:
        pass


__all__ = [
    "LAYOUT",
    "PageLayout",
    "SCALARS",
    "RedisFrontier",
    "RedisSnapshot",
    "lua_constants",
    "lua_script",
    "open_client",
    "window_params",
    "window_spec",
]
