"""KeyIndex: page key -> dense id by a 64-bit hash in a linear-probing table; the vectorised bulk
build (from_hashes) against sequential adds; the stable key hash; the memory per page."""

from __future__ import annotations

import copy
import hashlib
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_opic.opic.index import KeyIndex, key_hash

U64 = 2**64 - 1


def assert_valid(index: KeyIndex, hashes) -> None:
    """Every hash is found with its id (its position), the sizes hold, the load is <= 0.7."""
    assert len(index) == len(hashes)
    for i, h in enumerate(hashes):
        assert index.get_hash(h) == i
    assert index.hashes.tolist() == list(hashes)
    size = index.table_size
    assert size & (size - 1) == 0
    assert len(index) <= 0.7 * size


# -- key_hash ----------------------------------------------------------------------------------
def test_key_hash_known_values():
    # Fixed values: a change of hashing (algorithm, digest size, byte order, encoding) fails here.
    assert key_hash(b"\x00" * 20) == 0xCB65974158A9100C
    assert key_hash(bytes(range(20))) == 0x1FA607CD429C3A34
    assert key_hash("https://example.com/") == 0x5B55279CB72EBA14
    assert key_hash(12345) == 0xA1F6C0E0934B5874
    assert key_hash(-7) == 0x182F7C2F46E6A164
    assert key_hash("") == 0xB4B2797457A0A6E4


def test_key_hash_is_blake2b_8_little_endian_of_the_key_bytes():
    for key, data in [
        (b"abc", b"abc"),
        ("abc", b"abc"),
        ("été", "été".encode()),
        (0, b"0"),
        (-12, b"-12"),
        (2**70, str(2**70).encode()),
    ]:
        digest = hashlib.blake2b(data, digest_size=8).digest()
        assert key_hash(key) == int.from_bytes(digest, "little")
        assert 0 <= key_hash(key) <= U64


def test_key_hash_bytes_str_int():
    assert key_hash("abc") == key_hash(b"abc")
    assert key_hash(5) == key_hash("5") == key_hash(b"5")  # documented: an int is its decimal text
    assert key_hash(5) != key_hash(b"\x05")
    assert key_hash("été") != key_hash("ete")


@pytest.mark.parametrize("bad", [1.5, True, None, bytearray(b"a"), (1, 2), memoryview(b"a")])
def test_key_hash_refuses_other_types(bad):
    with pytest.raises(TypeError):
        key_hash(bad)


# -- collisions in a tiny table -----------------------------------------------------------------
def test_shared_home_slots_wrap_around_the_end():
    index = KeyIndex(capacity=0)
    assert index.table_size == 8  # mask 7: home slot = h & 7
    # 7, 15, 23 share home slot 7 (the last): they take slots 7, 0 and 1.
    assert [index.add_hash(h) for h in (7, 15, 23)] == [0, 1, 2]
    # 0's home slot (0) is taken by 15: it probes on to slot 2.
    assert index.add_hash(0) == 3
    assert [index.get_hash(h) for h in (7, 15, 23, 0)] == [0, 1, 2, 3]
    # Absent hashes whose probe starts in the cluster and wraps: None at the first empty slot.
    for absent in (31, 8, 1, 39, 2**64 - 1):
        assert index.get_hash(absent) is None
    assert index.get_hash(2) is None  # home slot 2 taken (by 0): probes 2, then 3 is empty
    assert index.table_size == 8
    assert_valid(index, [7, 15, 23, 0])


def test_one_cluster_through_many_doublings():
    # Every hash has all its low 32 bits set: every table up to 2**32 slots gives them all the
    # last slot as home, so they form one cluster wrapping around the end, at every size.
    low = 2**32 - 1
    hashes = [(k << 32) | low for k in range(1, 300)]
    index = KeyIndex(capacity=0)
    sizes = set()
    for i, h in enumerate(hashes):
        assert index.get_hash(h) is None
        assert index.add_hash(h) == i
        sizes.add(index.table_size)
    assert len(sizes) >= 6
    assert_valid(index, hashes)
    for k in range(300, 320):  # absent, same home: probe the whole cluster, wrap, then stop
        assert index.get_hash((k << 32) | low) is None
    assert index.get_hash(0) is None  # home slot 0 is inside the wrapped cluster


