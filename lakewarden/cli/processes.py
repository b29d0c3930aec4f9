"""`lakewarden process …`: processes of every action — history, tasks, cancel."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lakewarden.cli import render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, ServerOpt, call, show

process_app = typer.Typer(help="Processes (optimizing and maintenance): history, tasks, cancel.", no_args_is_help=True)


# the kinds of files an optimizing process changed (`/processes/{id}/files`), as `process show` labels them
FILE_CHANGES = {
    "rewritten_files": "data file rewritten",
    "added_files": "data file written",
    "removed_delete_files": "delete file removed",
    "added_delete_files": "position-delete file written",
}
SHOWN_FILES = 100  # `process show` lists the first ones; `process files` pages through them all


def result_text(process: dict[str, Any]) -> str:
    """What a process did, in a few words: files and bytes for optimizing, the counts for maintenance."""
    summary = process.get("summary") or {}
    if process["action"] == "optimizing":
        if "files_in" not in summary:
            return ""
        sizes = f"{render.human_bytes(summary.get('bytes_in', 0))} -> {render.human_bytes(summary.get('bytes_out', 0))}"
        text = f"{summary['files_in']} -> {summary['files_out']} files, {sizes}"
        removed, added = summary.get("delete_files_removed", 0), summary.get("delete_files_added", 0)
        if removed or added:
            text += f"; delete files -{removed} +{added}"
        if summary.get("groups_yielded"):  # a writer changed their files meanwhile: planned again
            text += f"; {summary['groups_yielded']} file group(s) left to writers"
        return text
    parts = []
    for key, value in summary.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not value
            or key.endswith(("_ms", "_id"))
            or key.startswith("spark_")
        ):
            continue
        shown = render.human_bytes(value) if "bytes" in key else str(value)
        parts.append(f"{key.replace('_', ' ')} {shown}")
    if summary.get("dry_run"):
        parts.insert(0, "dry run:")
    return ", ".join(parts)


def usage_text(usage: dict[str, Any] | None, currency: str = "") -> str:
    """What Spark measured, in a few words: CPU and core time, bytes written, Spark tasks, and the cost."""
    if not usage:
        return ""

    def get(name: str) -> float:
        return float(usage.get(name, usage.get(f"spark_{name}", 0)) or 0)

    if not get("tasks") and not get("whole_cpu_ms"):
        return ""
    parts = [
        f"cpu {get('cpu_ms') / 1000:.1f}s on executors, {get('whole_cpu_ms') / 1000:.1f}s in all",
        f"cores {get('run_ms') / 1000:.1f}s",
        f"wrote {render.human_bytes(get('written_bytes'))}",
        f"{int(get('tasks'))} spark tasks",
    ]
    return ", ".join(parts) + f"; cost {get('cost'):.6f} {currency}".rstrip()


@process_app.command("list")
def process_list(
    table: Annotated[str | None, typer.Option(help="Only this table (catalog.database.table)")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action (optimizing, expire-snapshots, …)")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status (running, success, failed, canceled)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Processes of every action, newest first: action, type, status, table, start, duration, result."""
    items = call(server, lambda c: c.get("/processes", table=table, action=action, status=status, limit=limit))
    if json_:
        render.emit_json(items)
        return
    rows = [
        [
            p["process_id"],
            p["table"],
            p["action"],
            p["type"],
            p["status"],
            p["start_time"],
            p["duration_ms"],
            result_text(p),
            f"{p['usage']['cost']:.6f}" if p["usage"].get("tasks") else "",
            p["fail_reason"] or "",
        ]
        for p in items
    ]
    columns = [
        "id",
        "table",
        "action",
        "type",
        "status",
        "start",
        "ms",
        "result",
        f"cost {items[0]['currency'] if items else ''}".rstrip(),
        "error",
    ]
    render.table("processes", columns, rows)


