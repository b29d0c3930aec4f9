"""The cost of authentication in lakewarden's REST catalog: loads and commits per second with every
request authenticated (an API token, and an OAuth2 access token from client credentials) against the
same server build with `ams.auth.enabled: false`, side by side in one run.

Two real `lakewarden server` processes (uvicorn, SQLite) each serve an internal catalog with the same
tables; the runs alternate between them (on, off, on, off, …) so drift hits both, and the median of
the rounds is compared. Clients: wrk when installed (an independent C client), else Python httpx
threads. Goal: authenticated throughput >= 95% of unauthenticated (auth costs < 5%).

    .venv/bin/python bench/auth_overhead.py [--rounds 3] [--seconds 5] [--clients 4]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.catalog.rest import RestCatalog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, write
from bench.rest_catalog import SCHEMA, commit_script, run, wrk

GOAL = 0.95
SETTINGS = (
    "  evaluator: {interval: 10s, recheck-interval: 1min}\n{auth}"
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


def measure(root: str, bearer: str | None, uuids: list[str], tmp: Path, clients: int, seconds: int) -> dict[str, float]:
    """Requests per second: loads and commits, with `clients` concurrent clients."""
    base = f"{root}/iceberg/v1/bench/namespaces/db/tables"
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    if shutil.which("wrk"):
        script = commit_script(
            tmp / f"commit-{abs(hash(root))}.lua", "/iceberg/v1/bench/namespaces/db/tables", uuids, bearer or ""
        )
        loads, _ = wrk(f"{base}/t0", clients, bearer or "", seconds=seconds)
        commits, _ = wrk(f"{base}/t0", clients, bearer or "", seconds=seconds, script=script)
        return {"loads": loads, "commits": commits}

    def load(client: httpx.Client, w: int, i: int) -> None:
        assert client.get(f"{base}/t{w}").status_code == 200

    def commit(client: httpx.Client, w: int, i: int) -> None:
        body = {
            "requirements": [{"type": "assert-table-uuid", "uuid": uuids[w]}],
            "updates": [{"action": "set-properties", "updates": {"n": str(i)}}],
        }
        assert client.post(f"{base}/t{w}", json=body).status_code == 200

    loads, _ = run(clients, 400 * seconds, load, headers)
    commits, _ = run(clients, 60 * seconds, commit, headers)
    return {"loads": loads, "commits": commits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    with ExitStack() as stack:
        on_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="lakewarden-bench-auth-on-"))
        off_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="lakewarden-bench-auth-off-"))
        on = stack.enter_context(running_server(on_dir, SETTINGS.format(auth="")))
        off = stack.enter_context(running_server(off_dir, SETTINGS.format(auth="  auth: {enabled: false}\n")))
        token = admin_token(on_dir)
        uuids_on = prepare(on, token, args.clients)
        uuids_off = prepare(off, None, args.clients)
        jwt = access_token(on, token)
        variants: dict[str, tuple[str, str | None, list[str], str]] = {
            "auth off": (off, None, uuids_off, off_dir),
            "API token": (on, token, uuids_on, on_dir),
            "OAuth2 access token": (on, jwt, uuids_on, on_dir),
        }
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        client = "wrk" if shutil.which("wrk") else "httpx threads"
        print(f"{args.rounds} rounds of {args.seconds} s per variant, {args.clients} clients ({client})")
        for r in range(args.rounds):
            for name, (root, bearer, uuids, tmp) in variants.items():
                rates = measure(root, bearer, uuids, Path(tmp), args.clients, args.seconds)
                rounds[name].append(rates)
                print(f"round {r + 1}  {name:20s} loads {rates['loads']:7.0f}/s   commits {rates['commits']:6.0f}/s")
    medians = {
        name: {kind: statistics.median(x[kind] for x in values) for kind in ("loads", "commits")}
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
    write("auth_overhead", results)
    bar_chart("auth_overhead", "REST throughput with auth, relative to auth off", ratios, "ratio", goal=GOAL)


if __name__ == "__main__":
    main()
