"""Does the server's share of a commit grow with a table's snapshots beyond what its metadata's size forces?

A real `lakewarden server` (SQLite, internal catalog, no optimizer). For each size in `--sizes` a table is
made with that many snapshots: one real append (a data file, its manifest and manifest list), then its
metadata file rewritten with the older snapshots before it (a chain of appends, each with its snapshot-log
entry and summary, sharing the real manifest list) and registered over the table. On it the bench measures:

- **commits** of a raw REST client: each writes a new manifest list (the real manifest) and posts
  `add-snapshot` + `set-snapshot-ref` asserting the current snapshot, so the client does no metadata work;
  the server's time comes from its own request-duration histogram;
- **loadTable** answers (no ETag), the same way;
- **pyiceberg appends**, whose client time is split from the server's;
- **the floor the size forces**: in this process, serialising the table's metadata as JSON and writing it to
  a new file (what any commit must do) and parsing it (what a client must do on a load).

The server's commit time is reported as a ratio of that floor at every size: flat means the server's own
work does not grow with the snapshots. Results and a plot: bench/results/snapshot_growth.*.

    .venv/bin/python bench/snapshot_growth.py [--sizes 1,1000,2500,5000,10000] [--commits 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import write_manifest_list
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import LAKE_ALONE, admin_token, line_charts, running_server, write

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
TABLE_ROUTE = 'route="/iceberg/v1/{prefix}/namespaces/{namespace}/tables/{table}",'


def route_seconds(root: str, token: str) -> dict[str, tuple[float, float]]:
    """The table route's total seconds and count so far, per method (POST: commits, GET: loads)."""
    text = httpx.get(f"{root}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    found: dict[str, list[float]] = {"POST": [0.0, 0.0], "GET": [0.0, 0.0]}
    for line in text.splitlines():
        for index, metric in enumerate(("_sum{", "_count{")):
            if line.startswith(f"lakewarden_http_request_duration_seconds{metric}") and TABLE_ROUTE in line:
                method = line.split('method="', 1)[1].split('"', 1)[0]
                if method in found:
                    found[method][index] += float(line.rsplit(" ", 1)[1])
    return {method: (total, count) for method, (total, count) in found.items()}


def grown_metadata(text: str, snapshots: int) -> dict[str, Any]:
    """The table's metadata with `snapshots - 1` older appends chained before its one real snapshot."""
    metadata: dict[str, Any] = json.loads(text)
    real = metadata["snapshots"][-1]
    first_id, older = 10_000_000, snapshots - 1
    start = real["timestamp-ms"] - 1000 * snapshots
    chain = []
    for i in range(older):
        snapshot = dict(real, **{"snapshot-id": first_id + i, "sequence-number": i + 1, "timestamp-ms": start + i})
        snapshot["summary"] = dict(real["summary"], **{"total-records": str(i + 1), "total-data-files": str(i + 1)})
        if i:
            snapshot["parent-snapshot-id"] = first_id + i - 1
        else:
            snapshot.pop("parent-snapshot-id", None)
        chain.append(snapshot)
    if older:
        real["parent-snapshot-id"] = first_id + older - 1
    real["sequence-number"] = older + 1
    metadata["snapshots"] = [*chain, real]
    metadata["snapshot-log"] = [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]} for s in chain]
    metadata["snapshot-log"].append({"snapshot-id": real["snapshot-id"], "timestamp-ms": real["timestamp-ms"]})
    metadata["last-sequence-number"] = older + 1
    return metadata


class RawWriter:
    """Commits appends of the table's one real manifest with no metadata work on the client's side."""

    def __init__(self, http: httpx.Client, url: str, location: str, manifest: Any, metadata: dict[str, Any]) -> None:
        self.http, self.url, self.location, self.manifest = http, url, location, manifest
        self.current = metadata["current-snapshot-id"]
        self.sequence = metadata["last-sequence-number"]
        self.io = PyArrowFileIO()

    def commit(self) -> float:
        snapshot_id = uuid.uuid4().int >> 65
        self.sequence += 1
        manifest_list = f"{self.location}/metadata/snap-{snapshot_id}-bench.avro"
        with write_manifest_list(
            2, self.io.new_output(manifest_list), snapshot_id, self.current, self.sequence, "deflate"
        ) as out:
            out.add_manifests([self.manifest])
        body = {
            "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": self.current}],
            "updates": [
                {
                    "action": "add-snapshot",
                    "snapshot": {
                        "snapshot-id": snapshot_id,
                        "parent-snapshot-id": self.current,
                        "sequence-number": self.sequence,
                        "timestamp-ms": int(time.time() * 1000),
                        "manifest-list": manifest_list,
                        "summary": {"operation": "append", "added-data-files": "1", "added-records": "1"},
                        "schema-id": 0,
                    },
                },
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
            ],
        }
        started = time.perf_counter()
        answer = self.http.post(self.url, json=body)
        elapsed = time.perf_counter() - started
        answer.raise_for_status()
        self.current = snapshot_id
        return elapsed


def floor(path: str, repeat: int = 3) -> dict[str, float]:
    """Seconds to parse the metadata file, and to serialise it and write a new file, in this process (best of
    `repeat`): what its size forces on any client and any commit."""
    text = Path(path).read_text()
    parse, serialise = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        metadata = TableMetadataUtil.parse_raw(text)
        parse.append(time.perf_counter() - started)
        started = time.perf_counter()
        out = f"{path}.floor-{uuid.uuid4().hex}"
        with open(out, "w") as f:
            f.write(metadata.model_dump_json(exclude_none=True, by_alias=True))
        serialise.append(time.perf_counter() - started)
        os.unlink(out)
    return {"parse_s": min(parse), "serialise_write_s": min(serialise), "bytes": len(text)}


