"""`lakewarden process …`: optimizing processes — history, tasks, cancel."""

from __future__ import annotations

from typing import Annotated

import typer

from lakewarden.cli import render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, ServerOpt, call, show

process_app = typer.Typer(help="Optimizing processes: history, tasks, cancel.", no_args_is_help=True)


@process_app.command("list")
def process_list(
    table: Annotated[str | None, typer.Option(help="Only this table (catalog.database.table)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Process history, newest first: type, status, table, start, duration, files and bytes in and out."""
    items = call(server, lambda c: c.get("/processes", table=table, limit=limit))
    if json_:
        render.emit_json(items)
        return
    rows = [
        [p["process_id"], p["table"], p["type"], p["status"], p["start_time"], p["duration_ms"],
         p["summary"].get("files_in", ""), p["summary"].get("files_out", ""),
         render.human_bytes(p["summary"].get("bytes_in", 0)), render.human_bytes(p["summary"].get("bytes_out", 0)),
         p["fail_reason"] or ""]
        for p in items
    ]  # fmt: skip
    columns = [
        "id",
        "table",
        "type",
        "status",
        "start",
        "ms",
        "files in",
        "files out",
        "bytes in",
        "bytes out",
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
        "type",
        "status",
        "target_snapshot_id",
        "start_time",
        "end_time",
        "duration_ms",
        "fail_reason",
    )
    render.key_values(f"process {process_id}", [(k, item[k]) for k in keys] + list(item["summary"].items()))
    rows = [
        [t["task_id"], t["status"], ", ".join(t["partitions"]), t["attempt"], t["retry_count"],
         (t["output"] or {}).get("files_in", ""), (t["output"] or {}).get("files_out", ""), t["error"] or ""]
        for t in item["tasks"]
    ]  # fmt: skip
    render.table(
        "tasks", ["task", "status", "partitions", "attempt", "retries", "files in", "files out", "error"], rows
    )


@process_app.command("cancel")
def process_cancel(process_id: int, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Cancel a running process: its tasks are canceled and the table is planned afresh later."""
    call(server, lambda c: c.post(f"/processes/{process_id}/cancel"))
    typer.echo(f"process {process_id} canceled")