def test_clusters_interleaved_with_their_neighbours_home_slots():
    # Homes 5, 6, 7 (mask 7) crowded, then the table doubles several times.
    index = KeyIndex(capacity=0)
    hashes = (
        [5 + 8 * k for k in range(4)]
        + [6 + 8 * k for k in range(4)]
        + [7 + 64 * k for k in range(4)]
    )
    for i, h in enumerate(hashes):
        assert index.add_hash(h) == i
    assert_valid(index, hashes)
    for h in (5 + 8 * 40, 6 + 8 * 40, 7 + 64 * 40, 4):
        assert index.get_hash(h) is None


# -- growth ------------------------------------------------------------------------------------
def test_growth_keeps_every_earlier_key_with_its_id():
    index = KeyIndex(capacity=1)
    keys = [b"page-%d" % i for i in range(40_000)]
    size = index.table_size
    doublings = 0
    for i, key in enumerate(keys):
        assert index.add(key) == i
        if index.table_size != size:
            assert index.table_size == 2 * size
            size = index.table_size
            doublings += 1
            assert all(index.get(k) == j for j, k in enumerate(keys[: i + 1]))
        assert len(index) <= 0.7 * index.table_size
    assert doublings >= 12
    assert all(index.get(k) == j for j, k in enumerate(keys))
    assert all(index.get(b"absent-%d" % i) is None for i in range(5_000))
    assert len(index) == len(keys)
    assert index.hashes.tolist() == [key_hash(k) for k in keys]


def test_str_and_int_keys_and_contains():
    index = KeyIndex()
    assert index.add("https://example.com/a") == 0
    assert index.add(42) == 1
    assert index.add(b"\x00" * 20) == 2
    assert index.get("https://example.com/a") == 0
    assert index.get(42) == index.get("42") == 1  # an int key is its decimal text
    assert "https://example.com/a" in index and b"\x00" * 20 in index
    assert "https://example.com/b" not in index and 43 not in index
    with pytest.raises(TypeError):
        index.get(4.2)


# -- refused additions -------------------------------------------------------------------------
def test_duplicate_add_is_refused_and_changes_nothing():
    index = KeyIndex(capacity=0)
    for h in (7, 15, 23):
        index.add_hash(h)
    for h in (7, 15, 23):
        with pytest.raises(ValueError, match="already present"):
            index.add_hash(h)
    index.add(b"key")
    with pytest.raises(ValueError):
        index.add(b"key")
    with pytest.raises(ValueError):
        index.add_hash(key_hash(b"key"))  # a "different key" with the same hash: the same page
    assert_valid(index, [7, 15, 23, key_hash(b"key")])
    assert index.add_hash(31) == 4


def test_duplicate_add_at_a_growth_leaves_a_valid_index():
    index = KeyIndex(capacity=0)
    hashes = list(range(100, 105))  # 5 pages: the next add doubles the 8-slot table first
    for h in hashes:
        index.add_hash(h)
    with pytest.raises(ValueError):
        index.add_hash(100)
    assert_valid(index, hashes)


@pytest.mark.parametrize("bad", [-1, 2**64, -(2**70)])
def test_add_hash_refuses_values_out_of_64_bits(bad):
    index = KeyIndex()
    with pytest.raises(ValueError):
        index.add_hash(bad)
    assert len(index) == 0
    assert index.get_hash(bad) is None


def test_add_hash_refuses_non_integers_and_takes_numpy_integers():
    index = KeyIndex()
    with pytest.raises(TypeError):
        index.add_hash(1.0)
    assert index.add_hash(np.uint64(U64)) == 0
    assert index.get_hash(U64) == 0


# -- from_hashes -------------------------------------------------------------------------------
def sequential(hashes) -> KeyIndex:
    index = KeyIndex(capacity=0)
    for h in hashes:
        index.add_hash(h)
    return index


hash_values = st.one_of(
    st.integers(0, U64),
    st.integers(0, 40),  # small: share home slots in small tables
    st.integers(0, 40).map(lambda k: (k << 32) | 0xFFFFFFFF),  # home = the last slot: wraps
    st.integers(0, 2**20 - 1).map(lambda k: (k << 44) | 5),
)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(hash_values, unique=True, max_size=300),
    st.lists(hash_values, max_size=30),
)
def test_from_hashes_agrees_with_sequential_adds(hashes, probes):
    built = KeyIndex.from_hashes(np.array(hashes, dtype=np.uint64))
    added = sequential(hashes)
    assert_valid(built, hashes)
    assert len(built) == len(added)
    assert np.array_equal(built.hashes, added.hashes)
    assert built.table_size == added.table_size
    for h in probes:
        assert built.get_hash(h) == added.get_hash(h)
    # and it goes on growing like any index
    more = [h for h in range(2**63, 2**63 + 100) if h not in set(hashes)][:50]
    for h in more:
        assert built.add_hash(h) == added.add_hash(h)
    assert_valid(built, hashes + more)


