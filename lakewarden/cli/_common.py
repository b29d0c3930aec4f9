"""What every CLI command shares: the server option, JSON output, one-line errors, calling the API."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from lakewarden.cli import render
from lakewarden.cli.client import AmsClient, ClientError
from lakewarden.domain.errors import LakewardenError

DEFAULT_SERVER = "http://127.0.0.1:1630"
ServerOpt = Annotated[str, typer.Option("--server", envvar="LAKEWARDEN_SERVER", help="URL of the lakewarden server")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts")]
PropOpt = Annotated[list[str] | None, typer.Option("--property", "-p", help="key=value (repeatable)")]


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def call(server: str, fn: Any) -> Any:
    try:
        return fn(AmsClient(server))
    except ClientError as exc:
        fail(str(exc))


def parse_properties(pairs: list[str] | None) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--property {pair!r}: expected key=value")
        properties[key.strip()] = value
    return properties


def table_path(identifier: str) -> tuple[str, str]:
    """The API path of `catalog.database.table`, and the name as given; a malformed one is a CLI error."""
    from lakewarden.domain.tables import TableIdentifier

    try:
        name = TableIdentifier.parse(identifier)
    except LakewardenError as exc:
        fail(str(exc))
    return f"/tables/{name.catalog}/{name.database}/{name.table}", str(name)


def show(server: str, path: str, as_json: bool) -> dict[str, Any] | None:
    """GET one resource; with --json print it and return None, else return it for rendering."""
    item: dict[str, Any] = call(server, lambda c: c.get(path))
    if as_json:
        render.emit_json(item)
        return None
    return item
