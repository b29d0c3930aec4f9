"""High availability on PostgreSQL: the lease, fencing, and several real server processes on one database."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from lakewarden.config import load_config
from lakewarden.domain.catalogs import CatalogSpec
from lakewarden.domain.errors import InvalidField, NotLeader
from lakewarden.domain.events import CatalogEvent
from lakewarden.optimizer.app import Optimizer
from lakewarden.protocol.messages import Assignment
from lakewarden.services.leadership import VALID_SHARE, Leadership
from lakewarden.services.tables.changes import OutboxTail
from lakewarden.spark.session import configure_catalogs
from lakewarden.store import groups as group_store
from lakewarden.store import rest_catalog as rest_store
from lakewarden.store.database import Database
from tests.helpers import PROPS, checksum, wait_for
from tests.netproxy import TcpProxy
from tests.postgres import fresh_database
from tests.servers import ServerProcess, cli, ha_nodes
from tests.tools import tool_missing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LEASE = timedelta(seconds=3)


@pytest.fixture
def pg(postgres: str | None) -> str:
    if postgres is None:
        tool_missing("PostgreSQL (Debian's postgresql)")
    return fresh_database(postgres)


class Node:
    """One node's Leadership on its own Database (as a server process has), recording its transitions."""

    def __init__(self, url: str, name: str) -> None:
        self.db = Database(url)
        self.events: list[str] = []
        self.leadership = Leadership(self.db, f"http://{name}", LEASE, self._elected, self._deposed)
        self.db.fence = self.leadership.fence

    def _elected(self, epoch: int) -> None:
        self.events.append(f"elected {epoch}")

    def _deposed(self) -> None:
        self.events.append("deposed")

    def write_group(self, name: str) -> None:
        with self.db.write() as session:
            group_store.create_group(session, name, "local", {})


@pytest.fixture
def nodes(pg: str) -> Iterator[tuple[Node, Node]]:
    Database(pg).migrate()
    a, b = Node(pg, "a"), Node(pg, "b")
    yield a, b
    a.db.dispose()
    b.db.dispose()


def expire(db: Database) -> None:
    """As if the holder had been paused past its lease."""
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE ha_lease SET expires_at = now() - interval '1 second'"))