def measure(args: argparse.Namespace, tmp: str, root: str) -> list[dict[str, Any]]:
    token = admin_token(tmp)
    headers = {"Authorization": f"Bearer {token}"}
    http = httpx.Client(headers=headers, timeout=120)
    prefix = http.get(f"{root}/iceberg/v1/config", params={"warehouse": "lake"}).json()["overrides"]["prefix"]
    catalog = RestCatalog("lake", uri=f"{root}/iceberg", warehouse="lake", token=token)
    catalog.create_namespace("growth")
    rows = []
    for size in args.sizes:
        name = f"t{size}"
        table = catalog.create_table(f"growth.{name}", SCHEMA)
        table.append(pa.table({"id": pa.array([0], pa.int64())}))
        table = catalog.load_table(f"growth.{name}")
        manifest = table.current_snapshot().manifests(table.io)[0]
        grown = grown_metadata(Path(table.metadata_location.removeprefix("file://")).read_text(), size)
        location = table.metadata.location.removeprefix("file://")
        path = f"{location}/metadata/99999-{uuid.uuid4()}.metadata.json"
        Path(path).write_text(json.dumps(grown))
        answer = http.post(
            f"{root}/iceberg/v1/{prefix}/namespaces/growth/register",
            json={"name": name, "metadata-location": path, "overwrite": True},
        )
        answer.raise_for_status()
        url = f"{root}/iceberg/v1/{prefix}/namespaces/growth/tables/{name}"
        writer = RawWriter(http, url, location, manifest, grown)
        for _ in range(3):  # warm: the table's metadata read into the server's cache
            writer.commit()
        before = route_seconds(root, token)
        client_commit = [writer.commit() for _ in range(args.commits)]
        middle = route_seconds(root, token)
        client_load = []
        for _ in range(args.commits):
            started = time.perf_counter()
            http.get(url).raise_for_status()
            client_load.append(time.perf_counter() - started)
        after = route_seconds(root, token)
        table = catalog.load_table(f"growth.{name}")
        appends = []
        for i in range(args.appends):
            mark = route_seconds(root, token)["POST"]
            started = time.perf_counter()
            table.append(pa.table({"id": pa.array([i], pa.int64())}))
            wall = time.perf_counter() - started
            server = route_seconds(root, token)["POST"][0] - mark[0]
            appends.append((wall, server))
        current = catalog.load_table(f"growth.{name}").metadata_location.removeprefix("file://")
        forced = floor(current)
        commit_s = (middle["POST"][0] - before["POST"][0]) / args.commits
        load_s = (after["GET"][0] - middle["GET"][0]) / args.commits
        row = {
            "snapshots": size + 3 + args.commits,
            "metadata_mb": forced["bytes"] / 1e6,
            "server_commit_ms": commit_s * 1000,
            "client_commit_ms": statistics.median(client_commit) * 1000,
            "server_load_ms": load_s * 1000,
            "client_load_ms": statistics.median(client_load) * 1000,
            "pyiceberg_append_ms": statistics.median(w for w, _ in appends) * 1000,
            "pyiceberg_append_server_ms": statistics.median(s for _, s in appends) * 1000,
            "pyiceberg_append_client_ms": statistics.median(w - s for w, s in appends) * 1000,
            "floor_serialise_write_ms": forced["serialise_write_s"] * 1000,
            "floor_parse_ms": forced["parse_s"] * 1000,
        }
        row["commit_vs_floor"] = row["server_commit_ms"] / row["floor_serialise_write_ms"]
        rows.append(row)
        print(
            f"{row['snapshots']:>6,} snapshots ({row['metadata_mb']:.2f} MB): server commit "
            f"{row['server_commit_ms']:.1f} ms ({row['commit_vs_floor']:.2f}x serialise+write "
            f"{row['floor_serialise_write_ms']:.1f} ms), load {row['server_load_ms']:.2f} ms "
            f"(client sees {row['client_load_ms']:.1f} ms); pyiceberg append {row['pyiceberg_append_ms']:.0f} ms "
            f"(server {row['pyiceberg_append_server_ms']:.0f}, client {row['pyiceberg_append_client_ms']:.0f}; "
            f"parse alone {row['floor_parse_ms']:.0f} ms)",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 1000, 2500, 5000, 10000])
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--appends", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp, running_server(tmp, LAKE_ALONE) as root:
        rows = measure(args, tmp, root)
    write("snapshot_growth", {"commits_per_size": args.commits, "rows": rows})
    x = [r["snapshots"] for r in rows]

    def series(key: str) -> list[float]:
        return [r[key] for r in rows]

    line_charts(
        "snapshot_growth",
        "snapshots in the table",
        x,
        [
            (
                "Time per commit",
                "ms",
                {
                    "server (raw client)": series("server_commit_ms"),
                    "floor: serialise + write the metadata": series("floor_serialise_write_ms"),
                    "pyiceberg append, client's part": series("pyiceberg_append_client_ms"),
                    "pyiceberg append, server's part": series("pyiceberg_append_server_ms"),
                },
                True,
            ),
            ("Server commit / floor", "ratio", {"server commit / serialise+write": series("commit_vs_floor")}, False),
            (
                "loadTable",
                "ms",
                {"server": series("server_load_ms"), "client (wall)": series("client_load_ms")},
                True,
            ),
        ],
    )


if __name__ == "__main__":
    main()
