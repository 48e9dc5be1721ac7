"""The Redis backend: one crawl shared by many Scrapy processes, on many machines, each owning
some of the crawl's partitions (:mod:`scrapy_opic.opic.partition`) and running for them the
very engine and frontier that the embedded store runs.

Redis stores and carries; it computes nothing of OPIC. For each partition (and for the crawl's
pool, the member ``pool``) it holds:

* a *lease* (``{K:k}:lease``): the token of the process that owns it, with an expiry that the
  owner renews; a process that dies stops renewing, and the partition is free when it expires;
* a *checkpoint* (``{K:k}:ck``, a hash: a header, blocks of page arrays, blocks of keys, URLs
  and requests, each compressed) and the *journal* since (``{K:k}:log``, a list of batches of
  records): a process that takes the partition over loads the one and replays the other through
  the same frontier (:meth:`Partition.replay <scrapy_opic.opic.partition.Partition.replay>`);
* an *inbox* (``{K:k}:in``, a stream): the messages of other partitions, and the pages other
  processes file there, applied by its owner in order and once, then deleted;
* its *figures* (``{K:k}:fig``), what the crawl's status adds up.

Writes are fenced. On a plain Redis, a process writes everything of one flush in one script
(``_FLUSH``): it first checks that the process still holds every member it writes (the lease's
token) and that each journal is as long as it thinks (a write lost with a restarted Redis),
then appends the journals (or checkpoints), deletes the inbox entries applied and adds the
messages to their inboxes, or does nothing. Since the records of all its members land together,
a message between two members of one process is applied at once, in memory
(:meth:`~scrapy_opic.opic.partition.Fleet.deliver_local`), and a message to another process's
member leaves with the record that made it. On a Redis Cluster, whose members are on several
nodes, each member has a script of its own, with the same checks; a message leaves with the
flush after its record's. Either way a process that lost a partition (it stalled past its
lease) can never write over its successor's. No OPIC rule runs in Redis.

The crawl's own keys: ``{K}:meta`` (parameters, partition count, spider, who holds the
endowment), ``{K}:workers`` (each process's last beat), ``{K}:parts`` (partitions that have
pages or messages), ``{K}:owners`` (who owns what, as the owners last said).

Pace. A process writes, sends, reads its inboxes and renews its leases in one pipeline every
:data:`FLUSH` seconds (a round trip per node of a Redis Cluster); it looks at the fleet (who is
alive, which partitions it should own) every :data:`REBALANCE` seconds. A pop or a visit never
waits for Redis (but, on a Redis Cluster, those of a process alone in its crawl, which flushes
until the messages between its partitions are applied, as one frontier's pop would see them).

A Redis Cluster spreads the partitions over its shards by their hash tags (``{K:k}``): every
key of one member is in one slot, so each script touches one node.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import socket
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from typing import Any

import numpy as np

from .._series import Series
from ..opic.constants import ERROR, FORBIDDEN, IN_FLIGHT, OK, PENDING
from ..opic.engine import OpicEngine
from ..opic.frontier import Lease
from ..opic.partition import (
    FIGURES,
    POOL,
    Fleet,
    Member,
    Message,
    Note,
    Partition,
    Pool,
    add_figures,
    finish_figures,
    in_transit,
    keys_of,
)
from . import StoreError, masked_url
from .sqlite import CHUNK

logger = logging.getLogger(__name__)

#: The layout of a crawl's keys, compared by every process that joins: a crawl stored
#: otherwise is refused.
LAYOUT = "opic-partitions-1"
#: Seconds between two looks at whether to flush (the scheduler's upkeep tick).
TICK = 0.1
#: Seconds between two flushes (journals, messages, inboxes, leases: one pipeline) of a
#: process with pages to pop (one that found none flushes at every tick).
FLUSH = 0.5
#: Seconds between two reads of the inboxes when there is nothing to write.
READ = 0.5
#: Seconds between two looks at the fleet (beats, partition shares, claims, releases).
REBALANCE = 1.0
#: A member's journal gets a new checkpoint after this many batches, or this many seconds.
CHECKPOINT_BATCHES = 200
CHECKPOINT_SECONDS = 60.0
#: Pages per block of a checkpoint.
BLOCK = 1024
#: Inbox entries read per member per flush.
READ_COUNT = 500
#: Seconds between two rounds of reports to the pool (and of its payouts).
REPORT = 0.5
#: Cash held back (see ``RedisFrontier.maintain``) above which a process flushes at every
#: tick, with its reports: a tenth of the crawl's.
URGENT = 0.1
#: Seconds a process waits for a Redis that does not answer (a restart, a failover) before
#: it stops; meanwhile it pops nothing (what it did would be lost with its leases).
PATIENCE = 300.0
#: Seconds one call to Redis may take (a server that hangs counts as one that does not
#: answer), unless the URL sets ``socket_timeout`` itself.
SOCKET_TIMEOUT = 10.0

_APPEND = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local n = redis.call('LLEN', KEYS[2])
if n ~= tonumber(ARGV[2]) then return -2 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local blobs = tonumber(ARGV[4])
for i = 5, 4 + blobs do n = redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('SET', KEYS[3], ARGV[5 + blobs])
if #ARGV > 5 + blobs then redis.call('XDEL', KEYS[4], unpack(ARGV, 6 + blobs)) end
return n
"""
_CHECKPOINT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[2]) ~= tonumber(ARGV[2]) then return -2 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2], KEYS[5])
local fields = tonumber(ARGV[5])
for i = 6, 5 + 2 * fields, 2 do redis.call('HSET', KEYS[5], ARGV[i], ARGV[i + 1]) end
redis.call('SET', KEYS[3], ARGV[4])
if #ARGV >= 6 + 2 * fields then redis.call('XDEL', KEYS[4], unpack(ARGV, 6 + 2 * fields)) end
return 0
"""
_FLUSH = """
local members, ms = tonumber(ARGV[1]), ARGV[2]
local at, spans = 3, {}
for i = 1, members do
  if redis.call('GET', KEYS[(i - 1) * 5 + 1]) ~= ARGV[at] then return {-1, i} end
  local n = tonumber(ARGV[at + 3])
  local items = ARGV[at + 2] == '1' and 2 * n or n
  local consumed = tonumber(ARGV[at + 5 + items])
  spans[i] = {at, items, consumed}
  at = at + 6 + items + consumed
end
local out, short = {0}, false
for i = 1, members do
  out[i + 1] = redis.call('LLEN', KEYS[(i - 1) * 5 + 2])
  if out[i + 1] ~= tonumber(ARGV[spans[i][1] + 1]) then short = true end
end
if short then out[1] = -2 return out end
for i = 1, members do
  local k, a, items, consumed = (i - 1) * 5, spans[i][1], spans[i][2], spans[i][3]
  redis.call('PEXPIRE', KEYS[k + 1], ms)
  if ARGV[a + 2] == '1' then
    redis.call('DEL', KEYS[k + 2], KEYS[k + 5])
    for j = a + 4, a + 3 + items, 2 do redis.call('HSET', KEYS[k + 5], ARGV[j], ARGV[j + 1]) end
    out[i + 1] = 0
  else
    for j = a + 4, a + 3 + items do out[i + 1] = redis.call('RPUSH', KEYS[k + 2], ARGV[j]) end
  end
  redis.call('SET', KEYS[k + 3], ARGV[a + 4 + items])
  for j = a + 6 + items, a + 5 + items + consumed do redis.call('XDEL', KEYS[k + 4], ARGV[j]) end