def test_one_node_leads_and_a_takeover_fences_the_old_leaders_writes(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    a.leadership.run_once()
    b.leadership.run_once()
    assert a.events == ["elected 1"] and b.events == [] and b.leadership.leader_url() == "http://a"
    a.write_group("by-a")  # the leader's write carries epoch 1
    with pytest.raises(NotLeader, match="the leader is http://a"):
        b.write_group("by-b")  # a follower makes no leader's write
    with b.db.write(any_node=True) as session:  # ...but any node may make an any-node write
        group_store.create_group(session, "anywhere", "local", {})

    b.leadership.run_once()  # the lease is live: b waits
    assert b.events == []
    expire(a.db)  # a is paused past its lease and does not know it
    b.leadership.run_once()
    assert b.events == ["elected 2"] and b.leadership.epoch == 2
    with pytest.raises(NotLeader, match="no longer the leader"):
        a.write_group("late")  # a's late write is refused...
    wait_for("a to step down", lambda: a.events == ["elected 1", "deposed"], timeout=5)  # ...and a stops leading
    assert not a.leadership.is_leader
    b.write_group("by-b")
    a.leadership.run_once()  # a's next pass does not take it back
    assert a.events == ["elected 1", "deposed"] and b.leadership.leader_url() == "http://b"
    with a.db.read() as session:
        assert {g.name for g in group_store.list_groups(session)} >= {"by-a", "anywhere", "by-b"}
        assert "late" not in {g.name for g in group_store.list_groups(session)}


def test_a_takeover_waits_for_the_old_leaders_checked_write_to_commit(nodes: tuple[Node, Node]) -> None:
    """The fence holds the lease row share-locked until the write commits: nothing the old leader checked
    can land after the new leader's epoch began."""
    a, b = nodes
    a.leadership.run_once()
    expire(a.db)
    inside, release = threading.Event(), threading.Event()

    def slow_write() -> None:
        with a.db.write() as session:
            group_store.create_group(session, "slow", "local", {})
            inside.set()
            release.wait(10)

    writer = threading.Thread(target=slow_write)
    writer.start()
    assert inside.wait(10)
    taking = threading.Thread(target=b.leadership.run_once)
    taking.start()
    taking.join(1.0)
    assert taking.is_alive() and b.events == []  # the takeover waits on the lease row
    release.set()
    writer.join(10)
    taking.join(10)
    assert b.events == ["elected 2"]


def test_a_leader_paused_inside_a_checked_write_does_not_block_the_takeover(nodes: tuple[Node, Node]) -> None:
    """A leader stopped (SIGSTOP) in the middle of a fenced write holds the lease row's lock for as long as its
    connection lives: the database ends that transaction once it idled a lease, and the follower takes over."""
    a, b = nodes
    a.leadership.run_once()
    inside, resume = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def paused_write() -> None:
        try:
            with a.db.write() as session:
                group_store.create_group(session, "paused", "local", {})
                session.flush()
                inside.set()
                resume.wait(30)  # the process is stopped here
        except BaseException as exc:  # what the resumed write met is the test's subject
            failure.append(exc)

    writer = threading.Thread(target=paused_write)
    writer.start()
    assert inside.wait(10)
    paused = time.monotonic()
    expire(b.db)  # the lease runs out while a is stopped
    taking = threading.Thread(target=b.leadership.run_once)
    taking.start()
    taking.join(LEASE.total_seconds() + 3)
    assert not taking.is_alive() and b.events == ["elected 2"]
    assert time.monotonic() - paused < LEASE.total_seconds() + 3
    resume.set()  # a wakes: its write was ended by the database and lands nothing
    writer.join(10)
    assert failure
    with b.db.read() as session:
        assert "paused" not in {g.name for g in group_store.list_groups(session)}


def test_a_leader_that_cannot_reach_the_database_steps_down_within_its_lease(nodes: tuple[Node, Node]) -> None:
    a, _ = nodes
    a.leadership.run_once()
    unreachable = Database("postgresql+psycopg://lakewarden@127.0.0.1:1/nowhere")  # connections are refused
    a.leadership.db = unreachable
    a.leadership.run_once()  # within the lease: it still leads
    assert a.leadership.is_leader
    time.sleep(LEASE.total_seconds() * 0.8 + 0.1)
    a.leadership.run_once()
    assert a.events == ["elected 1", "deposed"] and not a.leadership.is_leader
    unreachable.dispose()


def test_ha_needs_postgresql_and_a_lease_of_some_seconds() -> None:
    with pytest.raises(InvalidField, match=r"ams\.ha\.enabled: needs a PostgreSQL"):
        load_config(environ={"LAKEWARDEN_AMS__HA__ENABLED": "true"})
    with pytest.raises(InvalidField, match="lease must be at least 3s"):
        load_config(environ={"LAKEWARDEN_AMS__HA__LEASE": "1s"})


@pytest.fixture
def two_nodes(tmp_path: Path, pg: str) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with ha_nodes(tmp_path, [pg, pg], lease=LEASE) as (a, b):
        yield a, b


def logged(node: ServerProcess, message: str) -> datetime:
    """When the node's log first says `message` (its lines start with the local time)."""
    line = next(line for line in node.log.read_text().splitlines() if message in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


def health(node: ServerProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{node.url}/api/v1/health", timeout=5).json())


def leads(node: ServerProcess) -> bool:
    try:
        return bool(health(node)["role"] == "leader")
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_two_servers_one_leader_forwarding_events_and_failover(two_nodes: tuple[ServerProcess, ServerProcess]) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    a, b = two_nodes
    wait_for("a to lead", lambda: leads(a), timeout=20)
    assert health(b) | {"time": None} == health(b) | {
        "role": "follower",
        "node": b.url,
        "leader": a.url,
        "epoch": None,
        "time": None,
    }
    listed = b.api().get("/nodes").json()
    assert [(n["url"], n["leader"]) for n in listed] == [(a.url, True), (b.url, False)]

    # the leader's requests sent to the follower are forwarded, answers and errors as the leader gives them
    follower = b.api()
    created = follower.post("/resource-groups", json={"name": "etl", "container": "local"})
    assert created.status_code == 201, created.text
    assert a.api().get("/resource-groups/etl").status_code == 200
    refused = follower.post("/resource-groups", json={"name": "bad", "container": "nowhere"})
    assert refused.status_code == 400 and "container" in refused.json()["error"]["message"]
    cli(b, "group", "add", "by-cli")  # the CLI pointed at a follower
    assert a.api().get("/resource-groups/by-cli").status_code == 200
    for node, leading in ((a, 1.0), (b, 0.0)):  # each node's own metrics
        scraped = httpx.get(f"{node.url}/metrics", headers=node.headers, timeout=10).text
        assert f'lakewarden_node_leader{{node="{node.url}"}} {leading}' in scraped

    # a commit to the REST catalog on the follower reaches the leader's evaluator through the outbox
    catalog = RestCatalog("lake", uri=f"{b.url}/iceberg", warehouse="lake", token=b.token)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=False)))
    committed = time.monotonic()
    wait_for("the leader to manage lake.db.t", lambda: a.api().get("/tables/lake/db/t").status_code == 200, 10, 0.1)
    assert time.monotonic() - committed < 5  # not the explorer's 600 s interval
    assert table.name() == ("db", "t")

    # the leader dies: the follower takes over within a lease and a renewal
    assert a.proc is not None
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    died = time.monotonic()
    wait_for("b to lead", lambda: leads(b), timeout=15, interval=0.2)
    assert time.monotonic() - died < LEASE.total_seconds() * 2 + 1
    assert health(b)["epoch"] == 2
    assert follower.post("/resource-groups", json={"name": "after", "container": "local"}).status_code == 201

    # the old leader comes back as a follower; then the leader is paused past its lease: a takes over, and b,
    # woken, finds itself deposed and stops leading (its late writes are refused by the fence)
    a.start()
    assert health(a)["role"] == "follower" and health(a)["leader"] == b.url
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    wait_for("a to lead again", lambda: leads(a), timeout=15, interval=0.2)
    b.proc.send_signal(signal.SIGCONT)
    wait_for("b to step down", lambda: not leads(b), timeout=10, interval=0.2)
    assert health(a)["epoch"] == 3 and health(b)["leader"] == a.url
    assert "steps down" in (b.log.read_text())


