"""The `lakewarden` command: the server, and client commands over its HTTP API."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from lakewarden.cli import formats, render
from lakewarden.cli._common import (
    DEFAULT_SERVER,
    JsonOpt,
    PropOpt,
    ServerOpt,
    call,
    fail,
    parse_properties,
    show,
    table_path,
)
from lakewarden.cli.client import local_token
from lakewarden.cli.processes import process_app, result_text, usage_text
from lakewarden.cli.security import grant_app, principal_app, token_app
from lakewarden.domain.errors import LakewardenError

app = typer.Typer(help="lakewarden: lakehouse table management for Apache Iceberg.", no_args_is_help=True)
catalog_app = typer.Typer(help="Registered catalogs.", no_args_is_help=True)
group_app = typer.Typer(help="Resource groups.", no_args_is_help=True)
table_app = typer.Typer(help="Managed tables.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(group_app, name="group")
app.add_typer(table_app, name="table")
app.add_typer(process_app, name="process")
app.add_typer(principal_app, name="principal")
app.add_typer(token_app, name="token")
app.add_typer(grant_app, name="grant")


@app.command()
def server(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", envvar="LAKEWARDEN_CONFIG", help="YAML config file")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Run the lakewarden server (HTTP API, catalogs, scheduler services)."""
    from lakewarden.config import load_config
    from lakewarden.server import serve
    from lakewarden.store.claim import DatabaseInUse

    try:
        cfg = load_config(config)
    except LakewardenError as exc:
        fail(f"invalid config: {exc}")
    try:
        serve(cfg, log_level)
    except DatabaseInUse as exc:
        fail(str(exc))


@app.command()
def optimizer(
    group: Annotated[str, typer.Option(help="The resource group whose tasks to run")] = "default",
    parallelism: Annotated[int, typer.Option(min=1, max=256, help="Executor threads (and local[N] cores)")] = 1,
    spark_master: Annotated[str | None, typer.Option(help="Spark master; default local[parallelism]")] = None,
    driver_memory: Annotated[str, typer.Option(help="Spark driver memory")] = "2g",
    java_options: Annotated[
        str | None,
        typer.Option(help="Options of Spark's JVMs, not under spark-submit (default: -XX:+UseParallelGC)"),
    ] = None,
    resource_id: Annotated[str | None, typer.Option(hidden=True)] = None,
    server: Annotated[
        str,
        typer.Option(
            "--server",
            envvar="LAKEWARDEN_SERVER",
            help="URL of the lakewarden server, or the URLs of its nodes, comma-separated (high availability)",
        ),
    ] = DEFAULT_SERVER,
) -> None:
    """Run an optimizer: a PySpark application that pulls self-optimizing tasks of one group from the server."""
    from lakewarden.optimizer.app import JAVA_OPTIONS, Optimizer, leave
    from lakewarden.optimizer.client import ProtocolError
    from lakewarden.server import configure_logging

    configure_logging()
    if not any(url.strip() for url in server.split(",")):
        fail("--server: give the server's URL (or its nodes' URLs, comma-separated)")
    try:
        Optimizer(
            server,
            group,
            parallelism,
            spark_master,
            resource_id,
            driver_memory,
            credential=local_token(),
            java_options=JAVA_OPTIONS if java_options is None else java_options,
        ).run()
    except ProtocolError as exc:
        fail(str(exc))
    except httpx.ConnectError as exc:
        fail(f"cannot reach the lakewarden server at {server}: {exc}")
    leave(0)


@app.command()
def demo(
    minutes: Annotated[float, typer.Option(min=0.1, max=600, help="How long the writer streams")] = 3.0,
    tables: Annotated[int, typer.Option(min=1, max=20, help="Tables written to")] = 3,
    rows: Annotated[int, typer.Option(min=1, max=1_000_000, help="Rows per append")] = 200,
    merge_every: Annotated[int, typer.Option(min=2, max=1000, help="Every n-th commit is a MERGE update")] = 4,
    data_dir: Annotated[Path | None, typer.Option(help="Keep everything here (default: a temporary dir)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Server port (default 1630 or a free one)")] = None,
    storage: Annotated[
        str, typer.Option(help="local (the embedded default) or s3: an S3 server of the demo's own (moto)")
    ] = "local",
) -> None:
    """The main job, live: a server on the embedded default, a writer making small files, lakewarden compacting them."""
    from lakewarden.cli.demo import DemoError, DemoOptions, run_demo

    try:
        code = run_demo(
            DemoOptions(
                minutes=minutes,
                tables=tables,
                rows=rows,
                merge_every=merge_every,
                data_dir=data_dir,
                port=port,
                storage=storage,
            )
        )
    except DemoError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command("setup-spark")
