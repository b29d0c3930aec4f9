"""Soft affinity of files to hosts by consistent hashing (the read side of the seeds: Presto's soft affinity
scheduling): each file is given the same hosts in every scan, so the hosts that read it before, with its
footer and its pages in their caches, are asked to read it again. It is a preference only; a reader may
place the split anywhere.

The hosts sit on a ring, each at VIRTUAL_NODES points of a stable hash (not Python's salted `hash`); a file
goes to the first hosts found clockwise from its own point. Adding a host moves only the files that land
on its points (about 1/n of them), removing one moves only its files, and the order in which the hosts
are given does not matter.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

VIRTUAL_NODES = 128
MAX_HOSTS = 4096
MAX_REPLICAS = 3


def _point(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


class HashRing:
    def __init__(self, hosts: Sequence[str], replicas: int = 1) -> None:
        distinct = sorted(set(hosts))
        if not distinct:
            raise ValueError("at least one host is needed")
        if len(distinct) > MAX_HOSTS:
            raise ValueError(f"at most {MAX_HOSTS} hosts")
        if not 1 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be between 1 and {MAX_REPLICAS}")
        self.hosts = tuple(distinct)
        self.replicas = min(replicas, len(distinct))
        ring = sorted((_point(f"{host}#{i}"), host) for host in distinct for i in range(VIRTUAL_NODES))
        self._points = [point for point, _ in ring]
        self._owners = [host for _, host in ring]

    def preferred(self, path: str) -> list[str]:
        """The hosts for a file, most preferred first."""
        start = bisect.bisect(self._points, _point(path))
        found: list[str] = []
        size = len(self._owners)
        for step in range(size):
            host = self._owners[(start + step) % size]
            if host not in found:
                found.append(host)
                if len(found) == self.replicas:
                    break
        return found