@pytest.mark.slow
@pytest.mark.spark
def test_an_optimizer_keeps_its_task_across_a_takeover(
    two_nodes: tuple[ServerProcess, ServerProcess], spark: SparkSession
) -> None:
    """The leader dies while an optimizer (given both nodes' URLs) runs a task: the optimizer reaches the new
    leader, which grants the commit and accepts the result of the same attempt; nothing is run twice."""
    a, b = two_nodes
    wait_for("a to lead", lambda: leads(a), timeout=20)
    api = b.api()  # a follower's API: reads served there, changes forwarded to the leader
    catalogs = {c["name"]: c for c in api.get("/catalogs").json()}
    configure_catalogs(spark, [CatalogSpec("local", "sql", catalogs["local"]["properties"])])
    spark.sql("CREATE NAMESPACE IF NOT EXISTS local.db")
    spark.sql(
        "CREATE TABLE local.db.ha (id BIGINT, cat STRING, ts TIMESTAMP, v STRING) USING iceberg "
        f"TBLPROPERTIES ({PROPS})"
    )
    for i in range(4):
        spark.sql(
            f"INSERT INTO local.db.ha SELECT id, 'a', current_timestamp(), 'v' FROM range({i * 10}, {i * 10 + 10})"
        )
    before = checksum(spark, "local.db.ha")
    assert api.post("/catalogs/local/refresh").status_code == 200

    optimizer = Optimizer(f"{a.url},{b.url}", "default", parallelism=1, spark=spark, credential=a.token)
    at_commit, go = threading.Event(), threading.Event()
    commit = optimizer.client.commit

    def paused_commit(token: str, task: Assignment, retry_seconds: float = 60.0) -> None:
        at_commit.set()  # the rewrite is done; the leader dies before the commit is asked for
        assert go.wait(60)
        commit(token, task, retry_seconds)

    optimizer.client.commit = paused_commit  # type: ignore[method-assign]
    runner = threading.Thread(target=optimizer.run, daemon=True)
    runner.start()
    try:
        assert at_commit.wait(120), "the optimizer never reached its commit"
        assert a.proc is not None
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        wait_for("b to lead", lambda: leads(b), timeout=15, interval=0.2)
        go.set()

        def settled() -> dict[str, Any] | None:
            done = api.get("/processes", params={"table": "local.db.ha"}).json()
            return done[0] if done and done[0]["status"] != "running" else None

        process = wait_for("the process to end", settled, timeout=120)
        assert process["status"] == "success", process
        shown = api.get(f"/processes/{process['process_id']}").json()
        assert [t["attempt"] for t in shown["tasks"]] == [1]  # the same attempt, not run again
    finally:
        go.set()
        optimizer.stop.set()
        runner.join(60)
    spark.sql("REFRESH TABLE local.db.ha")
    assert checksum(spark, "local.db.ha") == before
    assert spark.sql("SELECT count(*) FROM local.db.ha.files").first()[0] == 1  # type: ignore[index]