def setup_spark(
    submit_args: Annotated[
        bool,
        typer.Option(
            "--submit-args",
            help="Print the spark-submit arguments of an optimizer instead: the jars, and the program to run "
            "(follow them with `lakewarden optimizer`'s options)",
        ),
    ] = False,
    submit_command: Annotated[
        bool, typer.Option("--submit-command", help="The same, after the path of pyspark's own spark-submit")
    ] = False,
    deploy_mode: Annotated[
        str,
        typer.Option(
            "--deploy-mode",
            help="For --submit-args/--submit-command: client (the driver here) or cluster (YARN, Kubernetes)",
        ),
    ] = "client",
    maven: Annotated[
        bool,
        typer.Option("--maven", help="For --submit-args/--submit-command: --packages from Maven Central, no jars"),
    ] = False,
) -> None:
    """Build (or reuse) the Spark jars: Iceberg runtime, relocated dependencies, JDBC drivers."""
    from lakewarden.spark.jars import JarSetupError, ensure_spark_jars
    from lakewarden.spark.submit import DEPLOY_MODES, optimizer_submit_arguments, spark_submit_path

    if deploy_mode not in DEPLOY_MODES:
        fail(f"--deploy-mode {deploy_mode!r}: use one of {', '.join(DEPLOY_MODES)}")
    try:
        if submit_args or submit_command:
            arguments = optimizer_submit_arguments(deploy_mode, maven)
            if submit_command:
                arguments.insert(0, spark_submit_path())
            typer.echo(" ".join(shlex.quote(a) for a in arguments))
            return
        jars = ensure_spark_jars()
    except JarSetupError as exc:
        fail(str(exc))
    for jar in jars.jars:
        typer.echo(jar)


# ---- catalogs


def _catalog_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [c["name"], c["type"], c["health"], c["table_count"], c["last_refresh_at"], c["last_error"] or ""]
        for c in items
    ]


