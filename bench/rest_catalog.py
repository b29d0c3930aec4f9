"""lakewarden's Iceberg REST catalog: loadTable/s and commits/s, sequential and with 8 concurrent clients,
and the reaction time from a commit that crosses a trigger to the table being queued for optimizing.

A real `lakewarden server` process (uvicorn, SQLite system database) serves an internal catalog.
Loads are `GET .../tables/{t}`; commits are `POST .../tables/{t}` setting a property (a new metadata
file and a pointer swap each); with N clients, client n works on table t<n>. Measured twice: with wrk
(an independent C client, when installed: the server's capacity) and with Python httpx threads
(which share the 2 cores with the server). Goals on 2 cores: >= 1,000 loads/s, >= 200 commits/s,
reaction <= 2 s.

    .venv/bin/python bench/rest_catalog.py [--loads 2000] [--commits 400] [--clients 8]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import admin_token, bar_chart, running_server, summary, write

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def run(workers: int, total: int, work: Any, headers: dict[str, str]) -> tuple[float, list[float]]:
    """`total` calls of work(client, i) spread over `workers` threads; (calls per second, latencies in ms)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        client = httpx.Client(timeout=30, headers=headers)
        mine: list[float] = []
        for i in range(w, total, workers):
            started = time.perf_counter()
            work(client, w, i)
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            latencies.extend(mine)
        client.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total / (time.perf_counter() - started), latencies


def wrk(
    url: str, connections: int, token: str, seconds: int = 5, script: Path | None = None
) -> tuple[float, dict[str, float]]:
    """Requests per second and latency percentiles (ms) from wrk: one thread per connection."""
    command = ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{seconds}s", "--latency"]
    command += ["-H", f"Authorization: Bearer {token}"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise SystemExit(f"wrk saw failed requests:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def ms(label: str) -> float:
        value, unit = re.search(rf"\s{label}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return rate, {"p50": ms("50%"), "p99": ms("99%")}


def commit_script(path: Path, prefix: str, uuids: list[str], token: str) -> Path:
    """A wrk script in which connection n commits to table t<n> only (a property change each time)."""
    quoted = ", ".join(f'"{u}"' for u in uuids)
    path.write_text(
        f"uuids = {{{quoted}}}\nnext_id = 0\ncounter = 0\n"
        "setup = function(thread)\n  thread:set('id', next_id)\n  next_id = next_id + 1\nend\n"
        "request = function()\n  counter = counter + 1\n"
        '  local body = \'{"requirements": [{"type": "assert-table-uuid", "uuid": "\' .. uuids[id + 1] .. \'"}], \''
        ' .. \'"updates": [{"action": "set-properties", "updates": {"n": "\' .. counter .. \'"}}]}\'\n'
        f"  return wrk.format('POST', '{prefix}/t' .. id, {{['Content-Type'] = 'application/json', "
        f"['Authorization'] = 'Bearer {token}'}}, body)\n"
        "end\n"
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
        settings = (
            "  evaluator: {interval: 10s, recheck-interval: 1min}\n"
            "catalogs: [{name: bench, type: internal}]\nresource-groups: [{name: default, container: local}]\n"
        )
        with running_server(tmp, settings) as root:
            token = admin_token(tmp)
            headers = {"Authorization": f"Bearer {token}"}
            catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
            catalog.create_namespace("db")
            tables = [catalog.create_table(f"db.t{i}", SCHEMA) for i in range(args.clients)]
            uuids = [str(t.metadata.table_uuid) for t in tables]
            base = f"{root}/iceberg/v1/bench/namespaces/db/tables"

            def load(client: httpx.Client, w: int, i: int) -> None:
                assert client.get(f"{base}/t{w}").status_code == 200

            def commit(client: httpx.Client, w: int, i: int) -> None:
                body = {
                    "requirements": [{"type": "assert-table-uuid", "uuid": uuids[w]}],
                    "updates": [{"action": "set-properties", "updates": {"n": str(i)}}],
                }
                response = client.post(f"{base}/t{w}", json=body)
                assert response.status_code == 200, response.text

            if shutil.which("wrk"):  # an independent client, so the server's capacity is what is measured
                script = commit_script(Path(tmp) / "commit.lua", "/iceberg/v1/bench/namespaces/db/tables", uuids, token)
                for name, lua in (("loads", None), ("commits", script)):
                    for label, connections in (("sequential", 1), (f"{args.clients} clients", args.clients)):
                        rate, stats = wrk(f"{base}/t0", connections, token, script=lua)
                        results[f"{name} {label} (wrk)"] = {"per_second": rate, "latency_ms": stats}
                        line = f"{rate:8.0f}/s   p50 {stats['p50']:.1f} ms   p99 {stats['p99']:.1f} ms"
                        print(f"{name:7s} {label:11s} {line} (wrk)")
            for name, work, total in (("loads", load, args.loads), ("commits", commit, args.commits)):
                for label, workers in (("sequential", 1), (f"{args.clients} clients", args.clients)):
                    rate, latencies = run(workers, total, work, headers)
                    results[f"{name} {label}"] = {"per_second": round(rate, 1), "latency_ms": summary(latencies)}
                    stats = summary(latencies)
                    print(
                        f"{name:7s} {label:11s} {rate:8.0f}/s   p50 {stats['p50']:.1f} ms   p99 {stats['p99']:.1f} ms"
                    )

            # reaction: the third small append crosses minor.trigger.file-count=3
            reactions = []
            trigger = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}
            for r in range(3):
                table = catalog.create_table(f"db.r{r}", SCHEMA, properties=trigger)
                for i in range(2):
                    table.append(pa.table({"id": pa.array([i], pa.int64())}))
                time.sleep(1.0)  # let the first commits' evaluations settle
                started = time.perf_counter()
                table.append(pa.table({"id": pa.array([9], pa.int64())}))
                while (
                    httpx.get(f"{root}/api/v1/tables/bench/db/r{r}", headers=headers).json().get("status") != "pending"
                ):
                    if time.perf_counter() - started > 30:
                        raise SystemExit("the table was not queued within 30 s")
                    time.sleep(0.01)
                reactions.append(time.perf_counter() - started)
            print(f"commit -> table queued for optimizing: {', '.join(f'{x:.2f} s' for x in reactions)} (goal <= 2 s)")
            results["reaction_seconds"] = [round(x, 3) for x in reactions]
    results["goals"] = {"loads_per_second": 1000, "commits_per_second": 200, "reaction_seconds": 2}
    write("rest_catalog", results)
    rates = {k: v["per_second"] for k, v in results.items() if isinstance(v, dict) and "per_second" in v}
    bar_chart("rest_catalog", "lakewarden's Iceberg REST catalog on 2 cores", rates, "requests per second")


if __name__ == "__main__":
    main()