@process_app.command("show")
def process_show(process_id: int, server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """One process with its tasks: partitions, attempts, optimizer, output or error."""
    item = show(server, f"/processes/{process_id}", json_)
    if item is None:
        return
    keys = (
        "table",
        "group",
        "action",
        "type",
        "status",
        "target_snapshot_id",
        "start_time",
        "end_time",
        "duration_ms",
        "fail_reason",
    )
    summary = item["summary"]
    scalars = [(k, v) for k, v in summary.items() if not isinstance(v, list | dict) and not k.startswith("spark_")]
    spark = [("spark", usage_text(item["usage"], item["currency"]))] if item["usage"].get("tasks") else []
    why = [("why this table", item["scheduling"]["reason"])] if item.get("scheduling") else []
    bought = [("what it bought", item["benefit"]["text"])] if item.get("benefit") else []
    render.key_values(f"process {process_id}", [(k, item[k]) for k in keys] + why + bought + spark + scalars)
    if item.get("diagnosis"):
        d = item["diagnosis"]
        render.key_values(
            "failure", [("class", d["error_class"]), ("root cause", d["root_cause"]), ("hint", d["hint"])]
        )
    if item["action"] == "optimizing":
        page = call(server, lambda c: c.get(f"/processes/{process_id}/files", limit=SHOWN_FILES))
        changes = [[FILE_CHANGES.get(f["kind"], f["kind"]), f["path"]] for f in page["files"]]
        if page["total"] > len(changes):
            changes.append(["…", f"{page['total'] - len(changes)} more: lakewarden process files {process_id}"])
        if changes:
            render.table("files", ["change", "file"], changes)
    yielded = summary.get("yielded") or []
    if yielded:
        lines = [
            [
                y.get("at", "")[:19],
                f"snapshot {y.get('snapshot_id')}",
                y.get("to", ""),
                y.get("task_id", ""),
                f"{float(y.get('share', 0)) * 100:.0f}%",
                y.get("files_restored", ""),
                f"{float(y.get('cpu_ms', 0)) / 1000:.1f}",
            ]
            for y in yielded
        ]
        columns = ["when", "undone by", "yielded to", "task", "share undone", "files back", "CPU-s wasted"]
        render.table("yielded to writers", columns, lines)
    rows = [
        [
            t["task_id"],
            t["status"],
            ", ".join(t["partitions"]),
            t["attempt"],
            t["retry_count"],
            (t["output"] or {}).get("files_in", ""),
            (t["output"] or {}).get("files_out", ""),
            usage_text(t.get("usage")),
            (t["error"] or "")
            + (f" (hint: {t['diagnosis']['hint']})" if (t.get("diagnosis") or {}).get("hint") else ""),
        ]
        for t in item["tasks"]
    ]
    columns = ["task", "status", "partitions", "attempt", "retries", "files in", "files out", "spark", "error"]
    render.table("tasks", columns, rows)


@process_app.command("files")
def process_files(
    process_id: int,
    kind: Annotated[str | None, typer.Option(help=f"Only one kind: {', '.join(FILE_CHANGES)}")] = None,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    limit: Annotated[int, typer.Option(min=1, max=10000)] = 1000,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """The files an optimizing process changed, a page at a time: rewritten, written, delete files removed."""
    page = call(server, lambda c: c.get(f"/processes/{process_id}/files", kind=kind, offset=offset, limit=limit))
    if json_:
        render.emit_json(page)
        return
    rows = [[f["task_id"], FILE_CHANGES.get(f["kind"], f["kind"]), f["path"]] for f in page["files"]]
    shown = f"{offset + 1}-{offset + len(rows)} of {page['total']}" if rows else f"none of {page['total']}"
    render.table(f"files of process {process_id} ({shown})", ["task", "change", "file"], rows)


@process_app.command("cancel")
def process_cancel(process_id: int, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Cancel a running process: its tasks are canceled and the table is planned afresh later."""
    call(server, lambda c: c.post(f"/processes/{process_id}/cancel"))
    typer.echo(f"process {process_id} canceled")
