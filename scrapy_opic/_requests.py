"""What the OPIC scheduler knows of a Scrapy request: the URL its page is known by, how it is
kept (:meth:`RequestCodec.pack`) and stored (:func:`encode_request`), what its outcome was
(:func:`outcome_of`), what the scheduler and the middlewares keep in its meta, and the
requests a page is fetched with later.
"""

from __future__ import annotations

import copy
import logging
import pickle
import re
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy import Request
from scrapy import exceptions as scrapy_exceptions
from scrapy.core.downloader import Downloader
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.request import request_from_dict
from twisted.internet import defer
from twisted.internet import error as twisted_error

from .opic.constants import DNS, ERROR, FORBIDDEN, IGNORED, OFFSITE, TIMEOUT

if TYPE_CHECKING:  # pragma: no cover
    from scrapy import Spider

logger = logging.getLogger("scrapy_opic._scheduler")

# Exceptions by outcome. (Scrapy 2.13+ wraps download errors in its own classes; older
# handlers and other download handlers raise Twisted's.)
_DNS_ERRORS = tuple(
    c
    for c in (
        getattr(scrapy_exceptions, "CannotResolveHostError", None),
        twisted_error.DNSLookupError,
    )
    if c is not None
)
_TIMEOUTS = tuple(
    c
    for c in (
        getattr(scrapy_exceptions, "DownloadTimeoutError", None),
        twisted_error.TimeoutError,
        twisted_error.TCPTimedOutError,
        defer.TimeoutError,
        TimeoutError,
    )
    if c is not None
)


def outcome_of(exception: BaseException) -> int:
    """The outcome code of a request that ended in ``exception``: the HTTP status of an
    ``HttpError``; ``forbidden`` (robots.txt), ``offsite`` or ``ignored`` for an
    ``IgnoreRequest`` (Scrapy gives robots.txt and offsite refusals no class of their own: their
    messages tell them apart); ``dns``, ``timeout``, else ``error``."""
    if isinstance(exception, HttpError):
        return int(exception.response.status)
    if isinstance(exception, IgnoreRequest):
        text = str(exception)
        if "robots.txt" in text:
            return FORBIDDEN
        return OFFSITE if "offsite" in text.lower() else IGNORED
    if isinstance(exception, _DNS_ERRORS):
        return DNS
    if isinstance(exception, _TIMEOUTS):
        return TIMEOUT
    return ERROR


#: What Scrapy's retry and redirect middlewares (and the scheduler, for a follow-up) put in the
#: meta of a follow-up request: it is for that one fetch, not for the page's later ones.
FOLLOW_UP_META = (
    "retry_times",
    "redirect_times",
    "redirect_ttl",
    "redirect_urls",
    "redirect_reasons",
    "opic_priority",
    "opic_dont_filter",
)


#: Meta keys of a stored request that a continuous crawl refetching by freshness keeps with it:
#: what the page's last full response showed, ``(url, ETag, Last-Modified, signature)``.
VALIDATORS_META = "opic_validators"
#: Meta of a request in flight (set by the downloader middleware): what its response showed,
#: a :class:`Seen`.
SEEN_META = "_opic_seen"


class Seen(NamedTuple):
    """What a full response of a page showed, as the downloader middleware read it; its first
    four fields are what :data:`VALIDATORS_META` keeps."""

    url: str
    etag: bytes | None
    last_modified: bytes | None
    signature: int | None
    #: Whether the content changed since the page's last full response (None: unknown).
    changed: bool | None
    #: The time a trusted Last-Modified gives (seconds since the epoch), or None.
    modified: float | None


#: Meta of a request in flight: the validator headers the downloader middleware added to it
#: (not the request's own: they never go into the request the page is refetched with).
SENT_META = "_opic_sent"


#: Meta of a request in flight whose page was found unchanged and whose visit is done: the
#: spider middleware keeps its response from the callback, the errback wrapper swallows what
#: Scrapy hands the request's errback instead (a 304's ``HttpError``, or :class:`NotModified`).
UNCHANGED_META = "_opic_unchanged"


class NotModified(IgnoreRequest):
    """A refetched page is unchanged (a 304, or a 200 with the signature of its last parsed
    visit): its visit is done, over the links of that visit; its callback is not called
    (``OPIC_UNCHANGED_CALLBACK``) and its errback is not either. (Its response was received:
    Scrapy's stats and ``CLOSESPIDER_PAGECOUNT`` count it.)"""


