"""High availability: how long work stops when the leader dies, and REST commits on two nodes vs one.

Two real server processes on one throwaway PostgreSQL, with the default HA settings (lease 10 s), one real
optimizer (`lakewarden optimizer --server A,B`, Spark local[2]) and a writer appending through the REST
catalog to four tables of the internal catalog, so that tasks are planned and handed out all the time.

1. Failover, --kills times: the leader is killed -9 (the writer goes on through the other node); measured:
   from the kill to the first task the new leader hands out (the tasks' `scheduled_at` in the database),
   and to the new leader saying so on /api/v1/health. The killed node is started again as a follower
   before the next kill. Goal: p99 <= 15 s.
2. REST commits per second: --writers threads, each appending to a table of its own for --seconds, all
   through one node, then spread over both (the optimizer stopped, so only the servers and the writers run).

    .venv/bin/python bench/failover.py [--kills 8] [--writers 4] [--seconds 15]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bar_chart, free_port, in_temporary_dir, summary, write
from lakewarden.store.database import Database
from tests.postgres import fresh_database, postgres_server
from tests.servers import LAKEWARDEN, ServerProcess, ha_nodes

TABLE_PROPERTIES = {"self-optimizing.minor.trigger.file-count": "3", "self-optimizing.min-plan-interval": "0"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    in_temporary_dir(lambda tmp: run(args, tmp))


def role(node: ServerProcess) -> str | None:
    try:
        return str(httpx.get(f"{node.url}/api/v1/health", timeout=3).json()["role"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def catalog(node: ServerProcess, token: str) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("lake", uri=f"{node.url}/iceberg", warehouse="lake", token=token)


def rows(batch: int) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array(range(batch * 100, batch * 100 + 100), pa.int64())})


class Writer(threading.Thread):
    """Appends to `tables` round robin through `node` (switched by the bench before it kills a node)."""

    def __init__(self, node: ServerProcess, token: str, tables: list[str]) -> None:
        super().__init__(daemon=True)
        self.node, self.token, self.tables = node, token, tables
        self.stop = threading.Event()
        self.commits = self.failures = 0

    def run(self) -> None:
        batch = 0
        while not self.stop.is_set():
            node = self.node
            try:
                for name in self.tables:
                    if node is not self.node:
                        break
                    catalog(node, self.token).load_table(name).append(rows(batch))
                    self.commits += 1
                    batch += 1
            except Exception:
                self.failures += 1
                time.sleep(0.2)


def first_hand_out_after(db: Database, moment: datetime) -> datetime | None:
    from sqlalchemy import func, select

    from lakewarden.store.models import TaskRow

    with db.read() as session:
        found = session.scalar(select(func.min(TaskRow.scheduled_at)).where(TaskRow.scheduled_at > moment))
    return None if found is None else (found if found.tzinfo else found.replace(tzinfo=UTC))


def run(args: argparse.Namespace, tmp: Path) -> None:
    with postgres_server(free_port()) as server:
        if server is None:
            sys.exit("PostgreSQL is needed (apt-get install postgresql)")
        url = fresh_database(server)
        with ha_nodes(tmp, [url, url], log_level="warning") as nodes:
            failovers = measure_failover(args, tmp, nodes, Database(url))
            commits = measure_commits(args, nodes)
    fail = summary([f["first_task_s"] for f in failovers])
    elected = summary([f["leader_s"] for f in failovers])
    print(f"failover, leader killed -> first task handed out: p50 {fail['p50']:.1f} s, p99 {fail['p99']:.1f} s")
    print(f"failover, leader killed -> new leader: p50 {elected['p50']:.1f} s, p99 {elected['p99']:.1f} s")
    print(f"REST commits/s: one node {commits['one']:.1f}, two nodes {commits['two']:.1f}")
    write(
        "failover",
        {
            "kills": args.kills,
            "lease_seconds": 10,
            "first_task_seconds": fail,
            "new_leader_seconds": elected,
            "rounds": failovers,
            "goal_p99_seconds": 15,
            "commits_per_second": commits,
            "two_vs_one": round(commits["two"] / commits["one"], 3),
            "writers": args.writers,
        },
    )
    bar_chart(
        "failover",
        "Leader killed -9 -> first task handed out by the new leader",
        {"p50": fail["p50"], "p99": fail["p99"], "max": fail["max"]},
        "seconds",
        goal=15,
    )


def measure_failover(
    args: argparse.Namespace, tmp: Path, nodes: list[ServerProcess], db: Database
) -> list[dict[str, float]]:
    token = nodes[0].token
    setup = catalog(nodes[0], token)
    setup.create_namespace("db")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    tables = [f"db.failover_{i}" for i in range(4)]
    for name in tables:
        setup.create_table(name, schema, properties=TABLE_PROPERTIES)
    log = (tmp / "optimizer.log").open("wb")
    optimizer = subprocess.Popen(
        [*LAKEWARDEN, "optimizer", "--server", ",".join(n.url for n in nodes), "--parallelism", "2"],
        env={**os.environ, "LAKEWARDEN_TOKEN": token},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    writer = Writer(nodes[1], token, tables)
    writer.start()
    rounds: list[dict[str, float]] = []
    try:
        for kill in range(args.kills):
            steady = datetime.now(UTC)
            while first_hand_out_after(db, steady) is None:  # work flows: tasks are being handed out
                time.sleep(0.5)
            leader = next(n for n in nodes if role(n) == "leader")
            survivor = next(n for n in nodes if n is not leader)
            writer.node = survivor
            time.sleep(1.0)  # the writer's commit in flight on the leader ends
            assert leader.proc is not None
            killed = datetime.now(UTC)
            began = time.monotonic()
            leader.proc.send_signal(signal.SIGKILL)
            leader.proc.wait()
            new_leader = None
            handed: datetime | None = None
            while handed is None and time.monotonic() - began < 120:
                if new_leader is None and role(survivor) == "leader":
                    new_leader = time.monotonic() - began
                handed = first_hand_out_after(db, killed)
                time.sleep(0.05)
            assert handed is not None, "no task was handed out within 120 s of the kill"
            while new_leader is None:
                new_leader = time.monotonic() - began if role(survivor) == "leader" else None
            first_task = (handed - killed).total_seconds()
            rounds.append({"first_task_s": round(first_task, 2), "leader_s": round(new_leader, 2)})
            print(f"kill {kill + 1}: new leader after {new_leader:.1f} s, first task after {first_task:.1f} s")
            leader.start()  # back as a follower
    finally:
        writer.stop.set()
        writer.join(30)
        optimizer.send_signal(signal.SIGTERM)
        try:
            optimizer.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(optimizer.pid, signal.SIGKILL)
        log.close()
    return rounds


def measure_commits(args: argparse.Namespace, nodes: list[ServerProcess]) -> dict[str, float]:
    token = nodes[0].token
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    rates = {}
    for variant in ("one", "two"):
        writers = []
        for i in range(args.writers):
            name = f"db.commits_{variant}_{i}"
            node = nodes[0] if variant == "one" else nodes[i % 2]
            catalog(node, token).create_table(name, schema)
            writers.append(Writer(node, token, [name]))
        for writer in writers:
            writer.start()
        time.sleep(args.seconds)
        for writer in writers:
            writer.stop.set()
        for writer in writers:
            writer.join(30)
        rates[variant] = sum(w.commits for w in writers) / args.seconds
        print(f"{variant} node(s): {rates[variant]:.1f} commits/s ({sum(w.failures for w in writers)} failures)")
    return rates


if __name__ == "__main__":
    main()
