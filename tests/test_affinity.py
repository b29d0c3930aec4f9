"""Soft affinity by consistent hashing (domain/affinity.py): stable, balanced, and moving few files when the
hosts change."""

from __future__ import annotations

from collections import Counter

import pytest

from lakewarden.domain.affinity import HashRing

PATHS = [f"s3://bucket/warehouse/db/t/data/part-{i:05d}-8d1b3c52.parquet" for i in range(20_000)]


def primaries(ring: HashRing) -> dict[str, str]:
    return {path: ring.preferred(path)[0] for path in PATHS}


def test_the_same_hosts_in_any_order_give_each_file_the_same_hosts() -> None:
    hosts = [f"worker-{i}" for i in range(5)]
    ring = HashRing(hosts, replicas=2)
    again = HashRing([*reversed(hosts), "worker-0"], replicas=2)  # order and repeats do not matter
    assert all(ring.preferred(p) == again.preferred(p) for p in PATHS)
    chosen = ring.preferred(PATHS[0])
    assert len(chosen) == 2 and len(set(chosen)) == 2 and set(chosen) <= set(hosts)


def test_files_spread_evenly_over_the_hosts() -> None:
    counts = Counter(primaries(HashRing([f"worker-{i}" for i in range(4)])).values())
    assert len(counts) == 4
    assert all(0.18 <= n / len(PATHS) <= 0.32 for n in counts.values()), counts


def test_a_host_added_or_removed_moves_only_its_share_of_files() -> None:
    four = primaries(HashRing([f"worker-{i}" for i in range(4)]))
    five = primaries(HashRing([f"worker-{i}" for i in range(5)]))
    moved = [p for p in PATHS if four[p] != five[p]]
    assert all(five[p] == "worker-4" for p in moved)  # files move to the new host only
    assert 0.12 <= len(moved) / len(PATHS) <= 0.28  # about a fifth of them
    three = primaries(HashRing([f"worker-{i}" for i in range(3)]))
    assert all(three[p] == four[p] for p in PATHS if four[p] != "worker-3")  # only worker-3's files move


def test_the_second_choice_is_where_a_file_goes_when_its_first_host_leaves() -> None:
    ring = HashRing(["a", "b", "c", "d"], replicas=2)
    without_a = HashRing(["b", "c", "d"])
    firsts = [(path, *ring.preferred(path)) for path in PATHS[:2000]]
    on_a = [(path, second) for path, first, second in firsts if first == "a"]
    assert len(on_a) > 300  # about a quarter of the files: enough to see where each goes
    moved = [path for path, second in on_a if without_a.preferred(path) != [second]]
    assert not moved, f"{len(moved)} of {len(on_a)} files did not go to their second choice, e.g. {moved[:3]}"
    # the others stay where they were
    assert all(without_a.preferred(path) == [first] for path, first, _ in firsts if first != "a")


def test_bad_rings_are_refused() -> None:
    with pytest.raises(ValueError, match="host"):
        HashRing([])
    with pytest.raises(ValueError, match="replicas"):
        HashRing(["a"], replicas=4)
    assert HashRing(["a"], replicas=3).preferred("x") == ["a"]  # no more hosts than there are
