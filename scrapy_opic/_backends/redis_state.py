"""A Redis crawl's keys and what they hold, and the readers of a crawl in Redis (the export,
the commands): its members loaded as their next owner would load them, its figures.

The keys of crawl ``K``: ``{K}:meta`` (the layout, the partition count, the crawl's parameters,
what its creator recorded), ``{K}:workers`` (each process's last beat), ``{K}:parts``
(partitions that have pages or messages), ``{K}:owners`` (who owns what, as the owners last
said), ``{K}:validators`` (host -> the verdict on its validators, JSON); and per member ``k``
(a partition, or ``pool``), with the hash tag ``{K:k}`` so that a Redis Cluster keeps them on
one node: ``lease``, ``ck`` (its checkpoint: a hash of a header, blocks of page arrays and
blocks of keys, URLs and requests, each compressed), ``log`` (the journal since: a list of
batches of records), ``in`` (its inbox: a stream of messages and notes), ``fig`` (its
figures).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..opic.config import CrawlConfig
from ..opic.engine import OpicEngine
from ..opic.fleet import FIGURES, add_figures, finish_figures
from ..opic.index import DictKeys
from ..opic.journal import Member
from ..opic.messages import POOL, Message, in_transit
from ..opic.partition import Partition
from ..opic.pool import Pool
from ..opic.snapshot import engine_arrays, engine_from_header, shift_clock
from . import StoreError
from .sqlite_state import CHUNK

#: The layout of a crawl's keys, compared by every process that joins: a crawl stored
#: otherwise is refused.
LAYOUT = "opic-partitions-2"
#: Pages per block of a checkpoint.
BLOCK = 1024


def member_key(key: str, k: int, suffix: str) -> str:
    """The Redis key ``suffix`` (``lease``, ``ck``, ``log``, ``in``, ``fig``) of member ``k``
    of crawl ``key``."""
    return f"{{{key}:{'pool' if k == POOL else k}}}:{suffix}"


def pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(blob: bytes) -> Any:
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


_BIG = ("arrays", "status", "outcome", "tier", "payloads", "urls", "keys", "kept", "remote_kept")


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
    fields = {"h": pack(head)}
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
        fields[f"p:{b}"] = pack(rows)
    return fields


def unpack_state(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """The checkpoint of :func:`pack_state` (:class:`ValueError` if it is incomplete)."""
    head = unpack(fields[b"h"])
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
        for i, (key, url, payload, links, out) in enumerate(unpack(fields[f"p:{b}".encode()]), lo):
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


def pack_member(member: Member, series: list | None) -> dict[str, bytes]:
    """A member's checkpoint as the fields of its hash (the pool's: its state and the crawl's
    time series)."""
    if isinstance(member, Pool):
        fields = {"h": pack(member.state())}
        if series is not None:
            fields["series"] = pack(series)
        return fields
    return pack_state(member.state())


def crawl_meta(client: Any, key: str) -> dict[str, str]:
    """The crawl's ``{K}:meta`` fields (empty if there is no crawl; a layout of ``"older"`` if
    the key is not a hash: a crawl of a version before this layout)."""
    import redis

    try:
        raw = client.hgetall("{" + key + "}:meta")
    except redis.ResponseError as exc:
        if "WRONGTYPE" not in str(exc):
            raise
        return {"layout": "older"}  # (an older version kept its meta as a string)
    return {k.decode(): v.decode() for k, v in raw.items()}


def read_verdicts(client: Any, key: str) -> dict[str, Any]:
    """The verdicts on hosts' validators the crawl keeps (``{K}:validators``: host -> JSON);
    one that does not parse is None (its reader judges the host again)."""
    out = {}
    for host, raw in client.hgetall("{" + key + "}:validators").items():
        verdict = None
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            verdict = json.loads(raw)
        out[host.decode(errors="replace")] = verdict
    return out


#: How to leave a crawl that cannot be used (the end of an error's line).
START_AFRESH = "start afresh (OPIC_REDIS_RESET=True, or another OPIC_REDIS_KEY)"


def stored_config(key: str, meta: dict[str, str]) -> CrawlConfig:
    """The parameters of the crawl whose meta fields are ``meta`` (:class:`StoreError` if there
    is no crawl, one of another layout, or what is left of one)."""
    if not meta:
        raise StoreError(f"no OPIC crawl under the key {key!r} in Redis")
    if meta.get("layout", LAYOUT) != LAYOUT:
        raise StoreError(
            f"the OPIC crawl {key!r} in Redis was made by another version of scrapy-opic: "
            f"{START_AFRESH}"
        )
    if "layout" not in meta or "config" not in meta:
        raise StoreError(
            f"the OPIC crawl {key!r} in Redis is incomplete (what is left of a crawl whose "
            f"server was emptied while it ran?): {START_AFRESH}"
        )
    return CrawlConfig(**json.loads(meta["config"]))


def load_member(
    client: Any, key: str, k: int, config: CrawlConfig
) -> tuple[Member, int, list | None, bool]:
    """Member ``k`` of the crawl ``key`` as stored: its checkpoint, its journal replayed; the
    number of journal batches, the crawl's time series (the pool's), and whether the member
    has nothing stored (made now)."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(member_key(key, k, "ck"))
    pipe.lrange(member_key(key, k, "log"), 0, -1)
    fields, batches = pipe.execute()
    try:
        if k == POOL:
            pool = Pool.from_state(unpack(fields[b"h"])) if fields else Pool()
            raw = fields.get(b"series") if fields else None
            return pool, 0, unpack(raw) if raw else None, not fields
        if fields:
            part = Partition.from_state(unpack_state(fields), config)
        else:
            part = Partition.new(k, config)
        for blob in batches:
            part.replay(unpack(blob))
    except Exception as exc:
        raise StoreError(
            f"the OPIC crawl {key!r} in Redis: partition {k} is damaged "
            f"({' '.join(str(exc).split())[:200]})"
        ) from None
    return part, len(batches), None, not (fields or batches)


