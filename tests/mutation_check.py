"""Mutation check of the crawl over partitions: each edit below breaks one rule of the
distributed path (cash in transit, the once-only apply, the takeover's replay, the virtual
page's parts, the durability of what a message leaves from) and must make a test fail.

    python tests/mutation_check.py [--redis-url URL]

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
PART = "scrapy_opic/opic/partition.py"
ENGINE = "scrapy_opic/opic/engine.py"
REDIS = "scrapy_opic/_backends/redis.py"
TESTS = ["tests/test_partition.py", "tests/test_redis.py"]

#: (what it does, file, old text, new text)
MUTANTS = [
    (
        "an unchanged visit pays nothing to its kept links into other partitions",
        PART,
        "        self._transfers(items, got[1])",
        "        self._transfers(items, [])",
    ),
    (
        "a settle visit pays its kept links into other partitions to its own pages",
        PART,
        "        self._transfers(items, self.frontier.settle(j, outside))",
        "        self._transfers(items, self.frontier.settle(j, []))",
    ),
    (
        "a duplicate message applied again",
        PART,
        "        if m.seq <= done:\n            return []",
        "        if False:\n            return []",
    ),
    (
        "a message ahead of a gap applied at once",
        PART,
        "        if m.seq > done + 1:",
        "        if False:",
    ),
    (
        "a transfer carries half the cash it took",
        PART,
        "            by_dst.setdefault(k, []).append((key, url, cash, credit, data, priority",
        "            by_dst.setdefault(k, []).append((key, url, cash / 2, credit, data, priority",
    ),
    (
        "a redirect to another partition sends no cash",
        PART,
        "            item = (e.key, e.url, moved[0], moved[1], e.payload",
        "            item = (e.key, e.url, 0.0, moved[1], e.payload",
    ),
    (
        "the pool pays the shares back to their source too",
        PART,
        "            x, y = own.get(k, (0.0, 0.0))",
        "            x, y = 0.0, 0.0",
    ),
    (
        "a report forgets the virtual cash left for the pool",
        PART,
        '        m = self._send(POOL, "r", (*cash, dg, figures))',
        '        m = self._send(POOL, "r", (0.0, 0.0, cash[2], dg, figures))',
    ),
    (
        "a partition pays all of its virtual cash to its own pages",
        ENGINE,
        "        if others_live:\n            # (The shares",
        "        if False:\n            # (The shares",
    ),
    (
        "a replay skips the payouts the journal recorded",
        PART,
        '        elif op == "o":\n            self.pay_out(rec[1])',
        '        elif op == "o":\n            pass',
    ),
    (
        "a replay forgets a message applied",
        PART,
        "            self.box.accept(m)  # (in order in the journal: never a duplicate or early)\n"
        "            self._apply(m, rec[1])",
        "            self.box.accept(m)  # (in order in the journal: never a duplicate or early)",
    ),
    (
        "a takeover does not send again what was not known delivered",
        PART,
        "        return sorted(self.box.unconfirmed.values(), key=lambda m: (m.dst, m.seq))",
        "        return []",
    ),
    (
        "a message leaves before the record that made it is durable",
        PART,
        "        ready = [m for m, at in self.outbox if at <= self.durable]",
        "        ready = [m for m, at in self.outbox]",
    ),
    (
        "a message between two members of a process applied before its record is durable",
        PART,
        "                        or not (self.atomic or at <= member.durable)",
        "                        or not (self.atomic or at <= member.records)",
    ),
    (
        "a message applied here confirmed before its application is durable",
        PART,
        "            if d.durable >= at:\n                s.confirm(dst, seq)",
        "            if True:\n                s.confirm(dst, seq)",
    ),
    (
        "an atomic flush that found a journal short confirms its messages",
        REDIS,
        "            if isinstance(got, Exception) or int(got[0]) != 0:\n"
        "                self._resend.extend(messages)",
        "            if isinstance(got, Exception):\n                self._resend.extend(messages)",
    ),
    (
        "a process that lost one member keeps the others, and what it applied from it",
        REDIS,
        "                return list(self.held)",
        "                return [k for k in self.held if self.client.get(self._k(k, 'lease'))"
        " != self.held[k].token.encode()]",
    ),
    (
        "the endowment given to every partition made",
        REDIS,
        "        if int(endowed) == k:\n            part.endow()",
        "        if True:\n            part.endow()",
    ),
    (
        "a write of a partition whose lease is lost is taken as done",
        REDIS,
        "        if got == -1:  # another process holds the lease: this one stalled past it\n"
        "            return False",
        "        if got == -1:  # another process holds the lease: this one stalled past it\n"
        "            got = held.log",
    ),
    (
        "inbox entries deleted before what applied them is written",
        REDIS,
        "                else:\n                    held.consumed.append(entry_id)",
        "                else:\n                    self.client.xdel(self._k(k, 'in'), entry_id)",
    ),
]


def run_mutant(name: str, path: str, old: str, new: str, env: dict) -> bool:
    """True if the tests caught the mutant (failed)."""
    with tempfile.TemporaryDirectory(prefix="opic-mutant-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "*.sqlite"))
        target = copy / path
        text = target.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"mutant {name!r}: the text to replace is not in {path} once")
        target.write_text(text.replace(old, new))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=copy,
            env={**env, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
        )
        return done.returncode != 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--redis-url", default=os.environ.get("OPIC_TEST_REDIS_URL"))
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.redis_url:
        env["OPIC_TEST_REDIS_URL"] = args.redis_url
    missed = []
    for name, path, old, new in MUTANTS:
        caught = run_mutant(name, path, old, new, env)
        print(f"{'caught' if caught else 'MISSED'}: {name}", flush=True)
        if not caught:
            missed.append(name)
    print(f"{len(MUTANTS) - len(missed)} of {len(MUTANTS)} mutants caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