#: ``scheme://netloc`` at the start of a URL: no ``/``, ``?`` or ``#`` before the ``://``, the
#: network location up to the first of them after it (as ``urllib.parse.urlsplit`` reads it).
_ORIGIN = re.compile(r"[^/?#]*?://[^/?#]*")


def origin_of(url: str) -> str:
    """``scheme://netloc`` of ``url``, of which the host name is a function; ``""`` if ``url``
    does not start so (then nothing is remembered by origin)."""
    m = _ORIGIN.match(url)
    return m.group() if m is not None else ""


class SlotKeys:
    """The download slot of a request, as ``downloader.get_slot_key`` names it. When the
    downloader is Scrapy's own and its slots are per host (not per IP), the slot of a request
    with no ``download_slot`` in its meta is its host name, a function of its URL's origin: it
    is remembered by origin, so that a page's many links to a few hosts parse a few URLs, not
    one each (most links are never fetched: Scrapy would never parse theirs)."""

    #: Origins remembered at most (then forgotten all at once: a crawl of many hosts parses
    #: a URL per origin again, no more than it would without this).
    LIMIT = 4096

    def __init__(self, downloader: Any) -> None:
        self._get: Callable[[Request], str] = downloader.get_slot_key
        own = getattr(type(downloader), "get_slot_key", None) is Downloader.get_slot_key
        per_host = own and not getattr(downloader, "ip_concurrency", 0)
        self._by_origin: dict[str, str] | None = {} if per_host else None

    def __call__(self, request: Request) -> str:
        by_origin = self._by_origin
        if by_origin is None:
            return self._get(request)
        meta_slot = request.meta.get(Downloader.DOWNLOAD_SLOT)
        if meta_slot is not None:
            return meta_slot
        origin = origin_of(request.url)
        slot = by_origin.get(origin)
        if slot is None:
            slot = self._get(request)
            if origin:
                if len(by_origin) >= self.LIMIT:
                    by_origin.clear()
                by_origin[origin] = slot
        return slot


def page_url(request: Request) -> str:
    """The URL a page is known by: its request's, without a fragment (the fingerprint ignores
    it, so the first link's ``#section`` would otherwise name the page for good)."""
    url = request.url
    return url[: url.index("#")] if "#" in url else url


#: The fields of ``Request.to_dict()`` that :func:`encode_request` leaves out when they hold
#: the value a new request has, in the order of the bits of its mask (the stored format: never
#: reorder; add at the end).
REQUEST_FIELDS: tuple[tuple[str, Any], ...] = (
    ("callback", None),
    ("errback", None),
    ("headers", {}),
    ("body", b""),
    ("cookies", {}),
    ("meta", {}),
    ("encoding", "utf-8"),
    ("flags", []),
    ("cb_kwargs", {}),
    ("dont_filter", False),
    ("method", "GET"),
    ("priority", 0),
)
#: Mask bits past the fields: the other keys of the dict follow (a Request subclass's
#: ``_class`` and attributes), the URL follows.
_REST, _URL = 14, 15
#: The first byte of a request stored by :func:`encode_request`.
REQUEST_FORMAT = 1


def refused_weight(
    refused: list[tuple[Request, float]] | None, key: Callable[[Request], Any]
) -> float:
    """The total weight of the links a page will not follow (their share goes to the virtual
    page): each page once, with the largest of its links' weights (0 for none)."""
    if not refused:
        return 0.0
    most: dict[Any, float] = {}
    for request, weight in refused:
        k = key(request)
        most[k] = max(weight, most.get(k, -1.0))
    return float(sum(most.values()))


def _pickle(values: tuple) -> bytes:
    # Without the protocol header and the first frame's (11 bytes that a small pickle does not
    # need: both are optional for the unpickler).
    data = pickle.dumps(values, protocol=4)
    return data[11:] if data[2] == pickle.FRAME[0] else data[2:]


def encode_request(request: Request, spider: Spider | None = None, url: str | None = None) -> bytes:
    """``request.to_dict()`` as bytes: :data:`REQUEST_FORMAT`, a 16-bit mask of the fields of
    :data:`REQUEST_FIELDS` that differ from their default (by type and value) and of the two
    extra parts (the dict's other keys, the URL), then the pickle of those values in mask order.
    The URL is left out when it is ``url`` (the URL the frontier hands back with the request:
    :attr:`Lease.url`). :func:`decode_request` rebuilds the request from the same dict.
    Raises what ``to_dict`` or pickle raise for a request that cannot be serialized."""
    return _stored(request.to_dict(spider=spider), url)