def read_figures(client: Any, key: str, skip: Collection[int] = ()) -> dict[str, float]:
    """The figures of a crawl's members but ``skip`` (see
    :data:`~scrapy_opic.opic.fleet.FIGURES`) as they last wrote them, the messages in their
    inboxes, the processes that beat, the partitions in use; O(partitions)."""
    ns = "{" + key + "}"
    parts = sorted(int(k) for k in client.smembers(ns + ":parts"))
    pipe = client.pipeline(transaction=False)
    for k in [*parts, POOL]:
        pipe.xlen(member_key(key, k, "in"))
        if k not in skip:
            pipe.get(member_key(key, k, "fig"))
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
    stored_config(key, crawl_meta(client, key))
    out: dict[str, Any] = finish_figures(read_figures(client, key))
    per: dict[str, int] = {}
    for w in client.hgetall("{" + key + "}:owners").values():
        per[w.decode()] = per.get(w.decode(), 0) + 1
    out["owners"] = per
    return out


def _listing(engine: OpicEngine) -> list[Any]:
    keys = engine.keys
    assert isinstance(keys, DictKeys)  # (a partition checkpointed whole)
    return keys.listing(engine.n)


class RedisSnapshot:
    """A Redis crawl read into memory as one state (the reading interface of
    :class:`~scrapy_opic._backends.sqlite_state.StateReader`: ``n``, :meth:`header`,
    :meth:`meta`, :meth:`columns`, :meth:`page_chunks`, :meth:`urls_of`): every partition
    loaded as its next owner would (checkpoint, then journal), the pool, and the messages not
    yet applied (their cash counts with the virtual page's). Exact once the crawl's processes
    have stopped; while they run, each partition is as it was when read."""

    links_kept = False

    def __init__(self, client: Any, key: str) -> None:
        meta = crawl_meta(client, key)
        config = stored_config(key, meta)
        self.continuous = config.continuous
        self._meta = json.loads(meta.get("info", "{}"))
        ks = sorted(int(k) for k in client.smembers("{" + key + "}:parts"))
        self.parts: list[Partition] = []
        self.pool = Pool()
        series = None
        messages: dict[tuple[int, int, int], Message] = {}
        for k in [*ks, POOL]:
            member, _batches, got, _new = load_member(client, key, k, config)
            if isinstance(member, Pool):
                self.pool, series = member, got
            else:
                self.parts.append(member)  # type: ignore[arg-type]
            for m in member.box.unconfirmed.values():
                messages[(m.src, m.dst, m.seq)] = m
            for _id, fields in client.xrange(member_key(key, k, "in"), "-", "+"):
                for m in unpack(fields[b"m"])[0]:
                    messages[(m.src, m.dst, m.seq)] = m
        #: Cash on its way: messages not applied yet, and the endowment if no partition has it.
        self.transit = self._in_transit(messages.values())
        self._meta.setdefault("series", series or [])
        self._meta["validators"] = read_verdicts(client, key)
        self._build(config)

    def _in_transit(self, messages: Iterable[Message]) -> float:
        """The cash of ``messages`` that their members have not applied (or that go to none
        loaded), and the endowment if no partition has it."""
        members: dict[int, Member] = {p.k: p for p in self.parts}
        members[POOL] = self.pool
        cash = in_transit(
            m for m in messages if m.dst not in members or members[m.dst].box.is_new(m)
        )
        if not any(p.endowed for p in self.parts):
            cash += 1.0
        return cash

    def _build(self, config: CrawlConfig) -> None:
        engines = [p.frontier.engine for p in self.parts]
        made = sum(e.G - e.g_others for e in engines)
        clock = self.pool.paid + max(made, sum(self.pool.made.values()))
        clock = max([clock, *(e.G for e in engines)])
        for e in engines:
            e.rebase()  # (the accumulators folded in: every page's stored cash is its cash)
            shift_clock(e, clock - e.G)  # (one clock for all: a partition's may lag)
        self.n = sum(e.n for e in engines)
        self._gather_pages()
        params = {
            "epsilon": config.epsilon,
            "refresh": config.refresh,
            "window": config.window,
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
        #: Whether the crawl refetched by freshness: its pages have change rates.
        self.changes_kept = bool(frs) and all(f.refresher is not None for f in frs)
        cols: list[dict[str, np.ndarray]] = []
        status, outcome = bytearray(), bytearray()
        self.keys: list[Any] = []
        self.urls: list[str | None] = []
        for f in frs:
            n = f.engine.n
            c = engine_arrays(f.engine)
            if self.changes_kept:
                c = {**c, **f.refresher.columns(n)}  # type: ignore[union-attr]
            cols.append({name: a[:n] for name, a in c.items()})
            status += f.status[:n]
            outcome += f.outcome[:n].tobytes()
            self.keys += _listing(f.engine)
            self.urls += map(f.url_of, range(n))
        self._arrays = {k: np.concatenate([c[k] for c in cols]) for k in cols[0]} if cols else {}
        self.status, self.outcome = bytes(status), bytes(outcome)

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
        e = engine_from_header(self._header, **engine_kw)
        e.reserve(max(1, self.n))
        for name, a in engine_arrays(e).items():
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