end
for j = at, #ARGV, 2 do redis.call('XADD', KEYS[tonumber(ARGV[j])], '*', 'm', ARGV[j + 1]) end
return out
"""
_BEAT = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
local t = redis.call('TIME')
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ms)
return ms
"""
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""


def open_client(url: str) -> Any:
    """A client of the Redis at ``url``: ``redis.cluster.RedisCluster`` if that server is a node
    of a Redis Cluster (``INFO cluster`` says ``cluster_enabled:1``), else ``redis.Redis``. A
    server that refuses ``INFO`` (an ACL without ``@dangerous``) gets the plain client.
    Errors are the ``redis`` package's."""
    import redis

    # (Options in the URL's query win over these.)
    timeouts = {"socket_timeout": SOCKET_TIMEOUT, "socket_connect_timeout": SOCKET_TIMEOUT}
    client = redis.Redis.from_url(url, **timeouts)
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
    return redis.RedisCluster.from_url(url, **timeouts)


def _pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _unpack(blob: bytes) -> Any:
    return pickle.loads(zlib.decompress(blob))


def _shuffled(a: np.ndarray) -> bytes:
    """An array's bytes grouped by position in the item (all first bytes, then all second
    bytes...): the exponents and high bytes of floats of one magnitude then compress."""
    width = a.dtype.itemsize
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1, width)
    return raw.T.tobytes()


def _unshuffled(data: bytes, dtype: np.dtype, n: int) -> np.ndarray:
    width = dtype.itemsize
    raw = np.frombuffer(data, np.uint8).reshape(width, n).T
    return np.ascontiguousarray(raw).view(dtype).reshape(n)


def pack_state(state: dict[str, Any]) -> dict[str, bytes]:
    """A partition's checkpoint (:meth:`Partition.state`) as the fields of its Redis hash: a
    header (``h``), blocks of the page arrays (``a:<b>``: each column byte-shuffled) and blocks
    of the pages' keys, URLs and requests (``p:<b>``), each compressed."""
    n = len(state["keys"])
    cols = {name: np.asarray(a) for name, a in state["arrays"].items()}
    cols["f.status"] = np.frombuffer(state["status"], np.uint8)
    cols["f.outcome"] = np.frombuffer(state["outcome"], np.uint16)
    cols["f.tier"] = np.frombuffer(state["tier"], np.uint32)
    layout = [(name, a.dtype.str) for name, a in cols.items()]
    head = {k: v for k, v in state.items() if k not in _BIG}
    head.update(n=n, layout=layout, block=BLOCK)
    fields = {"h": _pack(head)}
    payloads = state["payloads"]
    keys, urls = state["keys"], state["urls"]
    kept, remote = state["kept"], state["remote_kept"]
    for b, lo in enumerate(range(0, n, BLOCK)):
        hi = min(n, lo + BLOCK)
        arrays = b"".join(_shuffled(cols[name][lo:hi]) for name, _ in layout)
        fields[f"a:{b}"] = zlib.compress(arrays, 1)
        rows = [
            (keys[i], urls[i], payloads.get(i), kept.get(i), remote.get(i)) for i in range(lo, hi)
        ]
        fields[f"p:{b}"] = _pack(rows)
    return fields


_BIG = ("arrays", "status", "outcome", "tier", "payloads", "urls", "keys", "kept", "remote_kept")