def test_the_outbox_tail_finds_an_event_that_becomes_visible_late(pg: str) -> None:
    """Event ids come from a sequence: a transaction that took its id first may commit last. The tail hands
    out what it sees, remembers the gap, and hands the late event out when it appears."""
    db = Database(pg)
    db.migrate()
    seen: list[int] = []

    class Recorder:
        def __call__(self, event: CatalogEvent) -> None:
            seen.append(event.event_id)

    tail = OutboxTail(db, Recorder())  # type: ignore[arg-type]
    tail.floor = 0
    with db.write(any_node=True) as early:
        first = rest_store.add_event(early, "table-committed", "lake", "db", "t", {}).event_id
        with db.write(any_node=True) as late:
            second = rest_store.add_event(late, "table-committed", "lake", "db", "t", {}).event_id
        tail.run_once()  # the second is committed, the first not yet
        assert seen == [second] and tail.floor == first - 1
    tail.run_once()
    assert seen == [second, first] and tail.floor == second
    tail.run_once()
    assert seen == [second, first]  # nothing twice
    db.dispose()


@pytest.mark.slow
def test_a_leader_cut_off_from_the_database_stops_leading_before_its_lease_ends(tmp_path: Path, pg: str) -> None:
    """Split brain: the leader's link to PostgreSQL becomes a black hole (connections stay open, nothing
    answers). Its watchdog steps it down before the lease can run out, so when the other node takes over
    (after the lease), there never were two leaders."""
    url = make_url(pg)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
    try:
        with ha_nodes(tmp_path, [proxied, pg], lease=LEASE) as (a, b):
            wait_for("a to lead", lambda: leads(a), timeout=20)
            assert health(b)["role"] == "follower"
            proxy.cut()
            cut = datetime.now()
            wait_for("b to take over", lambda: leads(b), timeout=30, interval=0.2)
            stepped_down = logged(a, "steps down: the lease was not renewed in time")
            took_over = logged(b, "leads, epoch 2")
            # before its lease could end (the last renewal began at most a third of the lease before the cut)
            assert (stepped_down - cut).total_seconds() < LEASE.total_seconds() * VALID_SHARE + 0.5
            assert stepped_down < took_over  # never two leaders
            assert health(a)["database"].startswith("error") and health(b)["epoch"] == 2
            assert a.proc is not None
            a.proc.kill()  # cut off, it could not give anything up on a clean stop
            a.proc.wait()
    finally:
        proxy.close()