def _stored(d: dict[str, Any], url: str | None) -> bytes:
    """The bytes of :func:`encode_request` for ``d``, a request's ``to_dict()`` (taken apart)."""
    own_url = d.pop("url")
    mask = 0
    values = []
    for bit, (name, default) in enumerate(REQUEST_FIELDS):
        if name not in d:
            continue
        value = d.pop(name)
        if type(value) is not type(default) or value != default:
            mask |= 1 << bit
            values.append(value)
    if d:
        mask |= 1 << _REST
        values.append(d)
    if own_url != url:
        mask |= 1 << _URL
        values.append(own_url)
    body = _pickle(tuple(values)) if values else b""
    return bytes([REQUEST_FORMAT]) + mask.to_bytes(2, "little") + body


#: Value types a packed request holds as they are (with tuples of them): immutable, and
#: holding no other object, so that Python's garbage collector does not track them.
_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})


def _atomic(value: Any) -> bool:
    kind = type(value)
    return kind in _ATOMS or (kind is tuple and all(type(v) in _ATOMS for v in value))


def _flat(d: Any) -> tuple | None:
    """A meta or ``cb_kwargs`` dict as the flat tuple ``(key, value, key, value...)``
    (``None`` if empty), or ``()`` if a value is not atomic (the request cannot be packed).
    Flat, not of pairs: the collector untracks a tuple once every tuple in it is untracked,
    a level of nesting per collection."""
    if not d:
        return None
    flat = []
    for key, value in d.items():
        if not _atomic(value):
            return ()
        flat.append(key)
        flat.append(value)
    return tuple(flat)


def _unflat(flat: tuple | None) -> dict[Any, Any] | None:
    return dict(zip(flat[::2], flat[1::2])) if flat else None


def decode_request(data: bytes, url: str | None = None, spider: Spider | None = None) -> Request:
    """The request :func:`encode_request` stored (``url``: the one it left out);
    :class:`ValueError` for bytes it did not make."""
    if data[:1] != bytes([REQUEST_FORMAT]):
        raise ValueError(f"not a stored request (format byte {data[:1]!r})")
    mask = int.from_bytes(data[1:3], "little")
    values = iter(pickle.loads(data[3:]) if len(data) > 3 else ())
    d: dict[str, Any] = {}
    for bit, (name, default) in enumerate(REQUEST_FIELDS):
        d[name] = next(values) if mask >> bit & 1 else copy.copy(default)
    if mask >> _REST & 1:
        d.update(next(values))
    d["url"] = next(values) if mask >> _URL & 1 else url
    if d["url"] is None:
        raise ValueError("a request stored without its URL, and none given")
    return request_from_dict(d, spider=spider)


def later_request(request: Request, priority: int, dont_filter: bool) -> Request:
    """The request to fetch a page with after ``request``, a follow-up (a retry, a redirect
    target): the same request without what Scrapy's retry and redirect middlewares added for
    one fetch (their meta counters, the priority adjustment, a retry's ``dont_filter``). Else a
    page retried once would keep its ``retry_times`` for good (fewer retries, then none, at each
    later fetch) and a redirect target its ``redirect_urls`` (a redirect its spider would see at
    every refetch)."""
    meta = {k: v for k, v in request.meta.items() if k not in FOLLOW_UP_META}
    return request.replace(priority=priority, dont_filter=dont_filter, meta=meta)


def with_validators(request: Request, later: Request | None, seen: Seen) -> Request | None:
    """The request to refetch ``request``'s page with, carrying what its last full response
    showed (``seen``: see :data:`SEEN_META`); ``later`` (the one it would be refetched with
    otherwise: ``None`` for the stored one) if that did not change."""
    shown = tuple(seen[:4])  # (url, ETag, Last-Modified, signature)
    base = later if later is not None else request
    if base.meta.get(VALIDATORS_META) == shown and SENT_META not in base.meta:
        return later
    meta = {
        k: v for k, v in base.meta.items() if not k.startswith("_opic") and k != "download_latency"
    }
    meta[VALIDATORS_META] = shown
    headers = base.headers.copy()
    for name in base.meta.get(SENT_META, ()):
        headers.pop(name, None)
    stored = base.replace(meta=meta, headers=headers)
    detach(stored)  # (no lease in its meta, its own errback)
    return stored