def test_from_hashes_random_large():
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**64, size=50_000, dtype=np.uint64, endpoint=False)
    built = KeyIndex.from_hashes(hashes)
    ids = [built.get_hash(h) for h in hashes.tolist()]
    assert ids == list(range(len(hashes)))
    absent = rng.integers(0, 2**64, size=5_000, dtype=np.uint64, endpoint=False)
    absent = np.setdiff1d(absent, hashes)
    assert all(built.get_hash(h) is None for h in absent.tolist())
    first = int(hashes[0])
    hashes[0] = first ^ 1  # the index holds a copy
    assert built.hashes[0] == first and built.get_hash(first) == 0


@pytest.mark.parametrize(
    "hashes",
    [
        [3, 3],
        [1, 2, 3, 4, 2],
        [7, 15, 23, 31, 15],  # in a cluster that wraps (8-slot table)
        [(k << 32) | 0xFFFFFFFF for k in range(50)] + [(7 << 32) | 0xFFFFFFFF],
        list(range(1000)) + [999],
    ],
)
def test_from_hashes_refuses_duplicates(hashes):
    with pytest.raises(ValueError, match="duplicate"):
        KeyIndex.from_hashes(np.array(hashes, dtype=np.uint64))


def test_from_hashes_refuses_duplicates_in_random_data():
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 2**64, size=20_000, dtype=np.uint64, endpoint=False)
    hashes[15_000] = hashes[123]
    with pytest.raises(ValueError, match=r"hashes\[123\] == hashes\[15000\]"):
        KeyIndex.from_hashes(hashes)


def test_from_hashes_input_checks_and_empty():
    with pytest.raises(TypeError):
        KeyIndex.from_hashes(np.arange(3, dtype=np.int64))
    with pytest.raises(ValueError):
        KeyIndex.from_hashes(np.zeros((2, 2), dtype=np.uint64))
    empty = KeyIndex.from_hashes(np.zeros(0, dtype=np.uint64))
    assert len(empty) == 0 and empty.get_hash(0) is None
    assert empty.add(b"a") == 0 and empty.get(b"a") == 0


# -- hashes view, copies, memory ---------------------------------------------------------------
def test_hashes_is_a_read_only_view_by_id():
    index = KeyIndex()
    keys = [b"a", b"b", b"c"]
    for k in keys:
        index.add(k)
    view = index.hashes
    assert view.dtype == np.uint64 and view.tolist() == [key_hash(k) for k in keys]
    with pytest.raises(ValueError):
        view[0] = 1


def test_copy_and_pickle_rebuild_the_index():
    index = KeyIndex(capacity=0)
    for i in range(100):
        index.add(i)
    for clone in (copy.deepcopy(index), pickle.loads(pickle.dumps(index))):
        assert_valid(clone, index.hashes.tolist())
        assert clone.add(100) == 100 and index.get(100) is None


def test_nbytes_is_8_bytes_a_page_plus_4_a_slot():
    index = KeyIndex(capacity=1000)
    assert index.table_size == 2048  # 1000 pages at load <= 0.7 need 1429 slots
    assert index.nbytes() == 8 * 1000 + 4 * 2048
    for i in range(1000):
        index.add(i)
    assert index.nbytes() == 8 * 1000 + 4 * 2048  # sized for them: no growth
    index.add(1000)
    assert index.nbytes() == 8 * 2000 + 4 * 2048  # the hash array doubled
    rng = np.random.default_rng(1)
    for n in (1_000, 30_000, 100_000, 150_000):
        built = KeyIndex.from_hashes(
            np.unique(rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False))
        )
        per_page = built.nbytes() / len(built)
        assert per_page == pytest.approx(8 + 4 * built.table_size / len(built))
        assert 8 + 4 / 0.7 <= per_page <= 8 + 8 / 0.7  # load between 0.35 and 0.7
