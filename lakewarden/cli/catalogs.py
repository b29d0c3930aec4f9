"""`lakewarden catalog …`: the catalogs lakewarden watches — register, list, show, remove, refresh."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lakewarden.cli import render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, PropOpt, ServerOpt, call, fail, parse_properties, show

catalog_app = typer.Typer(help="Registered catalogs.", no_args_is_help=True)


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