def detach(request: Request) -> None:
    """Take out what the scheduler put into a request it handed out (its lease in meta, the
    errback wrapper), so that a copy of it (a retry, a redirect, a callback's
    ``response.request.replace(...)``) is filed as a request of its own: no request in a queue
    carries a lease, and the wrapper never reaches a serializer."""
    if isinstance(request.errback, OutcomeErrback):
        request.errback = request.errback.original
    meta = request.meta
    if "opic_id" in meta:
        del meta["opic_id"]
        meta.pop("opic_lease", None)


class OutcomeErrback:
    """The errback of a request handed out by the scheduler: reports a failure that no
    middleware reported (an ``IgnoreRequest`` raised from a downloader middleware's
    ``process_response``, such as "max redirections reached", reaches only the request's
    errback), then behaves exactly as the request's own errback would (or as no errback: the
    failure goes on). Without it the page would stay in flight: its cash stuck and its
    download slot counted busy for good."""

    def __init__(self, scheduler: Any, original: Any) -> None:
        # A weak reference: a request must not keep its scheduler (and, through it, every
        # request of the crawl) alive in a reference cycle that only the cyclic GC can free.
        self.scheduler = weakref.ref(scheduler)
        self.original = original

    def __call__(self, failure: Any) -> Any:
        request = getattr(failure, "request", None)
        if request is not None and request.meta.get(UNCHANGED_META):
            return None  # (an unchanged page: its visit is done, nothing failed)
        scheduler = self.scheduler()
        if request is not None and scheduler is not None:
            scheduler.settle_failure(request, failure.value)
        return failure if self.original is None else self.original(failure)


def _flat_headers(headers: Any) -> tuple | None:
    """A request's headers as a flat tuple ``(name, value, name, value...)``, a value a tuple
    only for a header with several (see :func:`_flat`); ``None`` if it has none."""
    if not headers:
        return None
    flat: list[Any] = []
    for name, values in headers.items():
        flat.append(name)
        flat.append(values[0] if len(values) == 1 else tuple(values))
    return tuple(flat)


