"""Mutation check of the crawl over partitions: each edit below breaks one rule of the
distributed path (cash in transit, the once-only apply, the takeover's replay, the virtual
page's parts, the durability of what a message leaves from, lease timing, pages in doubt,
ownership changes, the routing of a host's pages, the seeds pushed into a crawl, the slots'
turns and the votes of the web order) and must make a test fail.

    python tests/mutation_check.py [--redis-url URL] [--only TEXT]

Each mutant runs in a copy of the repository (the working tree is never touched) with the
tests that guard that path. Exit code 0 when every mutant was caught.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPIC = "scrapy_opic/opic/"
PART, MSG, JOURNAL = OPIC + "partition.py", OPIC + "messages.py", OPIC + "journal.py"
POOLF, FLEET, ENGINE, ROUTING = (
    OPIC + "pool.py",
    OPIC + "fleet.py",
    OPIC + "engine.py",
    (OPIC + "routing.py"),
)
REDIS, CRAWL, HELD, FEED = (
    "scrapy_opic/_backends/redis.py",
    "scrapy_opic/_backends/crawl.py",
    "scrapy_opic/_backends/held.py",
    "scrapy_opic/_backends/feed.py",
)
HEADS, SELECTION = OPIC + "heads.py", OPIC + "selection.py"
TESTS = ["tests/test_partition.py", "tests/test_redis.py"]

#: (what it does, [(file, old text, new text), ...], the tests that guard it: TESTS if None)
MUTANTS: list[tuple[str, list[tuple[str, str, str]], list[str] | None]] = [
    (
        "an unchanged visit pays nothing to its kept links into other partitions",
        [(PART, "        self._transfer(remote, got[1])", "        self._transfer(remote, [])")],
        None,
    ),
    (
        "a relay visit pays its kept links into other partitions to its own pages",
        [
            (
                PART,
                "self._transfer(remote, self.frontier.relay(j, outside))",
                "self._transfer(remote, self.frontier.relay(j, []))",
            )
        ],
        None,
    ),
    (
        "a duplicate message applied again",
        [
            (
                MSG,
                "        if m.seq <= done:\n            return []",
                "        if False:\n            return []",
            )
        ],
        None,
    ),
    (
        "a message ahead of a gap applied at once",
        [(MSG, "        if m.seq > done + 1:", "        if False:")],
        None,
    ),
    (
        "a transfer carries half the cash it took",
        [
            (
                PART,
                "Payment(r.key, r.url, share, entry)",
                "Payment(r.key, r.url, share._replace(cash=share.cash / 2), entry)",
            )
        ],
        None,
    ),
    (
        "a redirect to another partition sends no cash",
        [
            (
                PART,
                "self._transfer([target], [moved], entry)",
                "self._transfer([target], [moved._replace(cash=0.0)], entry)",
            )
        ],
        None,
    ),
    (
        "the pool pays the shares back to their source too",
        [
            (
                POOLF,
                "{k: (sum_a - x, sum_u - y) for k, (x, y) in sorted(own.items())}",
                "{k: (sum_a, sum_u) for k, (x, y) in sorted(own.items())}",
            )
        ],
        None,
    ),
    (
        "a report forgets the virtual cash left for the pool",
        [
            (
                PART,
                "self._send(Report, POOL, to_all, to_unfetched, credit, clock, figures)",
                "self._send(Report, POOL, 0.0, 0.0, credit, clock, figures)",
            )
        ],
        None,
    ),
    (
        "a partition pays all of its virtual cash to its own pages",
        [
            (
                ENGINE,
                "        if others_live:\n            # (The shares",
                "        if False:\n            # (The shares",
            )
        ],
        None,
    ),
    (
        "a replay skips the payouts the journal recorded",
        [(PART, "PaidOut: lambda p, r: p.pay_out(r.others),", "PaidOut: lambda p, r: None,")],
        None,
    ),
    (
        "a replay forgets a message applied",
        [(PART, "    part._apply(rec.message, rec.at)\n", "")],
        None,
    ),
    (
        "a takeover does not send again what was not known delivered",
        [
            (
                JOURNAL,
                "return sorted(self.box.unconfirmed.values(), key=lambda m: (m.dst, m.seq))",
                "return []",
            )
        ],
        None,
    ),
    (
        "a message leaves before the record that made it is durable",
        [
            (
                JOURNAL,
                "ready = [m for m, at in self.outbox if at <= self.durable]",
                "ready = [m for m, at in self.outbox]",
            )
        ],
        None,
    ),
    (
        "a message between two members of a process applied before its record is durable",
        [
            (
                FLEET,
                "or not (self.atomic or at <= member.durable)",
                "or not (self.atomic or at <= member.records)",
            )
        ],
        None,
    ),
    (
        "a message applied here confirmed before its application is durable",
        [
            (
                FLEET,
                "            if d.durable >= at:\n                s.confirm(dst, seq)",
                "            if True:\n                s.confirm(dst, seq)",
            )
        ],
        None,
    ),
    (
        "an atomic flush that found a journal short confirms its messages",
        [
            (
                REDIS,
                "(out.delivered if status == 0 else out.unsent).extend(sends)",
                "(out.delivered if status in (0, -2) else out.unsent).extend(sends)",
            )
        ],
        None,
    ),
    (
        "a process that lost one member keeps the others, and what it applied from it",
        [
            (
                CRAWL,
                "            lost = list(self.held)\n            self._resend = []",
                "            self._resend = []",
            )
        ],
        None,
    ),
    (
        "the endowment given to every partition made",
        [
            (
                REDIS,
                "first = endowed == str(k).encode()",
                "first = True",
            )
        ],
        None,
    ),
    (
        "a write of a partition whose lease is lost is taken as done",
        [
            (
                HELD,
                "        if outcome.status == LOST:  # another process holds the lease: this one "
                "stalled past it\n            return False",
                "        if outcome.status == LOST:  # another process holds the lease: this one "
                "stalled past it\n            return True",
            )
        ],
        None,
    ),
    (
        "an inbox entry deleted while a message of it waits for an earlier one",
        [
            (
                HELD,
                "if any(self.member.box.waits(m) for m in messages):",
                "if False:",
            )
        ],
        None,
    ),
    # -- leases: timing, expiry, a stalled owner ------------------------------------------------
    (
        "leases renewed too late: they lapse while their owner runs",
        [(HELD, "self.renew_at = at + lease / 3", "self.renew_at = at + lease * 3")],
        None,
    ),
    (
        "a request goes out whatever is left of its partition's lease",
        [(CRAWL, "time.monotonic() + self.quiet < held.valid_until", "True")],
        None,
    ),
    (
        "a partition whose lease is about to lapse still gives pages",
        [(CRAWL, "if soon >= h.valid_until}", "if False}")],
        None,
    ),
    (
        "a member claimed while another process holds its lease",
        [
            (
                REDIS,
                "redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
                "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])",
            )
        ],
        None,
    ),
    (
        "a lease that went to another process renewed all the same",
        [
            (
                REDIS,
                '_RENEW = """\nif redis.call(\'GET\', KEYS[1]) ~= ARGV[1] then return 0 end\n',
                '_RENEW = """\n',
            )
        ],
        None,
    ),
    (
        "a request goes out before the record of its lease is durable",
        [(FLEET, "return n is None or self.parts[k].durable >= n or None", "return True")],
        None,
    ),
    (
        "a page a stalled process sent is not held in doubt by the partition's next owner",
        [(PART, "            self.doubt[rec.key] = lease\n", "            fr.release([lease])\n")],
        None,
    ),
    (
        "a checkpoint forgets the pages in doubt",
        [(PART, "if self.records_leases\n", "if False\n")],
        None,
    ),
    (
        "the outcomes a stalled process had not written are not sent to its partitions",
        [(CRAWL, "            if late:\n", "            if False:\n")],
        None,
    ),
    (
        "a page in doubt waits for ever",
        [(CRAWL, "if due and (n := self.fleet.end_doubts(due)):", "if False:")],
        None,
    ),
    # -- ownership changes ----------------------------------------------------------------------
    (
        "a partition made mid-crawl gets no back pay of the teleport credit",
        [(CRAWL, "member.start(self.fleet.teleport())", "member.start(0.0)")],
        None,
    ),
    (
        "a partition taken over skips its journal",
        [
            (
                "scrapy_opic/_backends/redis_state.py",
                "        for blob in batches:\n            part.replay(unpack(blob))\n",
                "",
            )
        ],
        None,
    ),
    (
        "a new owner's replay skips a liar's pages forgetting what the lie taught",
        [
            (
                PART,
                "Forgot: lambda p, r: p.forget_lies(",
                "Forgot: lambda p, r: 0 and p.forget_lies(",
            )
        ],
        ["tests/test_partition.py"],
    ),
    # -- one host, one partition ----------------------------------------------------------------
    (
        "a host's partition depends on the case it is written in",
        [(ROUTING, 'host.partition(":")[0].lower()', 'host.partition(":")[0]')],
        None,
    ),
    (
        "a host's partition depends on its port",
        [(ROUTING, 'host.partition(":")[0].lower()', "host.lower()")],
        None,
    ),
    (
        "a host's partition depends on the URL's user",
        [(ROUTING, 'host = netloc.rpartition("@")[2]', "host = netloc")],
        None,
    ),
    (
        "a process takes the seeds another, alive, took and has not filed yet",
        [(FEED, "if held[i] == mine or not alive[held[i]] then", "if true then")],
        ["tests/test_feed.py"],
    ),
    (
        "a process forgets the seeds it took and did not mark filed",
        [(FEED, "if held[i] == mine or not alive[held[i]] then", "if not alive[held[i]] then")],
        ["tests/test_feed.py"],
    ),
    (
        "a file feed's take reads new seeds while those it took are not filed",
        [(FEED, "        if not os.path.exists(self.taken):\n", "        if True:\n")],
        ["tests/test_feed.py"],
    ),
    (
        "the crawl's pop over partitions leaves the slots' turns out (the web order)",
        [(HEADS, "got.priority, -got.turns, got.votes", "got.priority, 0.0, got.votes")],
        ["tests/test_frontier.py"],
    ),
    (
        "a lease of a page never fetched does not count as its slot's turn",
        [(SELECTION, "            self.turns[code] += 1.0", "            self.turns[code] += 0.0")],
        ["tests/test_frontier.py", "tests/test_selection.py"],
    ),
    (
        "a continuous crawl's discovery pops leave the slots' turns out",
        [
            (
                SELECTION,
                "heads[2] if unfetched and self._discovery_heads else",
                "heads[1] if True else",
            )
        ],
        ["tests/test_frontier.py", "tests/test_selection.py"],
    ),
    (
        "a continuous crawl's other pops take turns too (first fetches no longer weighed by cash)",
        [(SELECTION, "self._every_pop = web and not continuous", "self._every_pop = web")],
        ["tests/test_selection.py"],
    ),
    (
        "votes to a page of another partition are lost on the way",
        [(PART, "e.receive(target, p.share)", "e.receive(target, p.share._replace(votes=0.0))")],
        None,
    ),
    (
        "the crawl's pop over partitions ranks first fetches by cash alone (not votes)",
        [(HEADS, "-got.turns, got.votes, got.cash", "-got.turns, 0.0, got.cash")],
        ["tests/test_frontier.py", "tests/test_scheduler.py"],
    ),
    (
        "a seed is one link deep",
        [(ENGINE, "self._vote(i, SEED_VOTES, 0)", "self._vote(i, SEED_VOTES, 1)")],
        ["tests/test_engine.py"],
    ),
    (
        "start requests are no seeds",
        [
            (
                "scrapy_opic/_scheduler.py",
                'seed = bool(request.meta.get("is_start_request"))',
                "seed = False",
            )
        ],
        ["tests/test_scheduler.py"],
    ),
]


