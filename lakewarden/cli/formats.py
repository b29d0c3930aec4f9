"""`lakewarden table show` for tables of other formats: a Hudi table's timeline and files, a Paimon table's
snapshots and buckets, and what their own services would do (api/routes/formats.py answers them)."""

from __future__ import annotations

from typing import Any

from lakewarden.cli import render


def render_hudi(view: dict[str, Any]) -> None:
    """A Hudi table's timeline, partitions and what its own table services would do (api/routes/formats.py)."""
    render.key_values(
        "hudi",
        [
            ("table type", view["table_type"]),
            ("table version", view["table_version"]),
            ("location", view["location"]),
            ("instants on the active timeline", view["instants"]),
            ("pending compactions", ", ".join(i["timestamp"] for i in view["pending_compactions"]) or "none"),
        ],
    )
    render.table(
        "timeline (newest first)",
        ["instant", "action", "state"],
        [[i["timestamp"], i["action"], i["state"]] for i in view["timeline"]],
    )
    render.table(
        "partitions",
        ["partition", "file groups", "base files", "log files", "size"],
        [
            [
                p["partition"] or "(none)",
                p["file_groups"],
                p["base_files"],
                p["log_files"],
                render.human_bytes(p["size_bytes"]),
            ]
            for p in view["partitions"]
        ],
    )
    render.table(
        "what Hudi's table services would do (lakewarden runs none of it)",
        ["service", "partition", "why", "with Hudi's Spark bundle"],
        [[n["service"], n["partition"] or "", n["reason"], n["procedure"]] for n in view["needs"]],
    )


def render_paimon(view: dict[str, Any]) -> None:
    """A Paimon table's snapshots, tags, buckets and what its compaction and expiry would do (api/routes/formats.py)."""
    render.key_values(
        "paimon",
        [
            ("location", view["location"]),
            ("primary keys", ", ".join(view["primary_keys"]) or "none (an append table)"),
            ("partition keys", ", ".join(view["partition_keys"]) or "none"),
            ("snapshots", view["snapshot_count"]),
            ("schemas", len(view["schemas"])),
            ("tags", ", ".join(f"{t['name']} ({t['snapshot_id']})" for t in view["tags"]) or "none"),
        ],
    )
    render.table(
        "snapshots (newest first)",
        ["snapshot", "kind", "schema", "records", "time"],
        [[s["id"], s["commit_kind"], s["schema_id"], s["total_records"], s["time"]] for s in view["snapshots"]],
    )
    render.table(
        "buckets",
        ["partition", "bucket", "files", "per level", "sorted runs", "size"],
        [
            [
                b["partition"] or "(none)",
                b["bucket"],
                b["files"],
                ", ".join(f"L{level}: {n}" for level, n in b["files_per_level"].items()),
                b["sorted_runs"],
                render.human_bytes(b["size_bytes"]),
            ]
            for b in view["buckets"]
        ],
    )
    render.table(
        "what Paimon's compaction and expiry would do (lakewarden runs none of it)",
        ["work", "partition", "bucket", "why", "with Paimon's Spark bundle"],
        [
            [
                n["service"],
                n["partition"] or "",
                "" if n["bucket"] is None else n["bucket"],
                n["reason"],
                n["procedure"],
            ]
            for n in view["needs"]
        ],
    )
