"""lakewarden's Iceberg REST catalog against the floor of its own stack, on SQLite and on PostgreSQL.

Two floors are measured in the same run, on the same machine and with the same client:
- **static body**: uvicorn + Starlette (what lakewarden runs on) answering a route of the same shape with a
  body of the size of the table's loadTable answer, from memory (`bench/floor_server.py`);
- **compare-and-swap**: a Python loop doing a commit's irreducible work: the table's metadata (as lakewarden's
  commits left it, just before: with its metadata log) serialised as JSON, written to a new file, and the
  pointer row compare-and-swapped in one transaction of the system database (SQLite with the server's pragmas,
  or PostgreSQL).
lakewarden is then a real `lakewarden server` process: loads are `GET .../tables/{t}`, commits are
`POST .../tables/{t}` setting a property (a new metadata file, the pointer swapped, a timeline entry and
an event each); with N clients, client n works on table t<n>. The client is wrk when installed (an
independent C client: the server's capacity), else Python httpx threads. Before the rounds each table takes
110 commits (its metadata log at Iceberg's bound of 100, as a long-written table's). Reported as ratios to the
floors (the median of `--rounds` rounds, each measuring lakewarden and the floors one right after the other; the
compare-and-swap loop runs half its time just before lakewarden's sequential commits and half just after);
goals: loads >= 0.5x the static body, commits >= 0.25x compare-and-swap. Also: the reaction
time from a commit that crosses a trigger to the table being queued for optimizing (goal <= 2 s); and, without
goals, what the stack lakewarden is built on costs by itself: a FastAPI application serving the same static body
(beside the floor in each round), and pyiceberg's share of a commit in process (parse, apply, serialise). Each of
lakewarden's measures also gives the server's CPU per request, its event loop's thread apart from the others.

    .venv/bin/python bench/rest_catalog.py [--seconds 5] [--clients 8] [--rounds 3] [--backends sqlite,postgresql]
        [--flame]

`--flame` (with py-spy installed: `pip install py-spy`) records the server during the last round's 8-client
loads and sequential commits on each backend: `results/rest_catalog_<backend>_<loads|commits>.svg`, where the time
goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import RESULTS, admin_token, bar_chart, free_port, running_server, server_pid, summary, write
from tests.postgres import fresh_database, postgres_server

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
GOALS = {"loads": 0.5, "commits": 0.25}
LOG_BOUND = 100  # Iceberg's write.metadata.previous-versions-max, by default
FLOOR_SERVER = Path(__file__).resolve().parent / "floor_server.py"


def wrk(
    url: str, connections: int, seconds: int, headers: dict[str, str], script: Path | None = None
) -> dict[str, Any]:
    """Requests per second and latency percentiles (ms) from wrk: one thread per connection."""
    command = ["wrk", "-t", str(connections), "-c", str(connections), "-d", f"{seconds}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise SystemExit(f"wrk saw failed requests:\n{out}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def ms(label: str) -> float:
        value, unit = re.search(rf"\s{label}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return {"per_second": round(rate, 1), "p50_ms": ms("50%"), "p99_ms": ms("99%")}


def threads(connections: int, seconds: float, call: Callable[[httpx.Client, int, int], None]) -> dict[str, Any]:
    """The same measure with Python httpx threads (they share the cores with the server)."""
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def worker(w: int) -> None:
        mine: list[float] = []
        with httpx.Client(timeout=30) as client:
            i = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                call(client, w, i)
                mine.append((time.perf_counter() - started) * 1000)
                i += 1
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    workers = [threading.Thread(target=worker, args=(w,)) for w in range(connections)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stats = summary(latencies)
    return {"per_second": round(len(latencies) / (time.perf_counter() - started), 1), **_ms(stats)}


def _ms(stats: dict[str, float]) -> dict[str, float]:
    return {"p50_ms": round(stats["p50"], 3), "p99_ms": round(stats["p99"], 3)}


def commit_body(table_uuid: str, n: int) -> dict[str, Any]:
    return {
        "requirements": [{"type": "assert-table-uuid", "uuid": table_uuid}],
        "updates": [{"action": "set-properties", "updates": {"n": str(n)}}],
    }


def commit_script(path: Path, prefix: str, uuids: list[str], headers: dict[str, str]) -> Path:
    """A wrk script in which connection n commits to table t<n> only (a property change each time). Its
    requests carry their own headers (wrk's -H ones are not added to a scripted request)."""
    quoted = ", ".join(f'"{u}"' for u in uuids)
    extra = "".join(f", ['{name}'] = '{value}'" for name, value in headers.items())
    path.write_text(
        f"uuids = {{{quoted}}}\nnext_id = 0\ncounter = 0\n"
        "setup = function(thread)\n  thread:set('id', next_id)\n  next_id = next_id + 1\nend\n"
        "request = function()\n  counter = counter + 1\n"
        '  local body = \'{"requirements": [{"type": "assert-table-uuid", "uuid": "\' .. uuids[id + 1] .. \'"}], \''
        ' .. \'"updates": [{"action": "set-properties", "updates": {"n": "\' .. counter .. \'"}}]}\'\n'
        f"  return wrk.format('POST', '{prefix}/t' .. id, {{['Content-Type'] = 'application/json'{extra}}}, body)\n"
        "end\n"
    )
    return path


class Client:
    """Loads and commits against one server, by wrk or by httpx threads."""

    def __init__(self, root: str, prefix: str, headers: dict[str, str], uuids: list[str], tmp: Path, seconds: int):
        self.root, self.prefix, self.headers, self.uuids, self.seconds = root, prefix, headers, uuids, seconds
        self.wrk = shutil.which("wrk") is not None
        self.script = (
            commit_script(tmp / f"commit-{uuid.uuid4().hex}.lua", prefix, uuids, headers) if self.wrk else None
        )

    def loads(self, connections: int) -> dict[str, Any]:
        if self.wrk:
            return wrk(f"{self.root}{self.prefix}/t0", connections, self.seconds, self.headers)

        def load(client: httpx.Client, w: int, i: int) -> None:
            assert client.get(f"{self.root}{self.prefix}/t0", headers=self.headers).status_code == 200

        return threads(connections, self.seconds, load)

    def commits(self, connections: int) -> dict[str, Any]:
        if self.wrk:
            return wrk(f"{self.root}{self.prefix}/t0", connections, self.seconds, self.headers, self.script)

        def commit(client: httpx.Client, w: int, i: int) -> None:
            url = f"{self.root}{self.prefix}/t{w}"
            response = client.post(url, json=commit_body(self.uuids[w], i), headers=self.headers)
            assert response.status_code == 200, response.text

        return threads(connections, self.seconds, commit)


def thread_cpu(pid: int) -> dict[int, int]:
    """CPU time (clock ticks, user + system) of each thread of process `pid`, by thread id (Linux's /proc)."""
    ticks: dict[int, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


def with_server_cpu(pid: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`measure` (a wrk or httpx run against the server `pid`), with the server's CPU per request split into its
    event loop's thread and every other thread (the commits' workers, the services): what the requests cost the
    server, apart from the wall clock the machine's other load moves. Python runs one thread at a time, so
    the two together bound the rate."""
    before = thread_cpu(pid)
    started = time.perf_counter()
    result = measure()
    elapsed = time.perf_counter() - started
    after = thread_cpu(pid)
    spent = {tid: after[tid] - before.get(tid, 0) for tid in after}
    requests = max(result["per_second"] * elapsed, 1.0)
    per_tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    loop = spent.get(pid, 0) * per_tick_us / requests
    others = sum(n for tid, n in spent.items() if tid != pid) * per_tick_us / requests
    return {**result, "server_cpu_us": {"event loop": round(loop), "other threads": round(others)}}


@contextmanager
def flame_graph(wanted: bool, pid: int, seconds: int, name: str) -> Iterator[None]:
    """py-spy records the server while the block runs (when wanted and installed): an SVG in results/."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if not wanted or spy is None:
        if wanted:
            print("py-spy is not installed (pip install py-spy): no flame graph")
        yield
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"rest_catalog_{name}.svg"
    command = [spy, "record", "-p", str(pid), "-d", str(seconds), "-r", "100", "-f", "flamegraph", "-o", str(out)]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        recorder.wait(seconds + 60)
        print(f"flame graph written to {out}")


def flamed(wanted: bool, pid: int, seconds: int, name: str, measure: Callable[[], dict[str, Any]]) -> Any:
    """`measure`, recorded by flame_graph when `wanted`."""
    with flame_graph(wanted, pid, seconds, name):
        return measure()


@contextmanager
def floor_server(body_bytes: int, *kind: str) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(FLOOR_SERVER), str(port), str(body_bytes), *kind])
    root = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{root}/health")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield root
    finally:
        server.terminate()
        server.wait(30)


