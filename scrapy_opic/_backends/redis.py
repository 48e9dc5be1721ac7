"""The Redis store: one crawl shared by many Scrapy processes, on many machines, each owning
some of the crawl's partitions (:mod:`scrapy_opic.opic.partition`) and running for them the
very engine the embedded store runs (:class:`~scrapy_opic._backends.crawl.Crawl`).

Redis stores and carries; it computes nothing of OPIC. For each partition (and for the crawl's
pool) it holds a lease, a checkpoint and the journal since, an inbox and the member's figures
(the keys: :mod:`.redis_state`). A process that takes a partition over loads the checkpoint and
replays the journal through the same frontier.

Writes are fenced. On a plain Redis, a flush is one script (``_FLUSH``): it first checks that
the process still holds every member it writes (the lease's token) and that each journal is as
long as the process thinks (a write lost with a restarted Redis), then appends the journals (or
checkpoints), deletes the inbox entries applied and adds the messages to their inboxes, or does
nothing. Since the records of all its members land together, a message between two members of
one process is applied at once, in memory, and a message to another process's member leaves
with the record that made it. On a Redis Cluster, whose members are on several nodes, each
member has a script of its own, with the same checks; a message leaves with the flush after its
record's. Either way a process that lost a partition (it stalled past its lease) can never write
over its successor's. No OPIC rule runs in Redis.

A flush (its writes, sends, reads of the inboxes and lease renewals) is one pipeline: one round
trip per node of a Redis Cluster. A Redis Cluster spreads the partitions over its shards by
their hash tags (``{K:k}``): every key of one member is in one slot, so each script touches one
node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Collection
from typing import Any, NamedTuple

from ..opic.config import CrawlConfig
from ..opic.messages import POOL, Message, Note
from . import CrawlGone, StoreError
from .redis_state import (
    LAYOUT,
    START_AFRESH,
    RedisSnapshot,
    crawl_meta,
    load_member,
    member_key,
    pack,
    pack_member,
    read_figures,
    read_verdicts,
    stored_config,
    unpack,
)
from .store import FAILED, LOST, SHORT, WRITTEN, Claim, FleetView, Flushed, Outcome, Write

#: Inbox entries read per member per flush.
READ_COUNT = 500
#: Seconds one call to Redis may take (a server that hangs counts as one that does not
#: answer), unless the URL sets ``socket_timeout`` itself.
SOCKET_TIMEOUT = 10.0

# (The inbox entries a write applied are deleted 1,000 ids to a call: Lua's unpack gives at
# most about 8,000 values, and entries pile up while writes fail.)
_APPEND = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local n = redis.call('LLEN', KEYS[2])
if n ~= tonumber(ARGV[2]) then return -2 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local blobs = tonumber(ARGV[4])
for i = 5, 4 + blobs do n = redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('SET', KEYS[3], ARGV[5 + blobs])
for j = 6 + blobs, #ARGV, 1000 do
  redis.call('XDEL', KEYS[4], unpack(ARGV, j, math.min(j + 999, #ARGV)))
end
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
for j = 6 + 2 * fields, #ARGV, 1000 do
  redis.call('XDEL', KEYS[4], unpack(ARGV, j, math.min(j + 999, #ARGV)))
end
return 0
"""
_FLUSH = """
local meta, parts = KEYS[#KEYS - 1], KEYS[#KEYS]
if redis.call('HEXISTS', meta, 'config') == 0 then return {-3} end
local members, ms, made = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local at, spans = 4 + made, {}
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
  local last = a + 5 + items + consumed
  for j = a + 6 + items, last, 1000 do
    redis.call('XDEL', KEYS[k + 4], unpack(ARGV, j, math.min(j + 999, last)))
  end
end
for j = at, #ARGV, 2 do redis.call('XADD', KEYS[tonumber(ARGV[j])], '*', 'm', ARGV[j + 1]) end
for j = 4, 3 + made do redis.call('SADD', parts, ARGV[j]) end
return out
"""
_BEAT = """
if redis.call('HEXISTS', KEYS[2], 'config') == 0 then return -1 end
local t = redis.call('TIME')
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ms)
return ms
"""
_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then return -1 end
redis.call('HSET', KEYS[1], 'layout', ARGV[1], 'config', ARGV[2], 'info', ARGV[3])
return 1
"""
_CLAIM = """
if #KEYS > 1 and redis.call('HEXISTS', KEYS[2], 'config') == 0 then return -1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_ADOPT = """
if redis.call('HEXISTS', KEYS[1], 'config') == 0 then return false end
if ARGV[3] == '1' then
  redis.call('HSETNX', KEYS[1], 'endowed', ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[1])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], 'endowed') or ''
