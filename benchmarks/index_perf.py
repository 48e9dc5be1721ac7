"""Memory and speed of KeyIndex (page key -> dense id) against a plain Python dict.

    python -m benchmarks.index_perf [--sizes 1000000 10000000] [--out FILE.md]

For each size ``n``, random 20-byte keys (what Scrapy request fingerprints look like), all
drawn up front as one ``bytes`` blob (20 bytes a key, allocated before any measurement) and cut
into ``bytes`` objects one batch at a time, so the benchmark's own memory stays small:

* bytes per key: ``KeyIndex.nbytes() / n`` (the hash array at capacity, its untouched part not
  resident, plus the table) and the growth of the process's resident memory (RSS) while the
  structure was built; for the dict, the RSS growth (dict + the key objects it keeps + the id
  ints; the engine's key map today also keeps a list of the keys);
* add rate: ``index.add(key)`` against ``d[key] = i``, timing only the loop over each batch;
* get rate on up to 1M present keys in random order (so neither structure is read in the order
  it was written): ``index.get(key)`` (blake2b hash + probe), ``index.get_hash(h)`` (the probe
  alone, the hashes computed beforehand) and ``d.get(key)``; and absent keys;
* at the largest size: ``KeyIndex.from_hashes`` on the index's own ``hashes`` (a reopened state).

Ratios are measured in the same run (machines are shared and noisy).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import RESULTS, command
from scrapy_opic.opic.index import KeyIndex, key_hash

ROOT = Path(__file__).resolve().parent
BATCH = 50_000
KEY = 20
GET_SAMPLE = 1_000_000

try:
    import psutil
except ImportError:  # not a dependency: read /proc on Linux
    psutil = None


try:  # glibc keeps freed heap memory: give it back before reading the RSS
    import ctypes

    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (ImportError, OSError, AttributeError):
    _malloc_trim = None


def rss() -> int | None:
    """Resident bytes of this process now (after a garbage collection and, on glibc, a
    ``malloc_trim``: memory freed but kept by the allocator is not counted), or None where it
    cannot be read."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    if psutil is not None:
        return psutil.Process().memory_info().rss
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def keys_of(blob: bytes, start: int, stop: int) -> list[bytes]:
    return [blob[j : j + KEY] for j in range(start * KEY, stop * KEY, KEY)]


def build_index(blob: bytes, n: int) -> tuple[KeyIndex, float]:
    index = KeyIndex()
    add = index.add
    seconds = 0.0
    for start in range(0, n, BATCH):
        keys = keys_of(blob, start, min(n, start + BATCH))
        t = time.perf_counter()
        for k in keys:
            add(k)
        seconds += time.perf_counter() - t
    return index, seconds


def build_dict(blob: bytes, n: int) -> tuple[dict, float]:
    d: dict[bytes, int] = {}
    seconds = 0.0
    for start in range(0, n, BATCH):
        keys = keys_of(blob, start, min(n, start + BATCH))
        t = time.perf_counter()
        for i, k in enumerate(keys, start):
            d[k] = i
        seconds += time.perf_counter() - t
    return d, seconds


def timed(fn, items) -> tuple[float, list]:
    t = time.perf_counter()
    out = [fn(x) for x in items]
    return time.perf_counter() - t, out


def measure(n: int, rng: np.random.Generator) -> dict:
    blob = rng.bytes(n * KEY)
    m = min(n, GET_SAMPLE)
    ids = rng.choice(n, size=m, replace=False)
    present = [blob[i * KEY : (i + 1) * KEY] for i in ids.tolist()]
    present_h = [key_hash(k) for k in present]
    absent = [rng.bytes(KEY) for _ in range(m)]
    expected = ids.tolist()
    r: dict = {"n": n}

    gc.collect()
    before = rss()
    index, r["index_add_s"] = build_index(blob, n)
    after = rss()
    r["index_nbytes"] = index.nbytes()
    r["index_rss"] = None if before is None else after - before
    r["index_get_s"], got = timed(index.get, present)
    assert got == expected
    r["index_get_hash_s"], got = timed(index.get_hash, present_h)
    assert got == expected
    r["index_absent_s"], got = timed(index.get, absent)
    assert not any(x is not None for x in got)
    hashes = np.array(index.hashes)
    del index, got
    gc.collect()

    times = []
    for _ in range(3):  # the first is cold (fresh memory), as when a state is reopened
        rebuilt = None
        t = time.perf_counter()
        rebuilt = KeyIndex.from_hashes(hashes)
        times.append(time.perf_counter() - t)
    r["from_hashes_s"] = times[0]
    r["from_hashes_best_s"] = min(times)
    r["from_hashes_nbytes"] = rebuilt.nbytes()
    assert [rebuilt.get_hash(h) for h in present_h[:100_000]] == expected[:100_000]
    del rebuilt, hashes
    gc.collect()

    before = rss()
    d, r["dict_add_s"] = build_dict(blob, n)
    after = rss()
    r["dict_rss"] = None if before is None else after - before
    r["dict_get_s"], got = timed(d.get, present)
    assert got == expected
    r["dict_absent_s"], got = timed(d.get, absent)
    assert not any(x is not None for x in got)
    r["m"] = m
    del d, got
    gc.collect()
    return r


def report(results: list[dict]) -> str:
    def rate(count, seconds):
        return count / seconds

    def per(value, n):
        return "n/a" if value is None else f"{value / n:.1f}"

    lines = [
        "# KeyIndex against a Python dict (random 20-byte keys)",
        "",
        f"`{command()}`",
        "",
        f"Python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}; "
        f"RSS from {'psutil' if psutil else '/proc/self/statm'}"
        f"{' after malloc_trim' if _malloc_trim else ''}. Get rates on "
        f"{min(r['m'] for r in results):,}+ keys in random order.",
        "",
        "| keys | index B/key (nbytes) | index B/key (RSS) | dict B/key (RSS) "
        "| add/s index | add/s dict | dict/index | get/s index | get_hash/s index | get/s dict "
        "| dict/index | absent get/s index | absent get/s dict |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        n, m = r["n"], r["m"]
        add_i, add_d = rate(n, r["index_add_s"]), rate(n, r["dict_add_s"])
        get_i, get_d = rate(m, r["index_get_s"]), rate(m, r["dict_get_s"])
        lines.append(
            f"| {n:,} | {r['index_nbytes'] / n:.1f} | {per(r['index_rss'], n)} "
            f"| {per(r['dict_rss'], n)} | {add_i:,.0f} | {add_d:,.0f} | {add_d / add_i:.1f}x "
            f"| {get_i:,.0f} | {rate(m, r['index_get_hash_s']):,.0f} | {get_d:,.0f} "
            f"| {get_d / get_i:.1f}x | {rate(m, r['index_absent_s']):,.0f} "
            f"| {rate(m, r['dict_absent_s']):,.0f} |"
        )
    lines += [
        "",
        "| keys | from_hashes, first (s) | from_hashes, best of 3 (s) | B/key (nbytes) |",
        "|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['n']:,} | {r['from_hashes_s']:.2f} | {r['from_hashes_best_s']:.2f} "
            f"| {r['from_hashes_nbytes'] / r['n']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--out", type=Path, default=RESULTS / "index_perf.md")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    results = []
    for n in args.sizes:
        results.append(measure(n, rng))
        print(f"{n:,} keys measured", file=sys.stderr, flush=True)
    text = report(results)
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
