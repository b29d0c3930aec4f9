"""`lakewarden principal …`, `lakewarden token …`, `lakewarden grant …`: who may call the server.

The CLI authenticates with LAKEWARDEN_TOKEN, or the admin token the server's first start wrote to
its data directory (see cli/client.py). A new token is printed once; only its hash is kept.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from lakewarden.cli import render
from lakewarden.cli._common import DEFAULT_SERVER, JsonOpt, ServerOpt, call, fail

principal_app = typer.Typer(help="Users and services that may call the server, and their roles.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens: create (shown once), list, revoke.", no_args_is_help=True)
grant_app = typer.Typer(help="REST catalog grants: read or write on a catalog or a namespace.", no_args_is_help=True)


@principal_app.command("create")
def principal_create(
    name: str,
    role: Annotated[str, typer.Option(help="viewer | operator | admin")] = "viewer",
    kind: Annotated[str, typer.Option(help="user | service")] = "user",
    password_env: Annotated[
        str | None, typer.Option(help="Name of an environment variable holding the user's password (dashboard)")
    ] = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Create a principal (then give it a token with `lakewarden token create`)."""
    body: dict[str, str] = {"name": name, "role": role, "kind": kind}
    if password_env:
        password = os.environ.get(password_env)
        if not password:
            fail(f"--password-env {password_env}: the variable is not set")
        body["password"] = password
    created = call(server, lambda c: c.post("/principals", body))
    if json_:
        render.emit_json(created)
    else:
        typer.echo(f"created {created['kind']} {created['name']} with role {created['role']}")


@principal_app.command("list")
def principal_list(server: ServerOpt = DEFAULT_SERVER, json_: JsonOpt = False) -> None:
    """Principals with their roles and grants."""
    items = call(server, lambda c: c.get("/principals"))
    if json_:
        render.emit_json(items)
        return
    rows = [
        [p["name"], p["kind"], p["role"], ", ".join(f"{g['privilege']} on {g['target']}" for g in p["grants"])]
        for p in items
    ]
    render.table("principals", ["name", "kind", "role", "grants"], rows)


@principal_app.command("set-role")
def principal_set_role(name: str, role: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Change a principal's role (the last admin cannot lose it)."""
    changed = call(server, lambda c: c.put(f"/principals/{name}", {"role": role}))
    typer.echo(f"{changed['name']} is now {changed['role']}")


@principal_app.command("delete")
def principal_delete(name: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Delete a principal with its tokens and grants."""
    call(server, lambda c: c.delete(f"/principals/{name}"))
    typer.echo(f"deleted {name}")


@token_app.command("create")
def token_create(
    principal: str,
    name: Annotated[str, typer.Option(help="What the token is for")] = "token",
    expires_in: Annotated[str | None, typer.Option(help="e.g. 30d, 12h (default: until revoked)")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Create a token for a principal, printed once (Spark, pyiceberg: token=… or credential=<principal>:<token>)."""
    body = {"name": name, **({"expires_in": expires_in} if expires_in else {})}
    created = call(server, lambda c: c.post(f"/principals/{principal}/tokens", body))
    if json_:
        render.emit_json(created)
    else:
        typer.echo(created["token"])
        typer.echo(f"(token {created['token_id']} of {principal}: shown this once)", err=True)


@token_app.command("list")
def token_list(
    principal: Annotated[str | None, typer.Option(help="Only this principal's")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    json_: JsonOpt = False,
) -> None:
    """Tokens (never their secrets): id, principal, name, created, expires, revoked."""
    items = call(server, lambda c: c.get("/tokens", principal=principal))
    if json_:
        render.emit_json(items)
        return
    rows = [
        [t["token_id"], t["principal"], t["name"], t["created_at"], t["expires_at"] or "", t["revoked_at"] or ""]
        for t in items
    ]
    render.table("tokens", ["id", "principal", "name", "created", "expires", "revoked"], rows)


@token_app.command("revoke")
def token_revoke(token_id: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Revoke a token (and the access tokens obtained with it)."""
    call(server, lambda c: c.delete(f"/tokens/{token_id}"))
    typer.echo(f"revoked {token_id}")


@grant_app.command("add")
def grant_add(
    principal: str,
    target: Annotated[str, typer.Argument(help="catalog or catalog.namespace")],
    privilege: Annotated[str, typer.Argument(help="read | write")],
    server: ServerOpt = DEFAULT_SERVER,
) -> None:
    """Grant read or write on a catalog (or a namespace of it and below) of lakewarden's REST catalog."""
    call(server, lambda c: c.post(f"/principals/{principal}/grants", {"target": target, "privilege": privilege}))
    typer.echo(f"granted {privilege} on {target} to {principal}")


@grant_app.command("remove")
def grant_remove(principal: str, target: str, server: ServerOpt = DEFAULT_SERVER) -> None:
    """Remove a principal's grant on a target."""
    call(server, lambda c: c.delete(f"/principals/{principal}/grants/{target}"))
    typer.echo(f"removed the grant on {target} from {principal}")
