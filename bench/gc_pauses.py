"""The garbage collector's pauses as the manifest cache fills, with and without the heap freezer (lakewarden/heap.py),
side by side in one run.

A table of `--files` data files (file metadata only, 1,000 a manifest, written by pyiceberg into a local SQL
catalog) is planned the way the server's read-ahead fills its cache: every manifest parsed into one
`ManifestCache`, the entries kept. Each variant runs in a fresh process that has imported the server and frozen
its heap once, as a started server has; "freezer" also installs the heap freezer, as the server does. Every
collection is timed (`gc.callbacks`); reported: the longest pause, the number and total of full collections, and
the time of one full collection with the cache full.

    .venv/bin/python bench/gc_pauses.py [--files 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import bar_chart, write

VARIANT = r"""
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
import lakewarden.server
from lakewarden import heap
from lakewarden.heap import HeapFreezer
from lakewarden.metadata.manifest_cache import ManifestCache
from pyiceberg.catalog.sql import SqlCatalog

lakewarden.server._preload()
sys.setswitchinterval(0.0005)  # as the server sets it
catalog = SqlCatalog("bench", uri=f"sqlite:///{sys.argv[2]}/catalog.db", warehouse=f"file://{sys.argv[2]}/warehouse")
table = catalog.load_table("db.t")
heap.freeze()
freezer = HeapFreezer().install() if sys.argv[3] == "freezer" else None
pauses, started = [], {}

def timed(phase, info):
    if phase == "start":
        started["at"] = time.perf_counter()
    else:
        pauses.append((info["generation"], time.perf_counter() - started["at"]))

gc.callbacks.append(timed)
cache = ManifestCache()
began = time.perf_counter()
for manifest in cache.manifests(table.io, table.current_snapshot()):
    cache.entries(table.io, manifest)
filled = time.perf_counter() - began
gc.callbacks.remove(timed)
one = time.perf_counter(); gc.collect(); one = time.perf_counter() - one
full = [p for g, p in pauses if g == 2]
print(json.dumps({
    "fill_s": round(filled, 3),
    "longest_pause_ms": round(max(p for _, p in pauses) * 1000, 1),
    "full_collections": len(full),
    "full_collections_ms": round(sum(full) * 1000, 1),
    "a_full_collection_now_ms": round(one * 1000, 1),
    "freezes": freezer.freezes if freezer else 0,
    "frozen_objects": gc.get_freeze_count(),
}))
"""


def fill(where: Path, files: int) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from bench.scan_planning import SCHEMA, SPEC
    from bench.scan_planning import fill as fill_table

    catalog = SqlCatalog("bench", uri=f"sqlite:///{where}/catalog.db", warehouse=f"file://{where}/warehouse")
    catalog.create_namespace("db")
    fill_table(catalog.create_table("db.t", SCHEMA, partition_spec=SPEC), files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    results: dict[str, Any] = {"files": args.files}
    with tempfile.TemporaryDirectory(prefix="lakewarden-gc-") as tmp:
        started = time.perf_counter()
        fill(Path(tmp), args.files)
        print(f"{args.files:,} files written in {time.perf_counter() - started:.0f} s")
        for variant in ("frozen at start", "freezer"):
            ran = subprocess.run(
                [sys.executable, "-c", VARIANT, str(root), tmp, "freezer" if variant == "freezer" else "none"],
                capture_output=True,
                text=True,
                check=True,
            )
            results[variant] = json.loads(ran.stdout.strip().splitlines()[-1])
            print(f"{variant}: {results[variant]}")
    before, after = results["frozen at start"], results["freezer"]
    results["longest_pause_ratio"] = round(before["longest_pause_ms"] / max(after["longest_pause_ms"], 0.1), 1)
    print(
        f"longest pause {before['longest_pause_ms']} -> {after['longest_pause_ms']} ms "
        f"({results['longest_pause_ratio']}x shorter); a full collection with the cache full "
        f"{before['a_full_collection_now_ms']} -> {after['a_full_collection_now_ms']} ms"
    )
    write("gc_pauses", results)
    bar_chart(
        "gc_pauses",
        f"Longest collector pause while {args.files:,} files' manifests are cached",
        {"frozen at start": before["longest_pause_ms"], "with the heap freezer": after["longest_pause_ms"]},
        "ms",
    )


if __name__ == "__main__":
    main()