def unpack_state(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """The checkpoint of :func:`pack_state` (:class:`ValueError` if it is incomplete)."""
    head = _unpack(fields[b"h"])
    n, block = head["n"], head["block"]
    cols: dict[str, list] = {name: [] for name, _ in head["layout"]}
    keys: list = []
    urls: list = []
    payloads: dict[int, bytes] = {}
    kept: dict[int, tuple] = {}
    remote: dict[int, list] = {}
    for b, lo in enumerate(range(0, n, block)):
        size = min(n, lo + block) - lo
        raw = zlib.decompress(fields[f"a:{b}".encode()])
        at = 0
        for name, dt in head["layout"]:
            dtype = np.dtype(dt)
            cols[name].append(_unshuffled(raw[at : at + dtype.itemsize * size], dtype, size))
            at += dtype.itemsize * size
        for i, (key, url, payload, links, out) in enumerate(_unpack(fields[f"p:{b}".encode()]), lo):
            keys.append(key)
            urls.append(url)
            if payload is not None:
                payloads[i] = payload
            if links is not None:
                kept[i] = links
            if out is not None:
                remote[i] = out
    merged = {
        name: np.concatenate(parts) if parts else np.zeros(0, np.dtype(dt))
        for (name, dt), parts in zip(head["layout"], cols.values())
    }
    state = dict(head)
    state["status"] = merged.pop("f.status").tobytes()
    state["outcome"] = merged.pop("f.outcome").tobytes()
    state["tier"] = merged.pop("f.tier").tobytes()
    state.update(arrays=merged, keys=keys, urls=urls, payloads=payloads)
    state.update(kept=kept, remote_kept=remote)
    return state


class _Held:
    """What a process knows of a member it owns: its lease token, its journal's length in
    Redis, the batches of records not written yet (kept until a write succeeds), the inbox
    entries applied (deleted with the next write) and where to read the inbox from."""

    def __init__(self, member: Member, token: str, log: int) -> None:
        self.member = member
        self.token = token
        self.log = log
        #: Batches of records taken from the member and not known written: ``(blob, records
        #: made up to the batch's end)``.
        self.unwritten: list[tuple[bytes, int]] = []
        self.consumed: list[bytes] = []
        self.read_from = "-"
        self.since_checkpoint = log
        self.checkpoint_at = time.monotonic()
        self.figures = b""
        self.renew_at = 0.0
        self.leaving = False
        self.last_active = time.monotonic()


class RedisFrontier(Fleet):
    """The :class:`~scrapy_opic.opic.partition.Fleet` of one process of a Redis crawl: the
    partitions it owns, leased in Redis (see the module docstring). Open one with
    :meth:`connect` and :meth:`open`.

    :param client: a ``redis.Redis`` or ``redis.RedisCluster`` client (bytes, not decoded).
    :param key: the crawl's name (``OPIC_REDIS_KEY``).
    :param lease: seconds a partition stays its process's without renewal (a killed process's
        partitions are taken over after that).
    :param encode: ``encode(payload, url)``: a request as bytes (``None`` if it cannot be).
    :param series_seconds: seconds between two points of the crawl's time series.
    """

    def __init__(
        self,
        client: Any,
        key: str,
        *,
        lease: float = 30.0,
        encode: Callable[[Any, str | None], bytes | None] | None = None,
        location: str | None = None,
        series_seconds: float = 10.0,
    ) -> None:
        super().__init__(1, encode=encode)
        self.client = client
        import redis

        #: One atomic flush (a plain Redis), or a script per member (a Redis Cluster, whose
        #: members are on several nodes).
        self.atomic = not isinstance(client, redis.RedisCluster)
        #: What a Redis that does not answer (yet) raises: waited for (:data:`PATIENCE`).
        self._unanswered: tuple[type[BaseException], ...] = (
            redis.ConnectionError,
            redis.TimeoutError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.TryAgainError,
            redis.exceptions.MasterDownError,
        )
        self.patience = PATIENCE
        self._down_since: float | None = None
        self._gone = False  # the crawl's keys vanished from Redis: write nothing more
        self.key = key
        self.ns = "{" + key + "}"
        self.location = location
        self.lease_ms = max(100, int(lease * 1000))
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.maintain_interval = TICK
        self.round_trips = 0
        self.held: dict[int, _Held] = {}
        self._leaving: set[int] = set()  # members marked leaving (see _hand_over)
        #: Seconds to wait after the last outcome of a partition before handing it to another
        #: process (its hosts' download delay, which Scrapy keeps only within a process): set
        #: by the scheduler.
        self.quiet = 0.0
        self.series: Series | None = None  # the crawl's time series, while this owns the pool
        self._series_seconds = series_seconds
        self._known_parts: set[int] = set()
        self._resend: list[Message] = []
        self._live: list[str] = [self.worker]
        self._next_rebalance = 0.0
        self._next_report = 0.0
        self._last_flush = 0.0
        self._hungry = False  # the last pop found nothing
        self._next_point = 0.0
        self._global: dict[str, float] | None = None
        self._global_at = -1e9
        self.started = time.time()

    # -- keys and calls --------------------------------------------------------------------
    def _k(self, k: int, suffix: str) -> str:
        return f"{{{self.key}:{'pool' if k == POOL else k}}}:{suffix}"

    def _member_keys(self, k: int) -> list[str]:
        return [self._k(k, s) for s in ("lease", "log", "fig", "in", "ck")]

    @staticmethod
    def _run(client: Any, script: str, keys: list[str], args: list[Any]) -> Any:
        # (EVAL, not EVALSHA: a pipeline on a Redis Cluster cannot reload a script a node
        # lost; Redis caches each script's compiled form all the same.)
        return client.execute_command("EVAL", script, len(keys), *keys, *args)

    @classmethod
    def connect(cls, url: str, key: str, **kw: Any) -> RedisFrontier:
        """A process of the crawl ``key`` on the Redis at ``url`` (a plain server or any node
        of a Redis Cluster: see :func:`open_client`)."""
        kw.setdefault("location", f"{url}#{key}")
        return cls(open_client(url), key, **kw)

    # -- the crawl ----------------------------------------------------------------------------
    def open(
        self,
        epsilon: float = 0.15,
        refresh: float = 1.0,
        continuous: bool = False,
        window: str = "unbounded",
        partitions: int = 256,
        by: str = "host",
        meta: dict[str, Any] | None = None,
        refetch: str = "cash",
    ) -> bool:
        """Join the crawl under this key, creating it if there is none; returns whether this
        call created it. :class:`ValueError` (one line) for a crawl made with other parameters,
        another partition count, or another layout."""
        if not 0.0 < epsilon <= 1.0:
            raise ValueError(f"epsilon must be in (0, 1], not {epsilon!r}")
        if not 0.0 <= refresh <= 1.0:
            raise ValueError(f"refresh must be in [0, 1], not {refresh!r}")
        mine = {
            "layout": LAYOUT,
            "epsilon": repr(float(epsilon)),
            "refresh": repr(float(refresh)),
            "continuous": "1" if continuous else "0",
            "window": str(window),
            "partitions": str(int(partitions)),
            "by": by,
            "refetch": refetch if continuous else "cash",
        }
        meta_key = self.ns + ":meta"
        self.round_trips += 1
        created = bool(self.client.hsetnx(meta_key, "layout", LAYOUT))
        if created:
            info = json.dumps({**(meta or {}), "started": time.time()}, default=str)
            self.client.hset(meta_key, mapping={**mine, "info": info})
        stored = self._meta_fields()
        for _ in range(100):  # (a creator between its two writes)
            if "partitions" in stored or stored.get("layout") != LAYOUT:
                break
            time.sleep(0.02)
            stored = self._meta_fields()
        if stored.get("layout") != LAYOUT:
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis was made by another version of "
                "scrapy-opic: start afresh (OPIC_REDIS_RESET=True)"
            )
        if stored.get("partitions") != mine["partitions"] or stored.get("by") != by:
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis has {stored.get('partitions')} partitions "
                f"by {stored.get('by')}, not {partitions} by {by}: every process of a crawl sets "
                "the same OPIC_REDIS_PARTITIONS and OPIC_REDIS_PARTITION"
            )
        differ = [
            f"OPIC_{name.upper()}: crawl {stored.get(name)}, here {mine[name]}"
            for name in ("epsilon", "refresh", "continuous", "window", "refetch")
            if stored.get(name) != mine[name]
        ]
        if differ:
            raise ValueError(
                f"the OPIC crawl {self.key!r} in Redis was made with other settings "
                f"({'; '.join(differ)}): resume it with its own, or start afresh "
                "(another OPIC_REDIS_KEY, or OPIC_REDIS_RESET)"
            )
        self.P, self.by = int(partitions), by
        self.epsilon, self.refresh, self.window = float(epsilon), float(refresh), str(window)
        self.continuous = bool(continuous)
        self.refetch = mine["refetch"]
        self.started = float(json.loads(stored.get("info", "{}")).get("started", time.time()))
        self._rebalance()
        return created

    def _meta_fields(self) -> dict[str, str]:
        raw = self.client.hgetall(self.ns + ":meta")
        return {k.decode(): v.decode() for k, v in raw.items()}

    def exists(self) -> bool:
        """Is there a crawl under this key (of any layout)?"""
        self.round_trips += 1
        return bool(self.client.exists(self.ns + ":meta"))

    def clear(self) -> int:
        """Delete every key of this crawl; returns how many."""
        raw = self.client.hget(self.ns + ":meta", "partitions")
        parts = int(raw) if raw else 0
        pipe = self.client.pipeline(transaction=False)
        for suffix in ("meta", "workers", "parts", "owners"):
            pipe.unlink(f"{self.ns}:{suffix}")
        for k in range(-1, parts):
            for key in self._member_keys(k):
                pipe.unlink(key)
        return sum(pipe.execute())

    def meta(self) -> dict[str, Any]:
        """What the crawl's creator recorded (spider, settings, start time)."""
        raw = self.client.hget(self.ns + ":meta", "info")
        return json.loads(raw) if raw else {}

    # -- owning members ------------------------------------------------------------------------
    def owner_of(self, k: int) -> Partition | None:
        part = self.parts.get(k)
        if part is None and len(self._live) <= 1:
            # Alone in the crawl: this process will own every partition anyway.
            self._claim(k)
            part = self.parts.get(k)
        return part

    def _claim(self, k: int) -> bool:
        """Take partition ``k`` (or the pool) if no process owns it: load its checkpoint and
        replay its journal. Returns whether it is this process's now."""
        token = f"{self.worker}:{uuid.uuid4().hex[:8]}"
        self.round_trips += 1
        if not self.client.set(self._k(k, "lease"), token, nx=True, px=self.lease_ms):
            return False
        try:
            member, log, series = load_member(self, k, writer=True)
        except BaseException:
            self._run(self.client, _RELEASE, [self._k(k, "lease")], [token])
            raise
        self.held[k] = _Held(member, token, log)
        if k == POOL:
            self.adopt_pool(member)  # type: ignore[arg-type]
            self.series = series
        else:
            self.adopt(member)  # type: ignore[arg-type]
            if k not in self._known_parts:
                self.client.sadd(self.ns + ":parts", k)
                self._known_parts.add(k)
        self._resend.extend(member.resend())
        self.client.hset(self.ns + ":owners", str(k), self.worker)
        return True

    def _lose(self, k: int, release: bool = False) -> None:
        """Member ``k`` is no longer this process's: forgotten (the scheduler's leases of its
        pages are stale from now on), its lease given up (``release``) if still held. The
        messages its members applied here at once and not yet durably go to its next owner
        through Redis."""
        held = self.held.pop(k, None)
        self._leaving.discard(k)
        if held is None:
            return
        if release:
            with contextlib.suppress(Exception):  # (it lapses all the same)
                self._run(self.client, _RELEASE, [self._k(k, "lease")], [held.token])
        if k == POOL:
            self.pool = None
            self.series = None
        else:
            self.abandon(k)
        if not self.atomic:
            for member in self.members():
                unsent = {(m.dst, m.seq) for m, _ in member.outbox}
                self._resend.extend(
                    m
                    for m in member.box.unconfirmed.values()
                    if m.dst == k and (m.dst, m.seq) not in unsent
                )

    # -- the contract, over the partitions owned --------------------------------------------
    def pop(
        self, full_slots: Collection[Hashable] = (), exclude: Collection[int] = ()
    ) -> Lease | None:
        if self._down_since is not None:
            return None  # (what it would fetch now could be lost with its leases)
        with self._answered():
            if not self.atomic:
                self.settle()  # (alone: its pages on their way between its partitions, first)
            elif self._senders and len(self._live) <= 1:
                self._claim_destinations(list(self._senders))
        if self._down_since is not None:
            return None
        # (A partition being handed over gives no more pages.)
        lease = super().pop(full_slots, self._leaving)
        # (Hungry: no page to pop at all, not merely the slots with pages full.)
        self._hungry = lease is None and not super().__len__()
        return lease

    # (The last outcome of a partition here: the hosts of a partition handed to another
    # process must have been quiet since, for their download delay, which Scrapy keeps within
    # one process only. An outcome comes after its request was sent.)
    def _settled(self, lease: Lease, result: Any) -> Any:
        held = self.held.get(lease.token[0]) if isinstance(lease.token, tuple) else None
        if held is not None:
            held.last_active = time.monotonic()
        return result

    def visit(
        self,
        lease: Lease,
        links: Any,
        virtual_weight: float = 0.0,
        importance: bool = False,
        payload: Any = None,
        outcome: int = OK,
        changed: bool | None = None,
        modified: float | None = None,
    ) -> Any:
        got = super().visit(
            lease, links, virtual_weight, importance, payload, outcome, changed, modified
        )
        return self._settled(lease, got)

    def unchanged(self, lease: Lease, payload: Any = None) -> Any:
        return self._settled(lease, super().unchanged(lease, payload))

    def fail(self, lease: Lease, outcome: int = ERROR, payload: Any = None) -> bool:
        return self._settled(lease, super().fail(lease, outcome, payload))

    def forfeit(self, lease: Lease, outcome: int = FORBIDDEN) -> bool:
        return self._settled(lease, super().forfeit(lease, outcome))

    def retry(self, lease: Lease, entry: Any) -> int | None:
        return self._settled(lease, super().retry(lease, entry))

    def redirect(self, lease: Lease, entry: Any, permanent: bool = False) -> int | None:
        return self._settled(lease, super().redirect(lease, entry, permanent))

    def release(self, leases: Any) -> int:
        leases = list(leases)
        for lease in leases:
            self._settled(lease, None)
        return super().release(leases)

    def maintain(self, leases: Collection[Lease]) -> None:
        """Every :data:`FLUSH` seconds, a flush if there is anything to write or send, or the
        inboxes to read (every :data:`READ` seconds at least); every :data:`REBALANCE`, the
        fleet."""
        with self._answered():
            self._maintain()

    def _maintain(self) -> None:
        now = time.monotonic()
        if now >= self._next_rebalance:
            self._next_rebalance = now + REBALANCE
            self._rebalance()
        busy = self._in_motion() or any(
            h.unwritten or h.member.journal or h.consumed for h in self.held.values()
        )
        # A process batches its writes (fewer round trips), but not the crawl's money: cash
        # that waits to leave (messages, the pool's parts of virtual pages) is cash no page
        # holds, and a crawl of few pages, where a page holds much, would slow down for it.
        # One that found nothing to pop flushes at every tick, for the pages sent to it.
        waiting = self._waiting_cash()
        pace = TICK if self._hungry or waiting > URGENT else FLUSH
        renew = any(now >= h.renew_at for h in self.held.values())
        if renew or now >= self._last_flush + (pace if busy else max(pace, READ)):
            self.flush(reports=waiting > URGENT)

    @contextlib.contextmanager
    def _answered(self) -> Iterator[None]:
        """Calls to Redis that may find it not answering: the first such failure is one
        warning, the process then waits (pops nothing) and retries at each upkeep; after
        :attr:`patience` seconds it stops (:class:`StoreError`). A failure of another kind is
        raised as it is."""
        trips = self.round_trips
        try:
            yield
        except self._unanswered as exc:
            now = time.monotonic()
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            where = masked_url(self.location or "Redis")
            if self._down_since is None:
                self._down_since = now
                logger.warning(
                    "OPIC: %s does not answer (%s): this process waits for it (up to %.0f s)",
                    where,
                    why,
                    self.patience,
                )
            elif now - self._down_since > self.patience:
                raise StoreError(
                    f"{where} has not answered for {now - self._down_since:.0f} s ({why})"
                ) from None
        else:
            # (Back once a round trip was answered: a call that needed none proves nothing.)
            if self._down_since is not None and self.round_trips > trips:
                logger.info(
                    "OPIC: Redis answers again, after %.1f s",
                    time.monotonic() - self._down_since,
                )
                self._down_since = None

    def _waiting_cash(self) -> float:
        """Cash that this process holds back from the crawl's pages: in messages not sent, in
        its partitions' virtual pages, in the pool."""
        total = 0.0
        for part in self.parts.values():
            e = part.frontier.engine
            total += e.virtual_cash + e.pool_all + e.pool_unfetched
        for member in self.members():
            total += in_transit(m for m, _ in member.outbox)
        if self.pool is not None:
            total += self.pool.total_cash()
        return total

    def flush(self, reports: bool = False) -> None:
        """One pipeline: the members' new records (or checkpoints), the messages that may leave
        and the notes, and a read of every inbox; the reports to the pool and its payouts every
        :data:`REPORT` seconds (or now, with ``reports``). On a plain Redis, the writes and
        the messages are one atomic script (:attr:`atomic`); on a Redis Cluster, one script per
        member, and a message leaves with the flush after its record's."""
        now = time.monotonic()
        if reports or now >= self._next_report:
            self._next_report = now + REPORT
            self.reports()
            self._series_point(now)
        self._last_flush = now
        self._claim_destinations()
        pipe = self.client.pipeline(transaction=False)
        plan: list[tuple[str, Any]] = []
        if self.atomic:
            self._queue_all(pipe, plan, now)
        else:
            for k, held in self.held.items():
                if not self._queue_write(k, held, pipe, plan, now) and now >= held.renew_at:
                    self._queue_renew(k, held, pipe, plan)
            self._queue_sends(pipe, plan, *self._messages())
        for k, held in self.held.items():
            pipe.xrange(self._k(k, "in"), min=held.read_from, max="+", count=READ_COUNT)
            plan.append(("read", k))
        if not plan:
            return
        self.round_trips += 1
        try:
            results = pipe.execute(raise_on_error=False)
        except BaseException:  # (no reply: what was sent may have landed, or not)
            for kind, info in plan:
                if kind in ("send", "all"):
                    self._resend.extend(info if kind == "send" else info[1])
            raise
        lost = [k for step, got in zip(plan, results) for k in self._outcome(step, got)]
        for k in dict.fromkeys(lost):
            self._lose(k, release=self.atomic)
        self._resend.sort(key=lambda m: (m.dst, m.src, m.seq))
        self.durable_now()

    def _outcome(self, step: tuple[str, Any], got: Any) -> list[int]:
        """Take in the reply ``got`` to one step of a flush's pipeline; the members this
        process no longer owns because of it."""
        kind, info = step
        if kind == "read":
            reader = self.held.get(info)
            if reader is not None and not isinstance(got, Exception):
                self._read_inbox(info, reader, got)
        elif kind == "send":
            self._sent(info, got)
        elif kind == "write":
            k, written, checkpoint = info
            if not self._written(k, written, checkpoint, got):
                return [k]
        elif kind == "all":
            written, messages = info
            if not self._all_written(written, got):
                self._resend = []  # (their records are lost with the members)
                return list(self.held)
            if isinstance(got, Exception) or int(got[0]) != 0:
                self._resend.extend(messages)
            else:
                self._sent(messages, got)
        elif kind == "renew" and got == 0:  # (the lease lapsed: another process's now)
            return [info]
        return []

    def _queue_renew(self, k: int, held: _Held, pipe: Any, plan: list) -> None:
        self._run(pipe, _RENEW, [self._k(k, "lease")], [held.token, self.lease_ms])
        plan.append(("renew", k))

    def _messages(self) -> tuple[list[Message], list[Note]]:
        messages, notes = self.outgoing()
        messages = self._resend + messages
        self._resend = []
        return messages, notes

    def _write_of(self, k: int, held: _Held, now: float) -> tuple[bool, list[Any]] | None:
        """Member ``k``'s write, if it has anything new: whether a checkpoint, and its items
        (the journal's new batches, or the checkpoint's fields and values)."""
        member = held.member
        batch = member.take_journal()
        if batch:
            held.unwritten.append((_pack(batch), member.records))
        figures = self._figures_of(member)
        if not (held.unwritten or held.consumed or figures != held.figures) and not (
            held.leaving and held.log
        ):
            return None
        held.figures = figures
        checkpoint = (
            k == POOL
            or (held.leaving and (held.unwritten or held.log))  # (its next owner reads less)
            or (
                held.unwritten
                and (
                    held.since_checkpoint >= CHECKPOINT_BATCHES
                    or now - held.checkpoint_at >= CHECKPOINT_SECONDS
                )
            )
        )
        if not checkpoint:
            return False, [blob for blob, _ in held.unwritten]
        if isinstance(member, Pool):
            fields = pack_pool(member, self.series)
        else:
            fields = pack_state(member.state())
        return True, [x for pair in fields.items() for x in pair]

    def _queue_write(self, k: int, held: _Held, pipe: Any, plan: list, now: float) -> bool:
        """Queue member ``k``'s write (one script) if it has anything new; whether it has (a
        write renews the lease too)."""
        write = self._write_of(k, held, now)
        if write is None:
            return False
        checkpoint, items = write
        keys = self._member_keys(k)
        args: list[Any] = [held.token, held.log, self.lease_ms]
        if checkpoint:
            args += [held.figures, len(items) // 2, *items]
            self._run(pipe, _CHECKPOINT, keys, args + held.consumed)
        else:
            args += [len(items), *items, held.figures]
            self._run(pipe, _APPEND, keys[:4], args + held.consumed)
        plan.append(("write", (k, held.member.records, checkpoint)))
        return True

    def _queue_all(self, pipe: Any, plan: list, now: float) -> None:
        """The atomic flush of a plain Redis (the script ``_FLUSH``): every member with
        anything new written, and every message sent, in one step or not at all. The messages
        between members of this process were applied at once (:meth:`deliver_local`): the
        records that made them and those that applied them are written together."""
        self.deliver_local()
        keys: list[str] = []
        args: list[Any] = [0, self.lease_ms]
        written = []
        for k, held in self.held.items():
            write = self._write_of(k, held, now)
            if write is None:
                if now >= held.renew_at:
                    self._queue_renew(k, held, pipe, plan)
                continue
            held.renew_at = now + self.lease_ms / 3000
            checkpoint, items = write
            keys += self._member_keys(k)
            count = len(items) // 2 if checkpoint else len(items)
            args += [held.token, held.log, int(checkpoint), count, *items, held.figures]
            args += [len(held.consumed), *held.consumed]
            written.append((k, held.member.records, checkpoint))
        args[0] = len(written)
        messages, notes = self._messages()
        for dst, blob in self._entries(messages, notes):
            keys.append(self._k(dst, "in"))
            args += [len(keys), blob]
        self._mark_used(pipe, plan, [m.dst for m in messages] + [n.dst for n in notes])
        if written or len(keys):
            self._run(pipe, _FLUSH, keys, args)
            plan.append(("all", (written, messages)))

    def _all_written(self, written: list, got: Any) -> bool:
        """After the atomic flush: whether this process still owns what it wrote (else it
        owns nothing any more: what it applied at once may have come from a member it lost).
        A call that failed (a Redis error) is made again at the next flush."""
        if isinstance(got, Exception):
            return True
        status, lengths = int(got[0]), got[1:]
        if status == -1:
            return False
        for (k, records, checkpoint), length in zip(written, lengths):
            if status == -2:
                if not self._landed(k, int(length)):
                    return False
            else:
                self._written(k, records, checkpoint, length)
        return True

    def _written(self, k: int, records: int, checkpoint: bool, got: Any) -> bool:
        """After a member's write: whether this process still owns it. A write that failed
        (a Redis error) is made again at the next flush."""
        held = self.held.get(k)
        if held is None or isinstance(got, Exception):
            return True
        if got == -1:  # another process holds the lease: this one stalled past it
            return False
        if got == -2:
            return self._landed(k, int(self.client.llen(self._k(k, "log"))))
        held.member.durable = records
        held.unwritten = []
        held.consumed = []
        if checkpoint:
            held.log = 0
            held.since_checkpoint = 0
            held.checkpoint_at = time.monotonic()
        else:
            held.since_checkpoint += int(got) - held.log
            held.log = int(got)
        return True

    def _landed(self, k: int, length: int) -> bool:
        """Member ``k``'s journal is ``length`` batches long, not as long as this process
        thinks: batches of an earlier flush whose reply never came back did land (they are
        written: the rest goes next), or a restarted Redis lost writes (this process's state
        is not Redis's any more: whether it may go on)."""
        held = self.held[k]
        landed = length - held.log
        if landed == 0:
            return True
        if not 0 < landed <= len(held.unwritten):
            return False
        held.member.durable = held.unwritten[landed - 1][1]
        del held.unwritten[:landed]
        held.log += landed
        held.since_checkpoint += landed
        return True

    @staticmethod
    def _figures_of(member: Member) -> bytes:
        return json.dumps(member.figures_dict()).encode()  # type: ignore[attr-defined]

    def _entries(self, messages: list[Message], notes: list[Note]) -> list[tuple[int, bytes]]:
        """The messages and notes, one inbox entry per destination."""
        by_dst: dict[int, tuple[list, list]] = {}
        for m in messages:
            by_dst.setdefault(m.dst, ([], []))[0].append(tuple(m))
        for n in notes:
            by_dst.setdefault(n.dst, ([], []))[1].append(tuple(n))
        return [(dst, _pack(both)) for dst, both in by_dst.items()]

    def _claim_destinations(self, senders: Collection[int] | None = None) -> None:
        """Alone in the crawl, every partition is this process's: those its messages and
        notes go to (from ``senders`` only, if given) are claimed (before they are taken: a
        claim can fail)."""
        if len(self._live) > 1:
            return
        dsts = {n.dst for n in self.notes} | {m.dst for m in self._resend}
        members = self.members() if senders is None else map(self.member, senders)
        for member in members:
            if member is not None:
                dsts.update(m.dst for m, _ in member.outbox)
        for dst in sorted(dsts - set(self.held)):
            self._claim(dst)

    def _mark_used(self, pipe: Any, plan: list, dsts: list[int]) -> None:
        for dst in dsts:
            if dst != POOL and dst not in self._known_parts:
                pipe.sadd(self.ns + ":parts", dst)
                plan.append(("sadd", dst))
                self._known_parts.add(dst)

    def _queue_sends(
        self, pipe: Any, plan: list, messages: list[Message], notes: list[Note]
    ) -> None:
        """The messages whose records are durable and the notes, one inbox entry per
        destination (a Redis Cluster: one node each)."""
        by_dst: dict[int, list[Message]] = {}
        for m in messages:
            by_dst.setdefault(m.dst, []).append(m)
        for dst, blob in self._entries(messages, notes):
            pipe.xadd(self._k(dst, "in"), {"m": blob})
            plan.append(("send", by_dst.get(dst, [])))
        self._mark_used(pipe, plan, list(by_dst) + [n.dst for n in notes])

    def _sent(self, messages: list[Message], got: Any) -> None:
        if isinstance(got, Exception):
            self._resend.extend(messages)
            return
        for m in messages:
            src = self.member(m.src)
            if src is not None:
                src.confirm(m.dst, m.seq)

    def _read_inbox(self, k: int, held: _Held, entries: list) -> None:
        member = held.member
        keep = None  # the first entry with a message that waits for an earlier one
        for entry_id, fields in entries:
            messages, notes = _unpack(fields[b"m"])
            for raw in notes:
                self.note(Note(*raw))
            for raw in messages:
                member.receive(Message(*raw))
            if keep is None:
                waiting = member.box.waiting
                if any(Message(*raw).seq in waiting.get(raw[0], {}) for raw in messages):
                    keep = entry_id
                else:
                    held.consumed.append(entry_id)
            held.read_from = "(" + entry_id.decode()
        if keep is not None:
            held.read_from = keep.decode()

    def _series_point(self, now: float) -> None:
        """A point of the crawl's time series, every ``series_seconds``, by the pool's owner
        (from the partitions' last reports)."""
        if self.series is None or self.pool is None or now < self._next_point:
            return
        self._next_point = now + self._series_seconds
        figures = self.pool.figures.values()
        pages = sum(f[2] for f in figures)
        fetched = sum(f[14] for f in figures)
        G = self.pool.clock
        self.series.add(
            elapsed=time.time() - self.started,
            visits=sum(f[9] for f in figures),
            G=G,
            error_factor=1.0 / G if G > 0 else 0.0,
            pages=pages,
            fetched=fetched,
            pending=sum(f[10 + PENDING] for f in figures),
            virtual_cash=self.pool.total_cash(),
        )
        self.pool.version += 1

    # -- the fleet ------------------------------------------------------------------------------
    def _rebalance(self) -> None:
        """Beat, read the fleet, and claim or release partitions to own this process's share."""
        pipe = self.client.pipeline(transaction=False)
        # (The beat in the server's clock: TIME, from a script on the node of the crawl's keys,
        # as TIME cannot be pipelined to a Redis Cluster.)
        self._run(pipe, _BEAT, [self.ns + ":workers", self.ns + ":meta"], [self.worker])
        pipe.hgetall(self.ns + ":workers")
        pipe.smembers(self.ns + ":parts")
        pipe.hgetall(self.ns + ":owners")
        self.round_trips += 1
        now, workers, parts, owners = pipe.execute()
        if now == -1:
            self._gone = True  # (nothing more is written: it would make a crawl of a part)
            raise StoreError(
                f"the OPIC crawl {self.key!r} is gone from Redis (the server was emptied, or "
                "restarted without persistence?)"
            )
        now_ms = int(now)
        alive = sorted(
            {w.decode() for w, beat in workers.items() if now_ms - int(beat) < self.lease_ms}
            | {self.worker}
        )
        self._live = alive
        data = sorted(int(k) for k in parts)
        self._known_parts |= set(data)
        owner = {int(k): w.decode() for k, w in owners.items()}
        self._share_out(data, alive, owner)
        if alive[-1] == self.worker:
            if POOL not in self.held and owner.get(POOL) not in alive:
                self._claim(POOL)
        elif POOL in self.held:
            self.held[POOL].leaving = True  # (to the last process, which takes it)
            self._leaving.add(POOL)
        self._hand_over()

    def _share_out(self, data: list[int], alive: list[str], owner: dict[int, str]) -> None:
        """Claim partitions ``data`` that no live process owns, up to this process's share,
        or mark some of its own leaving if it holds more while another holds too few. The
        partitions in use are shared out evenly (the first processes in the order of their
        names take one more); the pool, light, goes to the last process."""
        mine = [k for k in self.held if k != POOL]
        at = alive.index(self.worker)
        share = len(data) // len(alive) + (1 if at < len(data) % len(alive) else 0)
        if len(mine) < share:
            for k in data:
                if len(mine) >= share:
                    break
                if k not in self.held and owner.get(k) not in alive and self._claim(k):
                    mine.append(k)
            return
        if len(mine) == share:
            return
        counts: dict[str, int] = {}
        for k in data:
            if owner.get(k) in alive:
                counts[owner[k]] = counts.get(owner[k], 0) + 1
        low = len(data) // len(alive)
        if any(counts.get(w, 0) < low for w in alive if w != self.worker):
            for k in sorted(mine, reverse=True)[: len(mine) - share]:
                self.held[k].leaving = True
                self._leaving.add(k)

    def _hand_over(self) -> None:
        """Release the members marked leaving whose pages are all back and whose hosts have
        been quiet for :attr:`quiet` seconds: checkpointed first."""
        now = time.monotonic()
        ready = []
        for k, held in self.held.items():
            part = self.parts.get(k)
            if not held.leaving or (part is not None and part.frontier.counts[IN_FLIGHT]):
                continue
            if now - held.last_active >= self.quiet:
                ready.append(k)
        if not ready:
            return
        self.commit()
        for k in ready:
            going = self.held.get(k)
            if going is not None:
                self._run(self.client, _RELEASE, [self._k(k, "lease")], [going.token])
                self.client.hdel(self.ns + ":owners", str(k))
                self._lose(k)

    # -- figures -----------------------------------------------------------------------------
    def crawl_figures(self, fresh: bool = False) -> dict[str, float]:
        """The crawl's figures: those of the members this process owns, now, and the others'
        as they last wrote them, with the messages in every inbox (read at most once a second,
        unless ``fresh``)."""
        now = time.monotonic()
        stale = self._down_since is not None and self._global is not None
        if not stale and (fresh or self._global is None or now - self._global_at >= 1.0):
            with self._answered():
                self._global = read_figures(self.client, self.key, skip=set(self.held))
                self._global_at = now
                self.round_trips += 1
            if self._global is None:  # (no answer, nothing read before)
                self._global = {**dict.fromkeys(FIGURES, 0), "messages": 0, "workers": 1}
                self._global.update(partitions=0, others=0)
        out = dict(self._global or {})
        for member in self.members():
            add_figures(out, member.figures_dict())  # type: ignore[attr-defined]
        out["unconfirmed"] -= len(self._local)  # (applied here, their confirmation to come)
        out["owned"] = len(self.parts)
        return finish_figures(out)

    def has_pending(self) -> bool:
        if super().has_pending() or self._resend or any(h.unwritten for h in self.held.values()):
            return True
        if self._down_since is not None:
            return True  # (waiting for Redis: the crawl is not over)
        answer = True
        with self._answered():
            answer = self._has_pending()
        return answer

    def _has_pending(self) -> bool:
        f = self.crawl_figures()
        busy = f["pending"] or f["in_flight"] or f["messages"] or f["unconfirmed"]
        if busy and time.monotonic() - self._global_at < 0.5:  # (busy half a second ago)
            return True
        f = self.crawl_figures(fresh=True)
        if f["pending"] or f["in_flight"] or f["messages"] or f["unconfirmed"]:
            return True
        if not f["others"]:  # (every member is this process's: nothing moves unseen)
            return False
        # Idle at one look. A message may have gone from a member not read yet to one read
        # already while the look read them one after the other; but every write of a member
        # counts a record: a second look that finds the same records finds the crawl still.
        again = self.crawl_figures(fresh=True)
        return (again["records"], again["pages"]) != (f["records"], f["pages"])

    def figures(self) -> dict[str, float]:
        self.settle()
        return self.crawl_figures()

    def settle(self) -> None:
        """For a process alone in its crawl: its figures, and a page's status and cash, as
        they are now, as one frontier's would be: its reports made and the pool's payouts, and
        every message between its members applied (on a Redis Cluster, by flushes until
        nothing it made is on its way). (With other processes the crawl is never still:
        figures are as each process last wrote them.)"""
        if len(self._live) > 1:
            return
        if self.atomic:
            self._claim_destinations()
            self.reports()
            return
        for _ in range(4):
            if len(self._live) > 1 or not self._in_motion():
                return
            self.flush(reports=True)

    def commit(self, wait: bool = True) -> None:
        """Make what this process did durable now: its records written and its messages sent
        (readers of the crawl see them)."""
        self.flush(reports=True)
        for _ in range(10):
            if not self._in_motion() and not any(
                h.unwritten or h.member.journal or h.consumed for h in self.held.values()
            ):
                return
            self.flush()

    def _in_motion(self) -> bool:
        """Messages or notes of this process on their way, or not known delivered."""
        return bool(
            self.notes
            or self._resend
            or self._local
            or any(h.member.outbox for h in self.held.values())
        )

    def status_of(self, key: Hashable) -> str | None:
        self.settle()
        return super().status_of(key)

    def cash_of(self, key: Hashable) -> float | None:
        self.settle()
        return super().cash_of(key)

    def total_cash(self) -> float:
        """The whole crawl's cash, read back from Redis after a flush (O(pages))."""
        self.flush(reports=True)
        self.flush()
        return self.snapshot().total_cash()

    # -- closing ----------------------------------------------------------------------------
    def close(self, leases: Collection[Lease]) -> None:
        """Hand ``leases`` back, checkpoint every member and release them all
        (:class:`StoreError` if Redis does not answer: what was not written is then lost, and
        redone by the processes that take the partitions over)."""
        if self._gone:
            self.client.close()
            return
        try:
            self.release(leases)
            for k, held in self.held.items():
                held.leaving = True
                self._leaving.add(k)
            self.commit()
            for k, held in list(self.held.items()):
                if not held.unwritten:
                    self._run(self.client, _RELEASE, [self._k(k, "lease")], [held.token])
                    self.client.hdel(self.ns + ":owners", str(k))
                self._lose(k)
            self.client.hdel(self.ns + ":workers", self.worker)
        except self._unanswered as exc:
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise StoreError(
                f"{masked_url(self.location or 'Redis')} does not answer ({why}): this "
                "process's last records are lost, its pages are fetched again by the processes "
                "that take its partitions over"
            ) from None
        finally:
            self.client.close()

    def snapshot(self) -> RedisSnapshot:
        """Every member read back from Redis (checkpoint and journal replayed) and the messages
        not yet applied: the crawl as one state, for exports and checks."""
        return RedisSnapshot(self.client, self.key)


def pack_pool(pool: Pool, series: Series | None) -> dict[str, bytes]:
    fields = {"h": _pack(pool.state())}
    if series is not None:
        fields["series"] = _pack(series.as_list())
    return fields


def load_member(fleet: RedisFrontier, k: int, writer: bool) -> tuple[Member, int, Series | None]:
    """Member ``k`` of ``fleet``'s crawl as stored: its checkpoint, its journal replayed; the
    number of journal batches, and (the pool) the crawl's time series. A ``writer`` (the
    member's new owner) also gives the crawl's endowment to the first partition made."""
    client = fleet.client
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(fleet._k(k, "ck"))
    pipe.lrange(fleet._k(k, "log"), 0, -1)
    pipe.hget(fleet.ns + ":meta", "endowed")
    fields, batches, endowed = pipe.execute()
    try:
        if k == POOL:
            pool = Pool.from_state(_unpack(fields[b"h"])) if fields else Pool()
            raw = fields.get(b"series") if fields else None
            return pool, 0, Series.from_list(_unpack(raw)) if raw else Series()
        if fields:
            state = unpack_state(fields)
            part = Partition.from_state(state, fleet.P, continuous=fleet.continuous, by=fleet.by)
        else:
            part = fleet.new_partition(k)
            if writer and not batches:  # (made now: its pages' back pay of teleport credit)
                part.start(fleet.teleport())
        for blob in batches:
            part.replay(_unpack(blob))
    except Exception as exc:
        raise StoreError(
            f"the OPIC crawl {fleet.key!r} in Redis: partition {k} is damaged "
            f"({' '.join(str(exc).split())[:200]})"
        ) from None
    if writer and not part.endowed:
        if endowed is None:  # the first partition made takes the crawl's endowment
            client.hsetnx(fleet.ns + ":meta", "endowed", k)
            endowed = client.hget(fleet.ns + ":meta", "endowed")
        if int(endowed) == k:
            part.endow()
    return part, len(batches), None


def read_figures(client: Any, key: str, skip: Collection[int] = ()) -> dict[str, float]:
    """The figures of a crawl's members but ``skip`` (see
    :data:`~scrapy_opic.opic.partition.FIGURES`) as they last wrote them, the messages in
    their inboxes, the processes that beat, the partitions in use; O(partitions)."""
    ns = "{" + key + "}"
    parts = sorted(int(k) for k in client.smembers(ns + ":parts"))
    pipe = client.pipeline(transaction=False)
    for k in [*parts, POOL]:
        tag = "pool" if k == POOL else k
        pipe.xlen(f"{{{key}:{tag}}}:in")
        if k not in skip:
            pipe.get(f"{{{key}:{tag}}}:fig")
    pipe.hlen(ns + ":workers")
    res = iter(pipe.execute())
    out: dict[str, float] = dict.fromkeys(FIGURES, 0)
    out["messages"] = 0
    for k in [*parts, POOL]:
        out["messages"] += int(next(res))
        if k not in skip:
            fig = next(res)
            if fig:
                add_figures(out, json.loads(fig))
    out["workers"] = int(next(res))
    out["partitions"] = len(parts)
    out["others"] = sum(1 for k in [*parts, POOL] if k not in skip)
    return out


def fleet_status(client: Any, key: str) -> dict[str, Any]:
    """The crawl's figures (:func:`read_figures`) and how many partitions each live process
    owns; :class:`StoreError` if there is no crawl."""
    fleet, _meta = reader_fleet(client, key)
    out: dict[str, Any] = finish_figures(read_figures(client, key))
    owners = client.hgetall(fleet.ns + ":owners")
    per: dict[str, int] = {}
    for w in owners.values():
        per[w.decode()] = per.get(w.decode(), 0) + 1
    out["owners"] = per
    return out


def reader_fleet(client: Any, key: str) -> tuple[RedisFrontier, dict[str, str]]:
    """A fleet with the crawl's parameters that owns nothing (to read members with), and the
    crawl's meta fields (:class:`StoreError` if there is no crawl of this layout)."""
    fleet = RedisFrontier(client, key)
    meta = fleet._meta_fields()
    if not meta:
        raise StoreError(f"no OPIC crawl under the key {key!r} in Redis")
    if meta.get("layout") != LAYOUT or "partitions" not in meta:
        raise StoreError(
            f"the OPIC crawl {key!r} in Redis was made by another version of scrapy-opic"
        )
    fleet.P, fleet.by = int(meta["partitions"]), meta["by"]
    fleet.epsilon, fleet.refresh = float(meta["epsilon"]), float(meta["refresh"])
    fleet.window, fleet.continuous = meta["window"], meta["continuous"] == "1"
    fleet.refetch = meta["refetch"]
    return fleet, meta


class RedisSnapshot:
    """A Redis crawl read into memory as one state (the reading interface of
    :class:`~scrapy_opic._backends.sqlite.StateReader`: ``n``, :meth:`header`, :meth:`meta`,
    :meth:`columns`, :meth:`page_chunks`, :meth:`urls_of`): every partition loaded as its next
    owner would (checkpoint, then journal), the pool, and the messages not yet applied (their
    cash counts with the virtual page's). Exact once the crawl's processes have stopped; while
    they run, each partition is as it was when read."""

    links_kept = False

    def __init__(self, client: Any, key: str) -> None:
        fleet, meta = reader_fleet(client, key)
        self.continuous = fleet.continuous
        self._meta = json.loads(meta.get("info", "{}"))
        ks = sorted(int(k) for k in client.smembers(fleet.ns + ":parts"))
        self.parts: list[Partition] = []
        self.pool = Pool()
        series = None
        messages: dict[tuple[int, int, int], Message] = {}
        for k in [*ks, POOL]:
            member, _batches, got = load_member(fleet, k, writer=False)
            if k == POOL:
                self.pool, series = member, got  # type: ignore[assignment]
            else:
                self.parts.append(member)  # type: ignore[arg-type]
            for m in member.box.unconfirmed.values():
                messages[(m.src, m.dst, m.seq)] = m
            for _id, fields in client.xrange(fleet._k(k, "in"), "-", "+"):
                for raw in _unpack(fields[b"m"])[0]:
                    m = Message(*raw)
                    messages[(m.src, m.dst, m.seq)] = m
        members: dict[int, Member] = {p.k: p for p in self.parts}
        members[POOL] = self.pool
        #: Cash on its way: messages not applied yet, and the endowment if no partition has it.
        self.transit = in_transit(
            m for m in messages.values() if m.dst not in members or members[m.dst].box.is_new(m)
        )
        if not any(p.endowed for p in self.parts):
            self.transit += 1.0
        self._meta.setdefault("series", series.as_list() if series is not None else [])
        self._build(meta)

    def _build(self, meta: dict[str, str]) -> None:
        engines = [p.frontier.engine for p in self.parts]
        made = sum(e.G - e.g_others for e in engines)
        clock = self.pool.paid + max(made, sum(self.pool.made.values()))
        clock = max([clock, *(e.G for e in engines)])
        for e in engines:
            e.rebase()  # (the accumulators folded in: every page's stored cash is its cash)
            e.shift_clock(clock - e.G)  # (one clock for all: a partition's may lag)
        self.n = sum(e.n for e in engines)
        self._gather_pages()
        params = {
            "epsilon": float(meta["epsilon"]),
            "refresh": float(meta["refresh"]),
            "window": meta["window"],
            "self_links": False,
        }
        # (One window for the crawl's pages: a policy that learns per partition says what of
        # the partitions' learning stands for all, on the one clock set above.)
        parts = [e.window.scalars() for e in engines]
        window = engines[0].window.merge_scalars(parts) if engines else {}
        self._header = {"params": params, "scalars": self._scalars(clock), "window": window}

    def _gather_pages(self) -> None:
        """Every partition's pages one after the other: their arrays (the change columns too
        if every partition has them), statuses, outcomes, keys and URLs."""
        frs = [p.frontier for p in self.parts]
        self._arrays: dict[str, np.ndarray] = {}
        cols = [{**f.engine.page_arrays()} for f in frs]
        #: Whether the crawl refetched by freshness: its pages have change rates.
        self.changes_kept = bool(frs) and all(f.refresher is not None for f in frs)
        if self.changes_kept:
            for c, f in zip(cols, frs):
                c.update(f.refresher.columns(f.engine.n))  # type: ignore[union-attr]
        for name in cols[0] if cols else ():
            self._arrays[name] = np.concatenate([c[name][: f.engine.n] for c, f in zip(cols, frs)])
        self.status = b"".join(bytes(f.status[: f.engine.n]) for f in frs)
        self.outcome = b"".join(f.outcome[: f.engine.n].tobytes() for f in frs)
        self.keys = [k for f in frs for k in keys_of(f.engine, f.engine.n)]
        self.urls = [u for f in frs for u in f.urls[: f.engine.n]]

    def _scalars(self, clock: float) -> dict[str, float]:
        """The crawl's engine scalars: the partitions' summed, on one clock, the pool's and
        the messages' cash with the virtual page's."""
        engines = [p.frontier.engine for p in self.parts]
        virtual = sum(e.virtual_cash + e.pool_all + e.pool_unfetched for e in engines)
        scalars: dict[str, float] = {
            "n": self.n,
            "G": clock,
            "virtual_cash": virtual + self.pool.total_cash() + self.transit,
            "virtual_history": sum(e.virtual_history for e in engines) + self.pool.paid,
        }
        for name in ("g_real", "n_unfetched", "n_closed", "visit_count", "credit_total"):
            scalars[name] = sum(getattr(e, name) for e in engines)
        for name in ("credit_passed", "credit_dangling", "b_total", "d_total"):
            scalars[name] = sum(getattr(e, name) for e in engines)
        return scalars

    def engine(self, **engine_kw: Any) -> OpicEngine:
        """The crawl as one engine, every page loaded."""
        e = OpicEngine.from_header(self._header, **engine_kw)
        e._grow(max(1, self.n))
        for name, a in e.page_arrays().items():
            a[: self.n] = self._arrays[name]
        return e

    def total_cash(self) -> float:
        """All the crawl's cash: pages, virtual pages, pool, messages on their way."""
        return self.engine().total_cash()

    def meta(self) -> dict:
        return self._meta

    def header(self) -> dict:
        return self._header

    def columns(
        self, names: Sequence[str] | None = None, batch: int = 0
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        cols = dict(self._arrays)
        cols["f.status"] = np.frombuffer(self.status, np.uint8)
        cols["f.outcome"] = np.frombuffer(self.outcome, np.uint16)
        if self.n:
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
    "RedisFrontier",
    "RedisSnapshot",
    "fleet_status",
    "load_member",
    "open_client",
    "read_figures",
    "reader_fleet",
]
