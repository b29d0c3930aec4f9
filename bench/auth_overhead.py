"""The cost of authentication in lakewarden's REST catalog: loads and commits per second with every
request authenticated (an API token, and an OAuth2 access token from client credentials) against the
same server build with `ams.auth.enabled: false`, side by side in one run.

Three real `lakewarden server` processes (uvicorn, SQLite), one per variant, each serve an internal
catalog with the same tables and take the same requests; the runs alternate between them in an order
rotated each round, so drift hits all, and the median of the rounds is compared. Clients: wrk when
installed (an independent C client), else Python httpx threads. On a shared 2-core machine a single
round varies by +-20%, so the end-to-end ratios are medians of several rounds, and the cost is also
measured directly: the server's own check of a request (credential parsed, looked up in the cache,
route role and grant checked), timed in process, as a share of the time a request takes without auth.
Goal: auth costs < 5% of throughput.

    .venv/bin/python bench/auth_overhead.py [--rounds 7] [--seconds 3] [--clients 4]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.catalog.rest import RestCatalog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write
from bench.rest_catalog import SCHEMA, Client

GOAL = 0.95
PAUSE_SECONDS = 3.0
SETTINGS = (
    "  evaluator: {{interval: 10s, recheck-interval: 1min}}\n{auth}"
    "catalogs: [{{name: bench, type: internal}}]\nresource-groups: [{{name: default, container: local}}]\n"
)


def prepare(root: str, token: str | None, clients: int) -> list[str]:
    """Namespace `db` with tables t0..t<clients-1>; their uuids."""
    catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", **({"token": token} if token else {}))
    catalog.create_namespace("db")
    return [str(catalog.create_table(f"db.t{i}", SCHEMA).metadata.table_uuid) for i in range(clients)]


def access_token(root: str, token: str) -> str:
    """An OAuth2 access token for the admin, by client credentials (what `credential=` does)."""
    body = {"grant_type": "client_credentials", "client_id": "admin", "client_secret": token}
    response = httpx.post(f"{root}/iceberg/v1/oauth/tokens", data=body)
    response.raise_for_status()
    return str(response.json()["access_token"])


def measure(kind: str, root: str, bearer: str | None, uuids: list[str], tmp: Path, clients: int, seconds: int) -> float:
    """Requests per second of `kind` (loads or commits), with `clients` concurrent clients (wrk, or httpx
    threads without it: bench/rest_catalog.Client)."""
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    client = Client(root, "/iceberg/v1/bench/namespaces/db/tables", headers, uuids, tmp, seconds)
    measured = client.loads(clients) if kind == "loads" else client.commits(clients)
    return float(measured["per_second"])


def check_cost(data_dir: str, token: str, jwt: str, calls: int = 20_000) -> dict[str, float]:
    """Microseconds per request of the server's check, in process on the benchmark server's database:
    what `authorize_catalog` does for a GET of a table (authenticate, cached after the first call, and
    the grant check)."""
    import asyncio

    from starlette.requests import Request

    from lakewarden.api.auth import authorize_catalog
    from lakewarden.config import load_config
    from lakewarden.services.access.auth import AuthService
    from lakewarden.store.database import Database

    config = load_config(Path(data_dir) / "lakewarden.yaml")
    db = Database(config.database_url)
    auth = AuthService(db, config.ams.auth, config.data_dir)

    class App:  # what the check reaches through request.app
        class state:
            class context:
                pass

    App.state.context.auth = auth  # type: ignore[attr-defined]
    path = "/iceberg/v1/bench/namespaces/db/tables/t0"
    params = {"prefix": "bench", "namespace": "db", "table": "t0"}
    costs = {}
    for name, bearer in (("API token", token), ("OAuth2 access token", jwt)):
        headers = [(b"authorization", f"Bearer {bearer}".encode())]

        def request(headers: list[tuple[bytes, bytes]] = headers) -> Request:
            scope: dict[str, Any] = {"type": "http", "method": "GET", "path": path, "headers": headers}
            scope.update(path_params=params, app=App)
            return Request(scope)

        async def checks() -> float:
            await authorize_catalog(request())  # the first call fills the cache
            started = time.perf_counter()
            for _ in range(calls):
                await authorize_catalog(request())
            return (time.perf_counter() - started) / calls * 1e6

        costs[name] = round(asyncio.run(checks()), 2)
    db.dispose()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with ExitStack() as stack:
        # one server per variant: each takes the same commits, so none serves with another's backlog
        dirs = {
            name: stack.enter_context(tempfile.TemporaryDirectory(prefix=f"lakewarden-bench-auth-{i}-"))
            for i, name in enumerate(("auth off", "API token", "OAuth2 access token"))
        }
        roots = {
            name: stack.enter_context(
                running_server(tmp, SETTINGS.format(auth="  auth: {enabled: false}\n" if name == "auth off" else ""))
            )
            for name, tmp in dirs.items()
        }
        token = admin_token(dirs["API token"])
        oauth_token = admin_token(dirs["OAuth2 access token"])
        jwt = access_token(roots["OAuth2 access token"], oauth_token)
        bearers = {"auth off": None, "API token": token, "OAuth2 access token": jwt}
        variants: dict[str, tuple[str, str | None, list[str], str]] = {
            name: (roots[name], bearers[name], prepare(roots[name], bearers[name], args.clients), dirs[name])
            for name in dirs
        }
        rounds: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
        client = "wrk" if shutil.which("wrk") else "httpx threads"
        print(f"{args.rounds} rounds of {args.seconds} s per variant, {args.clients} clients ({client})")
        names = list(variants)
        for r in range(args.rounds):
            # every kind in its own phase, after a pause that lets the servers finish reacting to the last
            # commits (events, evaluations); the variants in an order rotated each round
            order = names[r % len(names) :] + names[: r % len(names)]
            for kind in ("loads", "commits"):
                time.sleep(PAUSE_SECONDS)
                for name in order:
                    root, bearer, uuids, tmp = variants[name]
                    rate = measure(kind, root, bearer, uuids, Path(tmp), args.clients, args.seconds)
                    rounds[name].setdefault(kind, []).append(rate)
                    print(f"round {r + 1}  {kind:8s} {name:20s} {rate:7.0f}/s")
        check_us = check_cost(dirs["OAuth2 access token"], oauth_token, jwt)
    medians = {
        name: {kind: statistics.median(values[kind]) for kind in ("loads", "commits")}
        for name, values in rounds.items()
    }
    base = medians["auth off"]
    results: dict[str, Any] = {"client": client, "clients": args.clients, "rounds": rounds, "medians": medians}
    ratios: dict[str, float] = {}
    for name in ("API token", "OAuth2 access token"):
        for kind in ("loads", "commits"):
            ratio = medians[name][kind] / base[kind]
            ratios[f"{kind}, {name}"] = round(ratio, 3)
            verdict = "ok" if ratio >= GOAL else "MISSED"
            print(
                f"{kind:8s} {name:20s} {medians[name][kind]:7.0f}/s vs {base[kind]:7.0f}/s off: {ratio:.3f} ({verdict})"
            )
    results["ratios_vs_auth_off"] = ratios
    results["goal_ratio"] = GOAL
    results["check_microseconds"] = check_us
    for name, micros in check_us.items():
        for kind in ("loads", "commits"):
            share = micros / (1e6 / base[kind])
            results.setdefault("check_share_of_request", {})[f"{kind}, {name}"] = round(share, 5)
            print(f"the check itself, {name:20s} {micros:6.1f} us = {share:.2%} of a {kind[:-1]} without auth")
    write("auth_overhead", results)
    bar_chart("auth_overhead", "REST throughput with auth, relative to auth off", ratios, "ratio", goal=GOAL)


if __name__ == "__main__":
    main()
