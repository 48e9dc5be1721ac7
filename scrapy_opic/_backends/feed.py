"""Start URLs pushed into a crawl from outside it while it runs (``scrapy opic-feed``,
``redis-cli LPUSH``): a *feed* per crawl, which a running crawl takes from every second.

A seed is bytes: a URL, or a JSON object (``{"url": ..., "priority": ..., "meta": {...},
"callback": ...}``) that the scheduler turns into a request (:mod:`scrapy_opic._seeds`).

Taking is at least once, filing is once: :meth:`Feed.take` moves seeds out of the feed into a
place of this process's own, and :meth:`Feed.done` drops them there once the crawl holds their
pages durably. Seeds taken by a process that dies first go back to the feed (Redis: when its
beat has lapsed; the file: at the next take), and filing a known page again is a duplicate, so
no seed is lost and none makes a page fetched twice in one pass.

* :class:`RedisFeed`: the list ``{KEY}:start_urls`` (LPUSH pushes, the crawl takes the oldest
  first); a process's taken seeds wait in the hash ``{KEY}:start_urls:taken``, under its name.
* :class:`FileFeed`: beside the embedded state, ``<state>.start_urls`` (one seed per line),
  appended under an exclusive ``flock``; a take renames it to ``<state>.start_urls.taken``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from . import CrawlGone

#: Seeds taken at most per take (the rest at the next one, a second later).
TAKE_COUNT = 1000


class Feed(Protocol):
    """Where seeds pushed into a running crawl wait (see the module docstring)."""

    #: Where pushes go, for log lines and docs: a Redis key or a file.
    name: str
    #: Round trips to a server made (a file's feed makes none).
    round_trips: int

    def push(self, seeds: Sequence[bytes]) -> int:
        """Add ``seeds``; how many wait now (Redis) or were written (a file)."""
        ...

    def take(self, alive: Collection[str]) -> list[bytes]:
        """Seeds to file now: those this process took and did not mark :meth:`done`, those
        taken by processes not in ``alive``, then new ones (at most :data:`TAKE_COUNT`)."""
        ...

    def done(self) -> None:
        """The seeds this process took are filed and durable: forget them."""
        ...


def feed_path(state: Path | str) -> Path:
    """The feed of the embedded crawl whose state file is ``state``."""
    state = Path(state)
    return state.with_name(state.stem + ".start_urls")


def lines_of(data: bytes) -> list[bytes]:
    """The seeds of a feed file's bytes: one per non-blank line."""
    return [s for line in data.splitlines() if (s := line.strip())]


class FileFeed:
    """The feed of an embedded crawl: a file of one seed per line (see the module docstring).

    A writer takes the file's ``flock`` and checks that the path still names the file it
    opened (a take may have renamed it meanwhile); a take renames the file under the same lock
    and reads it whole. What a killed process took stays in ``.taken``, read first next time.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.taken = self.path.with_name(self.path.name + ".taken")
        self.name = str(self.path)
        self.round_trips = 0

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The feed file open for appending, locked, and still the one at :attr:`path`."""
        while True:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                with contextlib.suppress(FileNotFoundError):
                    if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                        yield fd
                        return
            finally:
                os.close(fd)  # (the lock goes with it)

    def push(self, seeds: Sequence[bytes]) -> int:
        for seed in seeds:
            if b"\n" in seed or b"\r" in seed:
                raise ValueError(f"a seed is one line: {seed[:80]!r}")
        data = b"".join(s + b"\n" for s in seeds)
        with self._locked() as fd:
            os.write(fd, data)
            os.fsync(fd)
        return len(seeds)

    def take(self, alive: Collection[str]) -> list[bytes]:
        try:
            if not os.path.exists(self.taken) and os.stat(self.path).st_size == 0:
                return []
        except FileNotFoundError:
            return []
        if not os.path.exists(self.taken):
            with self._locked():
                os.rename(self.path, self.taken)
        return lines_of(self.taken.read_bytes())

    def done(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.taken)


_TAKE = """
if redis.call('HEXISTS', KEYS[1], 'config') == 0 then return false end
local taken, mine, out = KEYS[3], ARGV[1], {}
local alive = {}
for i = 3, #ARGV do alive[ARGV[i]] = true end
local held = redis.call('HGETALL', taken)
for i = 1, #held, 2 do
  if held[i] == mine or not alive[held[i]] then
    local seeds = cmsgpack.unpack(held[i + 1])
    for j = 1, #seeds do out[#out + 1] = seeds[j] end
    if held[i] ~= mine then redis.call('HDEL', taken, held[i]) end
  end
end
for _ = 1, tonumber(ARGV[2]) do
  local seed = redis.call('RPOP', KEYS[2])
  if not seed then break end
  out[#out + 1] = seed
end
if #out > 0 then redis.call('HSET', taken, mine, cmsgpack.pack(out)) end
return out
"""


class RedisFeed:
    """The feed of a crawl in Redis (see the module docstring). ``worker``: this process's
    name among the crawl's; ``key``: the crawl's key."""

    def __init__(self, client: Any, key: str, worker: str = "") -> None:
        self.client = client
        self.key = key
        self.worker = worker
        ns = "{" + key + "}"
        self.name = ns + ":start_urls"
        self._keys = [ns + ":meta", self.name, ns + ":start_urls:taken"]
        self.round_trips = 0

    def push(self, seeds: Sequence[bytes]) -> int:
        self.round_trips += 1
        return int(self.client.lpush(self.name, *seeds)) if seeds else 0

    def take(self, alive: Collection[str]) -> list[bytes]:
        self.round_trips += 1
        args = [self.worker, TAKE_COUNT, *sorted(alive)]
        got = self.client.execute_command("EVAL", _TAKE, len(self._keys), *self._keys, *args)
        if got is None:
            raise CrawlGone(
                f"the OPIC crawl {self.key!r} is gone from Redis (the server was emptied, or "
                "restarted without persistence?): nothing of it is left"
            )
        return list(got)

    def done(self) -> None:
        self.round_trips += 1
        self.client.hdel(self._keys[2], self.worker)


__all__ = ["TAKE_COUNT", "Feed", "FileFeed", "RedisFeed", "feed_path", "lines_of"]