class RequestCodec:
    """A spider's requests as a store keeps them (``pack``) or stores and shares them
    (``encode``), and back (``decode``).

    A pending request of the crawl's own memory is *packed*: a request of Scrapy's own class
    whose callback and errback are methods of the spider (or none), with no cookies, and
    whose meta and ``cb_kwargs`` hold only strings, bytes, numbers, booleans, ``None`` and
    tuples of those, is kept as a plain tuple of those values, rebuilt into a new request
    when its page is popped (as a JOBDIR rebuilds every request). Python's garbage collector
    tracks none of it: a crawl that holds its frontier's requests as objects spends much of its
    CPU time in full collections over them. Any other request is kept as it is.

    A request that cannot be serialized (a lambda callback, a lock in its meta) is said once
    (a warning) and counted (``scheduler/unserializable`` in ``counts``); with a store of one
    process it stays in this process's memory (:attr:`memory_only`, by page key: Scrapy counts
    its pushes and pops as memory ones), with a shared one the crawl fetches it here."""

    #: Callback functions whose method names are remembered at most (then forgotten at once).
    NAMES = 256

    def __init__(self, spider: Any, counts: Any, fingerprint: Any, shared: bool) -> None:
        self.spider = spider
        self.counts = counts
        self.fingerprint = fingerprint
        self.shared = shared
        self.memory_only: set[Any] = set()
        #: The last request :meth:`encode` refused (it waits in memory).
        self.refused: Request | None = None
        self._warned = False
        self._names: dict[Any, str | None] = {}  # a spider method's function -> its name

    def _name(self, method: Any) -> str | None:
        """The name of ``method`` (a callback or errback) as the spider's attribute: ``""`` for
        none, ``None`` if it is not a method of the spider under its own name."""
        if method is None:
            return ""
        spider = self.spider
        if spider is None or getattr(method, "__self__", None) is not spider:
            return None
        func: Any = method.__func__
        try:
            return self._names[func]
        except KeyError:
            own: str = func.__name__
            got = getattr(spider, own, None)
            name = own if getattr(got, "__func__", None) is func else None
            if len(self._names) >= self.NAMES:
                self._names.clear()
            self._names[func] = name
            return name

    def pack(self, request: Request) -> Any:
        """The payload a store keeps for ``request``: packed if it can be (see the class),
        else the request itself. :meth:`decode` and :meth:`encode` take either."""
        if type(request) is not Request or request.cookies:
            return request
        callback = self._name(request.callback)
        errback = self._name(request.errback)
        meta = _flat(request.meta)
        cb_kwargs = _flat(request.cb_kwargs)
        if callback is None or errback is None or meta == () or cb_kwargs == ():
            return request
        flags = request.flags
        return (
            request.url,
            callback,
            errback,
            request.method,
            _flat_headers(request.headers),
            request.body,
            meta,
            request.encoding,
            request.priority,
            request.dont_filter,
            tuple(flags) if flags else None,
            cb_kwargs,
        )

    def _unpack(self, packed: tuple) -> Request:
        """The request :meth:`pack` packed, rebuilt (raises ``AttributeError`` if the spider has
        lost its callback)."""
        url, callback, errback, method, headers, body, meta, encoding = packed[:8]
        priority, dont_filter, flags, cb_kwargs = packed[8:]
        spider = self.spider
        return Request(
            url,
            callback=getattr(spider, callback) if callback else None,
            method=method,
            headers=_unflat(headers),
            body=body,
            meta=_unflat(meta),
            encoding=encoding,
            priority=priority,
            dont_filter=dont_filter,
            errback=getattr(spider, errback) if errback else None,
            flags=list(flags) if flags else None,
            cb_kwargs=_unflat(cb_kwargs),
        )

    @staticmethod
    def _packed_dict(packed: tuple) -> dict[str, Any]:
        """What ``to_dict()`` gives for the request :meth:`pack` packed."""
        url, callback, errback, method, headers, body, meta, encoding = packed[:8]
        priority, dont_filter, flags, cb_kwargs = packed[8:]
        return {
            "url": url,
            "callback": callback or None,
            "errback": errback or None,
            "headers": {
                k: [v] if type(v) is bytes else list(v) for k, v in (_unflat(headers) or {}).items()
            },
            "body": body,
            "cookies": {},
            "meta": _unflat(meta) or {},
            "encoding": encoding,
            "flags": list(flags) if flags else [],
            "cb_kwargs": _unflat(cb_kwargs) or {},
            "dont_filter": dont_filter,
            "method": method,
            "priority": priority,
        }

    def encode(self, request: Any, url: str | None = None) -> bytes | None:
        """The request, packed (:meth:`pack`) or not, as bytes (without its URL if it is
        ``url``, which the store hands back with it), or ``None`` if it cannot be serialized."""
        if type(request) is tuple:  # (packed: its values pickle)
            if self.memory_only:  # (a page that waited in memory may wait on disk again)
                self.memory_only.discard(self.fingerprint(self._unpack(request)))
            return _stored(self._packed_dict(request), url)
        try:
            data = encode_request(request, self.spider, url)
        except (ValueError, TypeError, AttributeError, pickle.PicklingError) as exc:
            # to_dict refuses a callback that is not a spider method (ValueError); pickle
            # refuses a lock or a lambda in meta or cb_kwargs (TypeError, PicklingError...).
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Unable to serialize request %s (%s): it stays in this process's memory "
                    "(not in a JOBDIR state, not shared through Redis). (This message is logged "
                    "once.)",
                    request,
                    exc,
                )
            self.counts["scheduler/unserializable"] += 1  # (Scrapy's own stat for it)
            if not self.shared:  # (a shared crawl answers LOCAL for it)
                self.refused = request
                self.memory_only.add(self.fingerprint(request))
            return None
        if self.memory_only:  # (a page that waited in memory may wait on disk again)
            self.memory_only.discard(self.fingerprint(request))
        return data

    def decode(self, payload: Any, url: str | None, copy: bool) -> Request | None:
        """A lease's payload as a request: as stored (a copy, with ``copy``: the store keeps
        it for the page's next fetch), or rebuilt from its packed values or its bytes (with
        ``url``, the lease's, if they left it out), or ``None``, with an error, if this spider's
        code cannot rebuild it (written by other spider code)."""
        packed = type(payload) is tuple
        if not packed and not isinstance(payload, (bytes, dict)):
            return payload.replace() if copy else payload
        try:
            if packed:
                return self._unpack(payload)
            if isinstance(payload, bytes):
                return decode_request(payload, url, self.spider)
            return request_from_dict(payload, spider=self.spider)
        except Exception as exc:
            logger.error("OPIC: cannot rebuild a stored request (%s): its page is given up", exc)
            return None

    def waits_in(self, request: Request) -> str | None:
        """``"memory"`` if ``request``, just filed, could not be serialized (it waits in this
        process's memory), else ``None`` (it waits where the crawl's requests do)."""
        if self.refused is request:
            self.refused = None
            return "memory"
        return None
