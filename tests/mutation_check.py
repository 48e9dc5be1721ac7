"""Mutation check of the differential test: each edit below changes the Redis engine (the Lua
script, or the constants generated into it) and must make ``tests/test_differential.py`` fail.

    python tests/mutation_check.py [--redis-url URL]

Each mutant runs in a copy of the repository (the working tree is never touched). Exit code 0
when every mutant was caught.
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
LUA = "scrapy_opic/backends/opic.lua"
GEN = "scrapy_opic/backends/redis.py"

#: (what it does, file, old text, new text). The first three are the edits the architecture
#: review made to opic.lua that no test caught then.
MUTANTS = [
    (
        "estimator ids swapped (lemma <-> regression) in the script's table",
        GEN,
        'f"local ESTIMATORS = {table(ESTIMATORS)}",',
        'f"local ESTIMATORS = {table((ESTIMATORS[0], ESTIMATORS[3], ESTIMATORS[2], '
        'ESTIMATORS[1]))}",',
    ),
    (
        "blend weights changed (0.6 / 0.4)",
        LUA,
        "return BLEND_LEMMA * x + (1.0 - BLEND_LEMMA) * y",
        "return 0.6 * x + 0.4 * y",
    ),
    (
        "cash-at-visit average scaled (x2)",
        LUA,
        "g.ema = g.ema + w * (c * g.n - g.ema)",
        "g.ema = g.ema + w * (2 * c * g.n - g.ema)",
    ),
    (
        "paper and lemma estimates swapped in importance_of",
        LUA,
        "if estimator == 'paper' then",
        "if estimator == 'lemma' then",
    ),
    (
        "payout to unfetched pages counted in the all-pages accumulator",
        LUA,
        "g.acca = g.acca + (v - to_unf) / g.n",
        "g.acca = g.acca + v / g.n",
    ),
    (
        "self-links paid",
        LUA,
        "if l.fp ~= fp then  -- a self-link is not an endorsement",
        "if true then",
    ),
    (
        "boosts not capped by the virtual page's cash",
        LUA,
        "local scale = math.min(1.0, g.vcash / want)",
        "local scale = 1.0",
    ),
    (
        "interpolation outside the window",
        LUA,
        "    p.h = c * T / dt",
        "    p.h = c",
    ),
    (
        "the learned default history decays faster",
        LUA,
        "g.rate = g.rate + (1.0 - RATE_DECAY) * (rate - g.rate)",
        "g.rate = g.rate + 0.5 * (rate - g.rate)",
    ),
    (
        "the regression's moments miss the unfetched pages' payouts",
        LUA,
        "      p.b = p.b + g.accbu",
        "      p.b = p.b",
    ),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("OPIC_TEST_REDIS_URL"))
    args = ap.parse_args(argv)
    env = dict(os.environ)
    if args.redis_url:
        env["OPIC_TEST_REDIS_URL"] = args.redis_url
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    survivors = 0
    # The control: the unmutated copy passes (else a "caught" below would mean nothing).
    for label, path, old, new in [("no mutation (control)", LUA, "", ""), *MUTANTS]:
        with tempfile.TemporaryDirectory() as tmp:
            for name in files:
                (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, Path(tmp) / name)
            target = Path(tmp) / path
            text = target.read_text()
            if old and text.count(old) != 1:
                print(f"? {label}: the text to mutate is not found once in {path}")
                survivors += 1
                continue
            target.write_text(text.replace(old, new))
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                 "tests/test_differential.py"],
                cwd=tmp,
                capture_output=True,
                text=True,
                env=env,
            )  # fmt: skip
            last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            if not old:
                if proc.returncode != 0:
                    print(f"the unmutated copy fails: {last}")
                    return 1
                print(f"passes   {label}: {last}")
                continue
            caught = proc.returncode == 1  # tests ran and failed (not: none collected, error)
            survivors += not caught
            print(f"{'caught  ' if caught else 'SURVIVED'} {label}: {last}")
    print(f"{len(MUTANTS) - survivors} of {len(MUTANTS)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