@catalog_app.command("add")
def catalog_add(
    name: str,
    type_: Annotated[
        str, typer.Option("--type", "-t", help="internal | sql | rest | hive | glue | filesystem | hudi | paimon")
    ],
    uri: Annotated[
        str | None, typer.Option(help="SQLAlchemy URL (sql), http(s) URL (rest) or thrift://host:port (hive)")
    ] = None,
    warehouse: Annotated[str | None, typer.Option(help="Warehouse location")] = None,
    prop: PropOpt = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Register a catalog."""
    properties = parse_properties(prop)
    if uri is not None:
        properties["uri"] = uri
    if warehouse is not None:
        properties["warehouse"] = warehouse
    created = call(server, lambda c: c.post("/catalogs", {"name": name, "type": type_, "properties": properties}))
    if json_:
        render.emit_json(created)
    else:
        typer.echo(f"catalog {created['name']} registered")


@catalog_app.command("list")
def catalog_list(server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """List registered catalogs with their health."""
    items = call(server, lambda c: c.get("/catalogs"))
    if json_:
        render.emit_json(items)
    else:
        render.table("catalogs", ["name", "type", "health", "tables", "last refresh", "error"], _catalog_rows(items))


@catalog_app.command("show")
def catalog_show(name: str, server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """Show one catalog."""
    item = show(server, f"/catalogs/{name}", json_)
    if item is None:
        return
    pairs = [(k, item[k]) for k in ("name", "type", "health", "table_count", "last_refresh_at", "last_error")]
    pairs += [(f"property {k}", v) for k, v in sorted(item["properties"].items())]
    render.key_values(f"catalog {name}", pairs)


@catalog_app.command("rm")
def catalog_rm(name: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Unregister a catalog (its tables are left untouched)."""
    call(server, lambda c: c.delete(f"/catalogs/{name}"))
    typer.echo(f"catalog {name} removed")


@catalog_app.command("refresh")
def catalog_refresh(name: str, server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """Explore a catalog now: add new tables, dispose dropped ones."""
    result = call(server, lambda c: c.post(f"/catalogs/{name}/refresh"))
    if json_:
        render.emit_json(result)
        return
    if result["error"]:
        fail(f"catalog {name} is unhealthy: {result['error']}")
    typer.echo(
        f"catalog {name} is {result['health']}: {result['tables']} tables, {len(result['added'])} added, "
        f"{len(result['updated'])} updated, {len(result['disposed'])} disposed ({result['duration_ms']} ms)"
    )


# ---- resource groups


@group_app.command("add")
def group_add(
    name: str,
    container: Annotated[str, typer.Option(help="A container from the server config")] = "local",
    prop: PropOpt = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Create a resource group."""
    body = {"name": name, "container": container, "properties": parse_properties(prop)}
    created = call(server, lambda c: c.post("/resource-groups", body))
    if json_:
        render.emit_json(created)
    else:
        typer.echo(f"resource group {created['name']} created")


@group_app.command("list")
def group_list(server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """List resource groups."""
    items = call(server, lambda c: c.get("/resource-groups"))
    if json_:
        render.emit_json(items)
        return
    rows = [
        [
            g["name"],
            g["container"],
            g["table_count"],
            f"{g['usage'].get('spark_cpu_ms', 0) / 1000:.1f}",
            f"{g['usage'].get('cost', 0):.4f} {g['currency']}".rstrip(),
            ", ".join(f"{k}={v}" for k, v in sorted(g["properties"].items())),
        ]
        for g in items
    ]
    render.table("resource groups", ["name", "container", "tables", "spark cpu s", "cost", "properties"], rows)


@group_app.command("show")
def group_show(name: str, server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """A group and its optimizers: threads, resource id, last heartbeat."""
    group = call(server, lambda c: c.get(f"/resource-groups/{name}"))
    optimizers = call(server, lambda c: c.get(f"/resource-groups/{name}/optimizers"))
    if json_:
        render.emit_json({**group, "optimizers": optimizers})
        return
    pairs = [(k, group[k]) for k in ("name", "container", "table_count")]
    pairs.append(("cost of its processes", usage_text(group["usage"], group["currency"]) or "nothing yet"))
    if group.get("container_error"):
        pairs.append(("container error", group["container_error"]))
    render.key_values(f"resource group {name}", pairs + sorted(group["properties"].items()))
    rows = [
        [
            o["optimizer_id"],
            o["resource_id"] or "(external)",
            o["threads"],
            o["host"],
            " ".join(x for x in (o.get("spark_application_id"), o.get("spark_master"), o.get("spark_ui_url")) if x),
            o["last_heartbeat_at"],
        ]
        for o in optimizers
    ]
    render.table("optimizers", ["id", "resource", "threads", "host", "spark application", "last heartbeat"], rows)


@group_app.command("scale")
def group_scale(
    name: str,
    instances: Annotated[int, typer.Option(min=0, max=64, help="Optimizers the container keeps alive")],
    server: ServerOpt = DEFAULT_SERVER,
) -> None:
    """Scale out or release the optimizers a group's container keeps alive."""
    call(server, lambda c: c.post(f"/resource-groups/{name}/scale", {"instances": instances}))
    typer.echo(f"resource group {name}: {instances} optimizer instance(s)")


@group_app.command("rm")
def group_rm(name: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Delete a resource group no table uses."""
    call(server, lambda c: c.delete(f"/resource-groups/{name}"))
    typer.echo(f"resource group {name} removed")


# ---- tables


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
    identifier: Annotated[str, typer.Argument(help="catalog.database.table")],
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
    identifier: Annotated[str, typer.Argument(help="catalog.database.table")],
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
    identifier: Annotated[str, typer.Argument(help="catalog.database.table")],
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
    identifier: Annotated[str, typer.Argument(help="catalog.database.table")],
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