@pytest.mark.slow
def test_no_rest_commit_is_lost_or_doubled_when_the_leader_dies_mid_burst(
    two_nodes: tuple[ServerProcess, ServerProcess],
) -> None:
    """Two writers append to their tables through the REST catalog, one on each node; the leader (serving one
    writer) is killed -9 in the middle. Every commit a writer saw succeed is in its table exactly once; the
    one in flight at the kill is there at most once; the timeline and the snapshots agree."""
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    a, b = two_nodes
    wait_for("a to lead", lambda: leads(a), timeout=20)
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    setup = RestCatalog("lake", uri=f"{b.url}/iceberg", warehouse="lake", token=b.token)
    setup.create_namespace("db")
    for i in range(2):
        setup.create_table(f"db.burst_{i}", schema)
    acked: dict[int, list[int]] = {0: [], 1: []}
    unknown: dict[int, list[int]] = {0: [], 1: []}
    killed = threading.Event()

    def writer(index: int, first: ServerProcess) -> None:
        node = first
        table = RestCatalog("lake", uri=f"{node.url}/iceberg", warehouse="lake", token=b.token).load_table(
            f"db.burst_{index}"
        )
        for batch in range(40):
            rows = pa.table({"id": pa.array([batch * 1000 + r for r in range(10)], pa.int64())})
            try:
                table.append(rows)
                acked[index].append(batch)
            except Exception:  # the node died under the commit: its outcome is unknown to this writer
                unknown[index].append(batch)
                node = b  # go on with the surviving node
                wait_for("a leader", lambda: leads(b), timeout=30, interval=0.2)
                catalog = RestCatalog("lake", uri=f"{node.url}/iceberg", warehouse="lake", token=b.token)
                table = catalog.load_table(f"db.burst_{index}")
            if index == 0 and batch == 12:
                killed.wait(30)  # the next commits go to a dead node

    threads = [threading.Thread(target=writer, args=(0, a)), threading.Thread(target=writer, args=(1, b))]
    for thread in threads:
        thread.start()
    wait_for("writer 0 to commit a dozen times", lambda: len(acked[0]) >= 12, timeout=60, interval=0.05)
    assert a.proc is not None
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    killed.set()
    for thread in threads:
        thread.join(180)
    assert unknown[1] == []  # the follower's writer did not notice the leader die

    reader = RestCatalog("lake", uri=f"{b.url}/iceberg", warehouse="lake", token=b.token)
    api = b.api()
    for index in range(2):
        table = reader.load_table(f"db.burst_{index}")
        ids = table.scan().to_arrow()["id"].to_pylist()
        batches = [i // 1000 for i in ids if i % 1000 == 0]
        assert len(ids) == 10 * len(batches) and len(set(batches)) == len(batches)  # nothing doubled
        assert set(acked[index]) <= set(batches) <= set(acked[index]) | set(unknown[index])  # nothing lost
        snapshots = [s.snapshot_id for s in table.snapshots()]
        timeline = api.get(f"/tables/lake/db/burst_{index}/timeline", params={"limit": 500}).json()
        appends = [c["snapshot_id"] for c in timeline if c["operation"] == "append"]
        assert sorted(appends) == sorted(snapshots) and len(appends) == len(batches)
        versions = [c["version"] for c in timeline]
        assert versions == sorted(set(versions), reverse=True)  # one commit per version
    assert len(acked[0]) + len(unknown[0]) == 40 and len(unknown[0]) >= 1