class Pointer:
    """The compare-and-swap floor's system database: one pointer row, swapped in a transaction each time."""

    def __init__(self, backend: str, where: Path | str) -> None:
        self.backend = backend
        self.location, self.version = "", 0  # the row's, as the last swap left it
        if backend == "sqlite":
            self.sqlite = sqlite3.connect(str(where), isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000"):
                self.sqlite.execute(f"PRAGMA {pragma}")
            self.sqlite.execute("CREATE TABLE pointer (name TEXT PRIMARY KEY, location TEXT, version INTEGER)")
            self.sqlite.execute("INSERT INTO pointer VALUES ('t', '', 0)")
        else:
            self.pg = psycopg.connect(str(where).replace("postgresql+psycopg://", "postgresql://"))
            self.pg.execute("CREATE TABLE pointer (name TEXT PRIMARY KEY, location TEXT, version INTEGER)")
            self.pg.execute("INSERT INTO pointer VALUES ('t', '', 0)")
            self.pg.commit()

    def swap(self, expected: str, version: int, new: str) -> None:
        sql = "UPDATE pointer SET location = {0}, version = {0} WHERE name = 't' AND location = {0} AND version = {0}"
        arguments = (new, version + 1, expected, version)
        if self.backend == "sqlite":
            self.sqlite.execute("BEGIN IMMEDIATE")
            swapped = self.sqlite.execute(sql.format("?"), arguments).rowcount
            self.sqlite.execute("COMMIT")
        else:
            swapped = self.pg.execute(sql.format("%s"), arguments).rowcount
            self.pg.commit()
        assert swapped == 1

    def close(self) -> None:
        if self.backend == "sqlite":
            self.sqlite.close()
        else:
            self.pg.close()


def cas_floor(pointer: Pointer, metadata: dict[str, Any], directory: Path, seconds: float) -> list[float]:
    """The irreducible loop of a commit for `seconds`: serialise, write a new file, compare-and-swap; the
    latency of each, in milliseconds."""
    directory.mkdir(parents=True, exist_ok=True)
    expected, version, latencies = pointer.location, pointer.version, []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        metadata["properties"]["n"] = str(version)
        location = directory / f"{version + 1:05d}-{uuid.uuid4()}.metadata.json"
        with open(location, "xb") as out:
            out.write(json.dumps(metadata).encode())
        pointer.swap(expected, version, str(location))
        expected, version = str(location), version + 1
        latencies.append((time.perf_counter() - started) * 1000)
    pointer.location, pointer.version = expected, version
    return latencies


def bracketed(floor: Callable[[float], list[float]], measure: Callable[[], dict[str, Any]], seconds: float) -> Any:
    """`measure` with the floor's loop run for half of `seconds` just before it and half just after, so that both
    see the same minute of the machine (its file system: without a journal, ext4 skips inodes freed in the last
    minute or more, so a file created after many were deleted costs up to 20 times more here); returns the
    measure and the floor's numbers of both halves."""
    latencies = floor(seconds / 2)
    measured = measure()
    latencies += floor(seconds / 2)
    per_second = round(len(latencies) / sum(latencies) * 1000, 1)
    return measured, {"per_second": per_second, **_ms(summary(latencies))}


def metadata_share(answer: bytes, uuid_: str, repeat: int = 7, number: int = 300) -> dict[str, float]:
    """What the metadata library costs one commit of this table, in process, in microseconds (the best of
    `repeat` timings): the request parsed into pyiceberg's requirements and updates, the updates applied to the
    table's metadata, the new metadata serialised, by the functions the server runs. The compare-and-swap floor
    serialises the metadata as a plain dict instead (`json.dumps`)."""
    from pyiceberg.table.metadata import TableMetadataUtil

    from lakewarden.api.routes.iceberg_rest import CommitTable
    from lakewarden.metadata.table_metadata import apply_updates, metadata_json

    loaded = json.loads(answer)
    base = TableMetadataUtil.parse_raw(json.dumps(loaded["metadata"]))
    request = json.dumps(commit_body(uuid_, 1)).encode()
    parsed = CommitTable.model_validate_json(request)
    applied = apply_updates(base, parsed.updates, metadata_location=loaded["metadata-location"])
    plain = loaded["metadata"]
    steps: dict[str, Callable[[], object]] = {
        "parse the request": lambda: CommitTable.model_validate_json(request),
        "apply the updates": lambda: apply_updates(base, parsed.updates, metadata_location=loaded["metadata-location"]),
        "serialise the metadata": lambda: metadata_json(applied),
        "floor: json.dumps of the metadata": lambda: json.dumps(plain),
    }
    return {
        name: round(min(timeit.repeat(step, number=number, repeat=repeat)) / number * 1e6, 1)
        for name, step in steps.items()
    }


def measure_backend(args: argparse.Namespace, tmp: Path, backend: str, server: str | None) -> dict[str, Any]:
    """Floors and lakewarden on one system database (SQLite, or a database of the PostgreSQL `server`), in
    `args.rounds` rounds, each measuring lakewarden and its floors one right after the other (this machine's
    disk and CPU drift by 2-10x between minutes: a floor measured apart says little); the reaction time on
    SQLite."""
    database = None if server is None else fresh_database(server)
    settings = (
        "  evaluator: {interval: 10s, recheck-interval: 1min}\n"
        + (f"  database: {{url: '{database}'}}\n" if database else "")
        + "catalogs: [{name: bench, type: internal}]\nresource-groups: [{name: default, container: local}]\n"
    )
    rounds: list[dict[str, Any]] = []
    out: dict[str, Any] = {}
    where: Path | str = (
        tmp / "floor.db" if database is None else fresh_database(database.rsplit("/", 1)[0] + "/postgres")
    )
    with running_server(str(tmp), settings) as root:
        token = admin_token(str(tmp))
        headers = {"Authorization": f"Bearer {token}"}
        catalog = RestCatalog("bench", uri=f"{root}/iceberg", warehouse="bench", token=token)
        catalog.create_namespace("db")
        tables = [catalog.create_table(f"db.t{i}", SCHEMA) for i in range(args.clients)]
        prefix = "/iceberg/v1/bench/namespaces/db/tables"
        with httpx.Client(base_url=f"{root}{prefix}", headers=headers) as http:
            for n in range(LOG_BOUND + 10):  # every table's metadata log at its bound, as a long-written table's
                for t, table in enumerate(tables):
                    grown = http.post(f"/t{t}", json=commit_body(str(table.metadata.table_uuid), n))
                    assert grown.status_code == 200, grown.text
        answer = httpx.get(f"{root}{prefix}/t0", headers=headers).content
        client = Client(root, prefix, headers, [str(t.metadata.table_uuid) for t in tables], tmp, args.seconds)
        pid = server_pid(str(tmp))
        pointer = Pointer(backend, where)
        try:
            with floor_server(len(answer)) as floor_root, floor_server(len(answer), "fastapi") as fastapi_root:
                floor = Client(floor_root, prefix, headers, [], tmp, args.seconds)
                fastapi = Client(fastapi_root, prefix, headers, [], tmp, args.seconds)
                for r in range(args.rounds):
                    flame = args.flame and r == args.rounds - 1  # the last round, once warm
                    one: dict[str, Any] = {}
                    directory = tmp / f"floor-{backend}-{r}"
                    # the table's metadata as lakewarden's commits write it (its metadata log at its bound: the
                    # commits before the rounds grew it), not the new table's: the same document to serialise
                    metadata = json.loads(httpx.get(f"{root}{prefix}/t0", headers=headers).content)["metadata"]
                    for connections, label in ((1, "sequential"), (args.clients, f"{args.clients} clients")):
                        with flame_graph(flame and connections > 1, pid, args.seconds, f"{backend}_loads"):
                            one[f"loads {label}"] = with_server_cpu(pid, partial(client.loads, connections))
                        one[f"floor: static body {label}"] = floor.loads(connections)
                        one[f"FastAPI: static body {label}"] = fastapi.loads(connections)
                        measure = partial(with_server_cpu, pid, partial(client.commits, connections))
                        wanted = flame and connections == 1
                        commits = partial(flamed, wanted, pid, args.seconds, f"{backend}_commits", measure)
                        if connections == 1:  # the floor's loop is sequential: it brackets the sequential commits
                            floor_loop = partial(cas_floor, pointer, metadata, directory)
                            one[f"commits {label}"], one["floor: compare-and-swap"] = bracketed(
                                floor_loop, commits, args.seconds
                            )
                        else:
                            one[f"commits {label}"] = commits()
                    one["floor: metadata bytes"] = len(json.dumps(metadata))
                    one["ratios"] = ratios(one, args.clients)
                    one["FastAPI over the floor"] = stack_ratios(one, args.clients)
                    print(f"  round {r + 1}: " + ", ".join(f"{k} {v:.3f}x" for k, v in one["ratios"].items()))
                    rounds.append(one)
        finally:
            pointer.close()
        if backend == "sqlite":
            out["reaction_seconds"] = reaction(root, catalog, headers)
            out["metadata library per commit (us)"] = metadata_share(answer, str(tables[0].metadata.table_uuid))
    # each measure: the round whose ratio is the median (its own numbers, not a mix of rounds)
    out["floor: metadata bytes"] = [r["floor: metadata bytes"] for r in rounds]
    for name in rounds[0]:
        if isinstance(rounds[0][name], dict) and "per_second" in rounds[0][name]:
            out[name] = sorted((r[name] for r in rounds), key=lambda m: m["per_second"])[len(rounds) // 2]
    out["ratios"] = {
        name: round(statistics.median(r["ratios"][name] for r in rounds), 3) for name in rounds[0]["ratios"]
    }
    out["FastAPI over the floor"] = {
        name: round(statistics.median(r["FastAPI over the floor"][name] for r in rounds), 3)
        for name in rounds[0]["FastAPI over the floor"]
    }
    out["rounds"] = rounds
    out["body_bytes"] = len(answer)
    return out


def reaction(root: str, catalog: RestCatalog, headers: dict[str, str]) -> list[float]:
    """The third small append crosses minor.trigger.file-count=3: seconds until the table is pending."""
    reactions = []
    trigger = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}
    for r in range(3):
        table = catalog.create_table(f"db.r{r}", SCHEMA, properties=trigger)
        for i in range(2):
            table.append(pa.table({"id": pa.array([i], pa.int64())}))
        time.sleep(1.0)  # let the first commits' evaluations settle
        started = time.perf_counter()
        table.append(pa.table({"id": pa.array([9], pa.int64())}))
        while httpx.get(f"{root}/api/v1/tables/bench/db/r{r}", headers=headers).json().get("status") != "pending":
            if time.perf_counter() - started > 30:
                raise SystemExit("the table was not queued within 30 s")
            time.sleep(0.01)
        reactions.append(round(time.perf_counter() - started, 3))
    return reactions


def ratios(result: dict[str, Any], clients: int) -> dict[str, float]:
    """lakewarden over its floor, at the same concurrency (commits: sequential, as the loop is)."""
    out = {}
    for label in ("sequential", f"{clients} clients"):
        out[f"loads {label}"] = (
            result[f"loads {label}"]["per_second"] / result[f"floor: static body {label}"]["per_second"]
        )
    out["commits sequential"] = (
        result["commits sequential"]["per_second"] / result["floor: compare-and-swap"]["per_second"]
    )
    return {k: round(v, 3) for k, v in out.items()}


def stack_ratios(result: dict[str, Any], clients: int) -> dict[str, float]:
    """A FastAPI application serving the same body over the static-body floor (no goal: what FastAPI itself
    costs a request, which lakewarden's API is built on)."""
    return {
        f"loads {label}": round(
            result[f"FastAPI: static body {label}"]["per_second"] / result[f"floor: static body {label}"]["per_second"],
            3,
        )
        for label in ("sequential", f"{clients} clients")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5, help="length of each measure")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of lakewarden beside its floors (medians)")
    parser.add_argument("--flame", action="store_true", help="py-spy flame graphs of the server (see above)")
    args = parser.parse_args()
    results: dict[str, Any] = {"client": "wrk" if shutil.which("wrk") else "httpx threads", "goals": GOALS}
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix="lakewarden-bench-") as tmp:
            if backend == "sqlite":
                result = measure_backend(args, Path(tmp), backend, None)
            else:
                with postgres_server(free_port()) as server:
                    if server is None:
                        print("PostgreSQL is not installed: skipped")
                        continue
                    result = measure_backend(args, Path(tmp), backend, server)
        results[backend] = result
        print(f"--- {backend} ({results['client']})")
        for name, value in result.items():
            if isinstance(value, dict) and "per_second" in value:
                latency = f"p50 {value['p50_ms']:.2f} ms   p99 {value['p99_ms']:.2f} ms"
                cpu = value.get("server_cpu_us")
                split = f"   server CPU: loop {cpu['event loop']} us + others {cpu['other threads']} us" if cpu else ""
                print(f"{name:32s} {value['per_second']:8.0f}/s   {latency}{split}")
        for name, ratio in result["ratios"].items():
            goal = GOALS[name.split()[0]]
            print(f"ratio {name:26s} {ratio:6.3f}x  (goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'})")
        for name, micros in result.get("metadata library per commit (us)", {}).items():
            print(f"in process, per commit: {name:34s} {micros:7.1f} us")
        for name, ratio in result["FastAPI over the floor"].items():
            print(f"FastAPI alone: {name:18s} {ratio:6.3f}x of the static-body floor (no goal: FastAPI's own cost)")
        if "reaction_seconds" in result:
            print(
                f"commit -> table queued: {', '.join(f'{x:.2f} s' for x in result['reaction_seconds'])} (goal <= 2 s)"
            )
    write("rest_catalog", results)
    bars = {
        f"{backend}: {name}": ratio
        for backend in ("sqlite", "postgresql")
        if backend in results
        for name, ratio in results[backend]["ratios"].items()
    }
    bar_chart("rest_catalog", "lakewarden's REST catalog over the floor of its stack", bars, "x of the floor")


if __name__ == "__main__":
    main()
