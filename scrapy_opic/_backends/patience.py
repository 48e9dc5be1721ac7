"""How a crawl waits for a store that does not answer (a Redis restart, a failover).

The first failure to answer is one warning; the crawl then waits (it pops nothing: what it
would fetch could be lost with its leases) and tries again at each upkeep; after
:attr:`Patience.seconds` of silence it stops, with one error line (:class:`StoreError`). The
first round trip answered ends the wait.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from . import StoreError, masked_url
from .store import Store

logger = logging.getLogger(__name__)

#: Seconds a crawl waits for a store that does not answer before it stops.
PATIENCE = 300.0


class Patience:
    """The wait for ``store`` (see the module docstring)."""

    def __init__(self, store: Store, seconds: float = PATIENCE) -> None:
        self.store = store
        self.seconds = seconds
        #: When the store stopped answering (monotonic time), or None while it answers.
        self.down_since: float | None = None

    @property
    def waiting(self) -> bool:
        return self.down_since is not None

    @contextlib.contextmanager
    def answered(self) -> Iterator[None]:
        """Calls to the store that may not answer: a failure to answer starts or continues the
        wait (see the module docstring); a failure of another kind is raised as it is."""
        store = self.store
        trips = store.round_trips
        try:
            yield
        except store.unanswered as exc:
            now = time.monotonic()
            why = " ".join(str(exc).split())[:200] or type(exc).__name__
            where = masked_url(store.location or "the store")
            if self.down_since is None:
                self.down_since = now
                logger.warning(
                    "OPIC: %s does not answer (%s): this process waits for it (up to %.0f s)",
                    where,
                    why,
                    self.seconds,
                )
            elif now - self.down_since > self.seconds:
                raise StoreError(
                    f"{where} has not answered for {now - self.down_since:.0f} s ({why})"
                ) from None
        else:
            # (Back once a round trip was answered: a call that needed none proves nothing.)
            if self.down_since is not None and store.round_trips > trips:
                logger.info(
                    "OPIC: the store answers again, after %.1f s",
                    time.monotonic() - self.down_since,
                )
                self.down_since = None


__all__ = ["PATIENCE", "Patience"]
