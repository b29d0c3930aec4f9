"""`lakewarden table …`: managed tables — list, show, evaluate, what-if, run a maintenance action."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lakewarden.cli import formats, render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, ServerOpt, call, show, table_path
from lakewarden.cli.processes import result_text, usage_text

table_app = typer.Typer(help="Managed tables.", no_args_is_help=True)
TableArg = Annotated[str, typer.Argument(help="catalog.database.table")]


@table_app.command("list")
def table_list(
    catalog: Annotated[str | None, typer.Option(help="Only this catalog")] = None,
    database: Annotated[str | None, typer.Option(help="Only this database (namespace)")] = None,
    status: Annotated[str | None, typer.Option(help="idle, pending, minor_optimizing, …")] = None,
    group: Annotated[str | None, typer.Option(help="Only this resource group")] = None,
    table_format: Annotated[
        str | None, typer.Option("--format", help="Only tables of this format: iceberg, hudi, paimon")
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """List managed tables."""
    items = call(
        server,
        lambda c: c.get("/tables", catalog=catalog, database=database, status=status, group=group, format=table_format),
    )
    if json_:
        render.emit_json(items)
        return
    rows = [
        [
            t["identifier"],
            t["format"],
            t["status"],
            t["group"],
            t["data_files"],
            t["delete_files"],
            render.human_bytes(t["files_size_bytes"]),
        ]
        for t in items
    ]
    render.table("tables", ["table", "format", "status", "group", "data files", "delete files", "size"], rows)


@table_app.command("show")
def table_show(
    identifier: TableArg,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Show a table: status, group, why it is pending or idle, effective config, file and snapshot summary."""
    path, name = table_path(identifier)
    item = show(server, path, json_)
    if item is None:
        return
    pairs: list[tuple[str, Any]] = [
        (k, item[k])
        for k in (
            "identifier",
            "format",
            "status",
            "status_code",
            "group",
            "metadata_location",
            "current_snapshot_id",
            "last_refreshed_at",
            "refresh_error",
        )
    ]
    pairs.append(("cost of its processes", usage_text(item["usage"], item["currency"]) or "nothing yet"))
    pairs.append(("reads", reads_text(item.get("reads"))))
    if item.get("deferred"):
        pairs.append(("deferred", item["deferred"].removeprefix("deferred: ")))
    pairs += [(f"summary {k}", v) for k, v in item["summary"].items()]
    render.key_values(f"table {name}", pairs)
    render_evaluation(item.get("evaluation"))
    if item["format"] == "hudi":  # shown and judged; nothing of Iceberg's optimizing or maintenance applies
        formats.render_hudi(call(server, lambda c: c.get(f"{path}/hudi", limit=10)))
        return
    if item["format"] == "paimon":
        formats.render_paimon(call(server, lambda c: c.get(f"{path}/paimon", limit=10)))
        return
    recent = call(server, lambda c: c.get("/processes", table=item["identifier"], action="optimizing", limit=5))
    render.table(
        "recent optimizing",
        ["process", "type", "status", "started", "result"],
        [
            [p["process_id"], p["type"], p["status"], p["start_time"], result_text(p) or p["fail_reason"] or ""]
            for p in recent
        ],
    )
    rows = [
        [m["action"], "on" if m["enabled"] else "off", m["blocked_by"] or "", _backoff(m)] for m in item["maintenance"]
    ]
    render.table("maintenance", ["action", "enabled", "blocked by", "failing"], rows)
    expiries = call(server, lambda c: c.get("/processes", table=item["identifier"], action="expire-snapshots", limit=1))
    render_kept(expiries)
    render.key_values("effective config", sorted(item["config"].items()))


def reads_text(reads: dict[str, Any] | None) -> str:
    """How the table is read (services/tables/reads.py) in one line."""
    if not reads or not reads["scans_last_week"]:
        return "no scans reported this week"
    files = reads["files_per_scan"]
    engines = ", ".join(f"{k} {v}" for k, v in reads["engines"].items())
    return (
        f"{reads['scans_last_hour']} scans in the last hour, {reads['scans_last_day']} in the day, "
        f"{reads['scans_last_week']} in the week; files per scan {files['p50']:g} (p95 {files['p95']:g}); {engines}"
    )


