"""`lakewarden group …`: resource groups and the optimizers their containers keep."""

from __future__ import annotations

from typing import Annotated

import typer

from lakewarden.cli import render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, PropOpt, ServerOpt, call, parse_properties
from lakewarden.cli.processes import usage_text

group_app = typer.Typer(help="Resource groups.", no_args_is_help=True)


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