def run_mutant(name: str, edits: list[tuple[str, str, str]], tests: list[str], env: dict) -> bool:
    """True if the tests caught the mutant (failed)."""
    with tempfile.TemporaryDirectory(prefix="opic-mutant-") as tmp:
        copy = Path(tmp) / "repo"
        # (Not the benchmarks' downloads: a documentation package's links point outside.)
        skip = shutil.ignore_patterns(".venv", ".git", "*.sqlite", ".cache", "build", "_build")
        shutil.copytree(ROOT, copy, ignore=skip)
        for path, old, new in edits:
            target = copy / path
            text = target.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"mutant {name!r}: the text to replace is not in {path} once")
            target.write_text(text.replace(old, new))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
            cwd=copy,
            env={**env, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
        )
        return done.returncode != 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--redis-url", default=os.environ.get("OPIC_TEST_REDIS_URL"))
    p.add_argument("--only", help="run the mutants whose description contains this")
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.redis_url:
        env["OPIC_TEST_REDIS_URL"] = args.redis_url
    chosen = [m for m in MUTANTS if not args.only or args.only in m[0]]
    missed = []
    for name, edits, tests in chosen:
        caught = run_mutant(name, edits, tests or TESTS, env)
        print(f"{'caught' if caught else 'MISSED'}: {name}", flush=True)
        if not caught:
            missed.append(name)
    print(f"{len(chosen) - len(missed)} of {len(chosen)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