def render_kept(last_expiry: list[dict[str, Any]]) -> None:
    """The snapshots the last snapshot expiry kept for a writer (each with everything newer), and why."""
    if not last_expiry:
        return
    summary = last_expiry[0].get("summary") or {}
    rows = [[k["snapshot_id"], k["need"], k["detail"]] for k in summary.get("kept", [])]
    # a need a branch's own retention would override: the expiry did not run
    rows += [[k["snapshot_id"], "not expired: blocked", k["detail"]] for k in summary.get("blocked", [])]
    if rows:
        title = f"kept by the last snapshot expiry (process {last_expiry[0]['process_id']})"
        render.table(title, ["snapshot", "kept for", "why"], rows)


def _backoff(state: dict[str, Any]) -> str:
    if not state.get("failures"):
        return ""
    return f"{state['failures']} failed in a row; next try after {state['retry_after']}"


def render_evaluation(evaluation: dict[str, Any] | None) -> None:
    """Why the table is pending or idle, partition by partition."""
    if not evaluation:
        render.console.print("not evaluated yet")
        return
    verdict = evaluation.get("type") or "nothing to optimize"
    render.console.print(f"[bold]evaluation[/bold] of snapshot {evaluation.get('snapshot_id')}: {verdict}")
    for reason in evaluation.get("reasons", []):
        render.console.print(f"  - {reason}")
    if evaluation.get("clustering"):
        render.console.print(f"  full optimizing clusters by {evaluation['clustering']}")
    if evaluation.get("format", "iceberg") != "iceberg":  # its partitions carry their reasons only
        rows = [[p["partition"], "; ".join(p["reasons"])] for p in evaluation.get("partitions", [])]
        if rows:
            render.table("partitions", ["partition", "why"], rows)
        return
    rows = [
        [
            p["partition"],
            p["type"] or "-",
            p["data_files"],
            p["fragment_files"],
            p["undersized_files"],
            p["position_delete_files"] + p["equality_delete_files"],
            "; ".join(p["reasons"]),
        ]
        for p in evaluation.get("partitions", [])
    ]
    if rows:
        columns = ["partition", "type", "files", "fragments", "undersized", "deletes", "why"]
        render.table("partitions", columns, rows)


@table_app.command("evaluate")
def table_evaluate(
    identifier: TableArg,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Evaluate a table now and say whether and why it needs optimizing."""
    path, _ = table_path(identifier)
    item = call(server, lambda c: c.post(f"{path}/evaluate"))
    if json_:
        render.emit_json(item)
        return
    render.console.print(f"{item['identifier']} is {item['status']}")
    render_evaluation(item.get("evaluation"))


@table_app.command("what-if")
def table_what_if(
    identifier: TableArg,
    policy: Annotated[
        list[str] | None,
        typer.Option(help="amoro, none, scheduled:<minutes> or budget:<cpu-seconds per hour>; repeat for several"),
    ] = None,
    hours: Annotated[float, typer.Option(help="The window replayed, up to now")] = 24,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """What other optimizing policies would have done to the table, beside what its own did (its commits and
    scans replayed)."""
    path, name = table_path(identifier)
    item = call(server, lambda c: c.get(f"{path}/what-if", policy=policy or [], hours=hours))
    if json_:
        render.emit_json(item)
        return
    rows = [
        [p["policy"], p["processes"], f"{p['cpu_seconds']:.1f}", p["bytes_rewritten"], f"{p['files_per_scan']:.1f}"]
        for p in [item["actual"], *item["projections"]]
    ]
    title = f"{name}: {item['commits']} commits and {item['actual']['scans']} scans replayed"
    render.table(title, ["policy", "processes", "cpu s", "bytes rewritten", "files per scan"], rows)
    if item.get("note"):
        render.console.print(item["note"])


@table_app.command("run")
def table_run(
    identifier: TableArg,
    action: Annotated[
        str,
        typer.Argument(
            help="expire-snapshots, clean-orphan-files, clean-dangling-delete-files, "
            "expire-data, auto-create-tags or rewrite-manifests"
        ),
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="clean-orphan-files: list, delete nothing")] = False,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Run a maintenance action on a table now, on an optimizer of its group (see `process list`)."""
    path, _ = table_path(identifier)
    body = {"dry_run": True} if dry_run else {}
    item = call(server, lambda c: c.post(f"{path}/actions/{action}", body))
    if json_:
        render.emit_json(item)
    elif item["created"]:
        typer.echo(f"process {item['process_id']} created: {action} on {identifier}")
    else:
        typer.echo(f"no process created: {item['reason']}")