"""
_PARTS = """
if redis.call('HEXISTS', KEYS[1], 'config') == 0 then return -1 end
return redis.call('SADD', KEYS[2], unpack(ARGV))
"""
_JUDGE = """
if redis.call('HEXISTS', KEYS[1], 'config') == 0 then return -1 end
return redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
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


class _Entry(NamedTuple):
    """An inbox entry a flush adds: its destination member, its packed blob, and the messages
    and notes it carries (to send again if it does not land)."""

    dst: int
    blob: bytes
    messages: list[Message]
    notes: list[Note]


class RedisStore:
    """A process of the Redis crawl ``key`` (see the module docstring).

    :param client: a ``redis.Redis`` or ``redis.RedisCluster`` client (bytes, not decoded).
    :param lease: seconds a member stays its process's without renewal (a killed process's
        members are taken over after that).
    """

    shared = True
    journaled = True

    def __init__(
        self, client: Any, key: str, *, lease: float = 30.0, location: str | None = None
    ) -> None:
        import redis

        self.client = client
        self.key = key
        self.ns = "{" + key + "}"
        self.location = location
        #: One atomic flush (a plain Redis), or a script per member (a Redis Cluster, whose
        #: members are on several nodes).
        self.atomic = not isinstance(client, redis.RedisCluster)
        self.unanswered: tuple[type[BaseException], ...] = (
            redis.ConnectionError,
            redis.TimeoutError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.TryAgainError,
            redis.exceptions.MasterDownError,
        )
        self.lease_ms = max(100, int(lease * 1000))
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.round_trips = 0
        self.config = CrawlConfig()
        self._known_parts: set[int] = set()
        self._gone = False  # the crawl's keys vanished from Redis: write nothing more

    @classmethod
    def connect(cls, url: str, key: str, **kw: Any) -> RedisStore:
        """A process of the crawl ``key`` on the Redis at ``url`` (a plain server or any node
        of a Redis Cluster: see :func:`open_client`)."""
        kw.setdefault("location", f"{url}#{key}")
        return cls(open_client(url), key, **kw)

    @staticmethod
    def _run(client: Any, script: str, keys: list[str], args: list[Any]) -> Any:
        # (EVAL, not EVALSHA: a pipeline on a Redis Cluster cannot reload a script a node
        # lost; Redis caches each script's compiled form all the same.)
        return client.execute_command("EVAL", script, len(keys), *keys, *args)

    def _keys(self, k: int) -> list[str]:
        return [member_key(self.key, k, s) for s in ("lease", "log", "fig", "in", "ck")]

    # -- the crawl ----------------------------------------------------------------------------
    def saved(self) -> dict[str, Any] | None:
        self.round_trips += 1
        meta = crawl_meta(self.client, self.key)
        if not meta:
            return None
        stored_config(self.key, meta)  # (a crawl of another layout is refused here)
        return json.loads(meta.get("info", "{}"))

    def open(self, config: CrawlConfig, meta: dict[str, Any]) -> bool:
        """Join the crawl under this key, creating it if there is none; whether this call
        created it."""
        self.config = config
        info = json.dumps({**meta, "started": time.time()}, default=str)
        keys = [self.ns + ":meta", self.ns + ":parts", self.ns + ":owners"]
        args = [LAYOUT, json.dumps(dataclasses.asdict(config)), info]
        self.round_trips += 2
        got = int(self._run(self.client, _OPEN, keys, args))
        if got == -1:  # (keys of a crawl without its meta: not to be taken for a new crawl)
            raise CrawlGone(
                f"the OPIC crawl {self.key!r} in Redis is incomplete (its partitions without "
                f"its parameters: the server was emptied while it ran?): {START_AFRESH}"
            )
        theirs = stored_config(self.key, crawl_meta(self.client, self.key))
        if (theirs.partitions, theirs.by) != (config.partitions, config.by):
            raise StoreError(
                f"the OPIC crawl {self.key!r} in Redis has {theirs.partitions} partitions by "
                f"{theirs.by}, not {config.partitions} by {config.by}: every process of a crawl "
                "sets the same OPIC_REDIS_PARTITIONS and OPIC_REDIS_PARTITION"
            )
        return got == 1

    def exists(self) -> bool:
        """Is there a crawl under this key (of any layout)?"""
        self.round_trips += 1
        return bool(self.client.exists(self.ns + ":meta"))

    def clear(self) -> int:
        """Delete every key of this crawl (of any layout); returns how many."""
        import redis

        meta = crawl_meta(self.client, self.key)
        if meta.get("layout", LAYOUT) != LAYOUT:
            # A crawl of an older layout: its keys, under the crawl's tag or a member's
            # ({K}:... or {K:...), found by a scan.
            tag = "{" + re.sub(r"([*?\[\]\\])", r"\\\1", self.key)
            old = {k for p in (tag + "}:*", tag + ":*") for k in self.client.scan_iter(p, 1000)}
            return int(self.client.unlink(*old)) if old else 0
        parts = json.loads(meta["config"])["partitions"] if "config" in meta else 0
        try:
            known = {int(k) for k in self.client.smembers(self.ns + ":parts")}
        except redis.ResponseError:  # (not a set: what is left of another layout)
            known = set()
        pipe = self.client.pipeline(transaction=False)
        for suffix in ("meta", "workers", "parts", "owners", "validators"):
            pipe.unlink(f"{self.ns}:{suffix}")
        for k in sorted(set(range(-1, parts)) | known):
            for key in self._keys(k):
                pipe.unlink(key)
        return sum(pipe.execute())

    # -- members ------------------------------------------------------------------------------
    def beat(self) -> FleetView:
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
            raise self._gone_error()
        alive = {w.decode() for w, beat in workers.items() if int(now) - int(beat) < self.lease_ms}
        data = sorted(int(k) for k in parts)
        self._known_parts |= set(data)
        owner = {int(k): w.decode() for k, w in owners.items()}
        return FleetView(sorted(alive | {self.worker}), data, owner)

    def _gone_error(self) -> CrawlGone:
        self._gone = True  # (nothing more is written: it would make a crawl of a part)
        return CrawlGone(
            f"the OPIC crawl {self.key!r} is gone from Redis (the server was emptied, or "
            f"restarted without persistence?): nothing of it is left; {START_AFRESH}"
        )

    def claim(self, k: int) -> Claim | None:
        token = f"{self.worker}:{uuid.uuid4().hex[:8]}"
        lease = member_key(self.key, k, "lease")
        # (With the crawl's meta in one script on a plain Redis: a lease is never written into
        # an emptied server. On a Redis Cluster the meta is on another node: the adoption
        # below finds the crawl gone, and the lease is deleted again.)
        keys = [lease] if not self.atomic else [lease, self.ns + ":meta"]
        self.round_trips += 3
        got = int(self._run(self.client, _CLAIM, keys, [token, self.lease_ms]))
        if got == -1:
            raise self._gone_error()
        if got == 0:
            return None
        try:
            member, log, series, new = load_member(self.client, self.key, k, self.config)
            keys = [self.ns + ":meta", self.ns + ":parts", self.ns + ":owners"]
            endowed = self._run(self.client, _ADOPT, keys, [k, self.worker, int(k != POOL)])
            if endowed is None:
                raise self._gone_error()
        except BaseException:
            self._run(self.client, _RELEASE, [lease], [token])
            raise
        if k != POOL:
            self._known_parts.add(k)
        # (The first partition made takes the crawl's endowment.)
        first = endowed == str(k).encode()
        endow = k != POOL and first and not member.endowed  # type: ignore[attr-defined]
        kept = None if k != POOL else {"series": series or []}
        return Claim(member, token, log, new, endow, kept)

    def judge(self, host: str, verdict: dict[str, Any]) -> None:
        if self._gone:
            return
        keys = [self.ns + ":meta", self.ns + ":validators"]
        self.round_trips += 1
        if int(self._run(self.client, _JUDGE, keys, [host, json.dumps(verdict)])) == -1:
            raise self._gone_error()

    def verdicts(self) -> dict[str, dict[str, Any]]:
        self.round_trips += 1
        return read_verdicts(self.client, self.key)

    def release(self, k: int, token: str) -> None:
        if self._gone:
            return
        self._run(self.client, _RELEASE, [member_key(self.key, k, "lease")], [token])
        self.client.hdel(self.ns + ":owners", str(k))

    # -- flushes ------------------------------------------------------------------------------
    def flush(
        self,
        writes: list[Write],
        sends: list[Message],
        notes: list[Note],
        renew: dict[int, str],
        reads: dict[int, Any],
        wait: bool = False,
    ) -> Flushed:
        pipe = self.client.pipeline(transaction=False)
        plan: list[tuple[str, Any]] = []
        for k, token in renew.items():
            self._run(pipe, _RENEW, [member_key(self.key, k, "lease")], [token, self.lease_ms])
            plan.append(("renew", k))
        entries = self._entries(sends, notes)
        # (The partitions that messages make: the crawl's list of partitions gets them.)
        made = sorted({e.dst for e in entries} - self._known_parts - {POOL})
        self._known_parts.update(made)
        queue = self._queue_all if self.atomic else self._queue_each
        plan += queue(pipe, writes, entries, made)
        for k, start in reads.items():
            pipe.xrange(
                member_key(self.key, k, "in"), min=_min_id(start), max="+", count=READ_COUNT
            )
            plan.append(("read", k))
        if not plan:
            return Flushed({}, [], [], {}, [])
        self.round_trips += 1
        results = pipe.execute(raise_on_error=False)
        out = Flushed({}, [], [], {}, [])
        for (kind, info), got in zip(plan, results):
            self._outcome(kind, info, got, writes, sends, notes, out)
        return out

    def _outcome(
        self,
        kind: str,
        info: Any,
        got: Any,
        writes: list[Write],
        sends: list[Message],
        notes: list[Note],
        out: Flushed,
    ) -> None:
        """Read the reply ``got`` to one step of a flush into ``out``."""
        failed = isinstance(got, Exception)
        if kind == "parts" and got == -1:
            raise self._gone_error()
        if kind == "renew":
            if got == 0:  # (the lease lapsed: another process's now; an error is never 0)
                out.written[info] = Outcome(LOST)
        elif kind == "all":
            if not failed and int(got[0]) == -3:
                raise self._gone_error()
            self._all_outcome(got, writes, sends, notes, out)
        elif kind == "write":
            out.written[info] = self._write_outcome(info, got)
        elif kind == "send":
            (out.unsent if failed else out.delivered).extend(info.messages)
            if failed:
                out.unsent_notes.extend(info.notes)
        elif kind == "read" and not failed:
            out.inbox[info] = [(i, *unpack(fields[b"m"])) for i, fields in got]

    @staticmethod
    def _all_outcome(
        got: Any, writes: list[Write], sends: list[Message], notes: list[Note], out: Flushed
    ) -> None:
        """Read the reply ``got`` to the atomic flush (status, journal lengths) into ``out``."""
        status = FAILED if isinstance(got, Exception) else int(got[0])
        for n, w in enumerate(writes):
            if status == 0:
                out.written[w.k] = Outcome(WRITTEN, int(got[n + 1]))
            elif status == -2:
                out.written[w.k] = Outcome(SHORT, int(got[n + 1]))
            else:
                out.written[w.k] = Outcome(LOST if status == -1 else FAILED)
        (out.delivered if status == 0 else out.unsent).extend(sends)
        if status != 0:
            out.unsent_notes.extend(notes)

    def _write_outcome(self, k: int, got: Any) -> Outcome:
        """The outcome of member ``k``'s write, whose script replied ``got`` (a Redis Cluster)."""
        if isinstance(got, Exception):
            return Outcome(FAILED)
        if got == -1:  # another process holds the lease: this one stalled past it
            return Outcome(LOST)
        if got == -2:
            self.round_trips += 1
            return Outcome(SHORT, int(self.client.llen(member_key(self.key, k, "log"))))
        return Outcome(WRITTEN, int(got))

    @staticmethod
    def _items(w: Write) -> list[Any]:
        """The items of a write's script: the checkpoint's fields and values, or the batches."""
        if w.checkpoint is not None:
            fields = pack_member(w.checkpoint, (w.crawl or {}).get("series"))
            return [x for pair in fields.items() for x in pair]
        return [pack(batch) for batch in w.batches]

    def _queue_write(self, pipe: Any, w: Write) -> None:
        """A member's write, one script (a Redis Cluster)."""
        items = self._items(w)
        keys = self._keys(w.k)
        figures = json.dumps(w.figures).encode()
        args: list[Any] = [w.token, w.log, self.lease_ms]
        if w.checkpoint is not None:
            args += [figures, len(items) // 2, *items]
            self._run(pipe, _CHECKPOINT, keys, args + w.consumed)
        else:
            args += [len(items), *items, figures]
            self._run(pipe, _APPEND, keys[:4], args + w.consumed)

    def _queue_each(
        self,
        pipe: Any,
        writes: list[Write],
        entries: list[_Entry],
        made: list[int],
    ) -> list[tuple[str, Any]]:
        """A script per write, an XADD per inbox entry and the partitions ``made`` added (a
        Redis Cluster): the plan's steps."""
        plan: list[tuple[str, Any]] = []
        if made:
            self._run(pipe, _PARTS, [self.ns + ":meta", self.ns + ":parts"], made)
            plan.append(("parts", made))
        for w in writes:
            self._queue_write(pipe, w)
        for e in entries:
            pipe.xadd(member_key(self.key, e.dst, "in"), {"m": e.blob})
        return plan + [("write", w.k) for w in writes] + [("send", e) for e in entries]

    def _queue_all(
        self,
        pipe: Any,
        writes: list[Write],
        entries: list[_Entry],
        made: list[int],
    ) -> list[tuple[str, Any]]:
        """The atomic flush of a plain Redis (the script ``_FLUSH``): every write, every
        message and the partitions ``made``, in one step or not at all (nothing if the crawl
        is gone); the plan's step (none with nothing to write)."""
        if not (writes or entries):
            return []
        keys: list[str] = []
        args: list[Any] = [len(writes), self.lease_ms, len(made), *made]
        for w in writes:
            items = self._items(w)
            keys += self._keys(w.k)
            checkpoint = w.checkpoint is not None
            count = len(items) // 2 if checkpoint else len(items)
            figures = json.dumps(w.figures).encode()
            args += [w.token, w.log, int(checkpoint), count, *items, figures]
            args += [len(w.consumed), *w.consumed]
        for e in entries:
            keys.append(member_key(self.key, e.dst, "in"))
            args += [len(keys), e.blob]
        keys += [self.ns + ":meta", self.ns + ":parts"]
        self._run(pipe, _FLUSH, keys, args)
        return [("all", None)]

    @staticmethod
    def _entries(messages: list[Message], notes: list[Note]) -> list[_Entry]:
        """The messages and notes, one inbox entry per destination."""
        by_dst: dict[int, tuple[list, list]] = {}
        for m in messages:
            by_dst.setdefault(m.dst, ([], []))[0].append(m)
        for n in notes:
            by_dst.setdefault(n.dst, ([], []))[1].append(n)
        return [_Entry(dst, pack(both), *both) for dst, both in by_dst.items()]

    # -- reading ------------------------------------------------------------------------------
    def figures(self, skip: Collection[int]) -> dict[str, float]:
        self.round_trips += 1
        return read_figures(self.client, self.key, skip)

    def snapshot(self) -> RedisSnapshot:
        return RedisSnapshot(self.client, self.key)

    def close(self) -> None:
        try:
            if not self._gone:
                with contextlib.suppress(*self.unanswered):  # (its beat lapses all the same)
                    self.client.hdel(self.ns + ":workers", self.worker)
        finally:
            self.client.close()


def _min_id(start: Any) -> str:
    """Where an inbox read starts: ``"-"`` (the first entry), an entry id (``("at", id)``) or
    past one (``("after", id)``)."""
    if start == "-":
        return "-"
    how, entry_id = start
    entry = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return entry if how == "at" else "(" + entry
