"""The server's services, built and wired in one place, so the path of a change can be read here.

A commit to the REST catalog writes an event; the ChangeListener refreshes the named tables and wakes the
TableEvaluator; a table that turns PENDING wakes the optimizers' long polls in the TaskDispatcher, which plans it
through the ProcessEngine and hands out its tasks; completions settle the process, and its end wakes the evaluator
again. With high availability the loops run on the leader and events reach it through the OutboxTail.
docs/architecture.md follows these flows step by step."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from lakewarden.config import Config
from lakewarden.domain.costs import Price
from lakewarden.domain.processes import Action
from lakewarden.metadata.manifest_cache import ManifestCache
from lakewarden.services.access.auth import AuthService, load_secret_key
from lakewarden.services.access.bootstrap import ensure_seeds
from lakewarden.services.leadership import Leadership
from lakewarden.services.loop import LoopService, WakeSignal
from lakewarden.services.maintenance.factories import maintenance_factories
from lakewarden.services.maintenance.trigger import MaintenanceTrigger
from lakewarden.services.processes.dispatcher import TaskDispatcher
from lakewarden.services.processes.engine import ProcessEngine
from lakewarden.services.processes.factories import ProcessRegistry
from lakewarden.services.processes.hudi_services import HudiServicesFactory
from lakewarden.services.processes.keeper import OptimizerKeeper
from lakewarden.services.processes.paimon_services import PaimonServicesFactory
from lakewarden.services.processes.self_optimizing import SelfOptimizingFactory
from lakewarden.services.processes.yields import YieldRecorder
from lakewarden.services.resources.containers import OPTIMIZER_LOGS
from lakewarden.services.resources.resource_maintainer import ResourceMaintainer
from lakewarden.services.rest_catalog.catalog import RestCatalog
from lakewarden.services.rest_catalog.catalog_tables import CatalogTables
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.commits import TableCommits
from lakewarden.services.rest_catalog.credentials import CredentialVendor
from lakewarden.services.rest_catalog.federation import Federation
from lakewarden.services.rest_catalog.heads import TableHeads
from lakewarden.services.rest_catalog.loads import TableLoads
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.outbox import Outbox
from lakewarden.services.rest_catalog.read_ahead import ManifestReadAhead
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.services.rest_catalog.warehouses import Warehouses
from lakewarden.services.rest_catalog.writes_in_flight import WritesInFlight
from lakewarden.services.tables.catalog_access import InternalTables
from lakewarden.services.tables.changes import ChangeListener, OutboxTail
from lakewarden.services.tables.evaluation import TableEvaluator
from lakewarden.services.tables.explorer import TableExplorer
from lakewarden.services.tables.history import HistoryPruner, LoadSampler
from lakewarden.services.tables.reads import TableReads
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import secrets
from lakewarden.store.claim import Claim, hold_alone
from lakewarden.store.database import Database

log = logging.getLogger(__name__)


def maintenance_schedules(config: Config) -> dict[Action, tuple[bool, timedelta]]:
    """Per maintenance action: whether the server triggers it, and how often it looks."""
    ams = config.ams
    schedules = {
        Action.EXPIRE_SNAPSHOTS: ams.expire_snapshots,
        Action.CLEAN_ORPHAN_FILES: ams.clean_orphan_files,
        Action.CLEAN_DANGLING_DELETE_FILES: ams.clean_dangling_delete_files,
        Action.EXPIRE_DATA: ams.data_expiration,
        Action.AUTO_CREATE_TAGS: ams.auto_create_tags,
        Action.REWRITE_MANIFESTS: ams.rewrite_manifests,
    }
    return {action: (schedule.enabled, schedule.interval) for action, schedule in schedules.items()}


def rest_catalog(
    config: Config, db: Database, manifests: ManifestCache | None = None, reads: TableReads | None = None
) -> RestCatalog:
    """lakewarden's REST catalog, its parts wired: each receives the collaborators it uses. `manifests`: the
    server's manifest cache (scan planning and read-ahead share it with the evaluator); `reads`: where the
    reports of its clients and its own plans are kept."""
    if manifests is None:
        manifests = ManifestCache(config.ams.manifest_cache.max_size)
    line = config.ams.commit_queue
    queue = CommitQueue(
        line.max_waiting_per_table, line.max_waiting, line.max_wait.total_seconds(), enabled=line.enabled
    )
    warehouses = Warehouses(db)
    outbox = Outbox()
    # the tables' heads this node knows: none when it is one of several (rest_catalog/heads.py)
    heads = TableHeads(keeping=not config.ams.ha.enabled)
    files = MetadataFiles(config.ams.metadata_cache.max_size)
    # row-level writes planned and not committed, on own and forwarded catalogs alike (the dispatcher waits for them)
    flights = WritesInFlight()
    loads = TableLoads(db, warehouses, files, heads, CredentialVendor())
    tables = CatalogTables(db, warehouses, files, heads, outbox)
    planning = config.ams.scan_planning
    reads = TableReads(db) if reads is None else reads
    scans = ScanPlanning(
        warehouses,
        loads,
        manifests,
        sync_seconds=planning.sync_timeout.total_seconds(),
        ttl_seconds=planning.plan_ttl.total_seconds(),
        on_plan=reads.record_quietly,
    )
    read_ahead = ManifestReadAhead(db, warehouses, files, manifests, planning.read_ahead)
    outbox.subscribe(read_ahead)  # every node reads ahead the commits it makes
    return RestCatalog(
        warehouses=warehouses,
        outbox=outbox,
        heads=heads,
        files=files,
        credentials=loads.credentials,
        queue=queue,
        loads=loads,
        tables=tables,
        commits=TableCommits(db, warehouses, files, heads, outbox, tables, flights),
        views=ViewCatalog(db, warehouses, files, outbox),
        scans=scans,
        read_ahead=read_ahead,
        federation=Federation(db, outbox, flights),
        reads=reads,
    )


def price_of(config: Config) -> Price:
    """The server's default price of Spark's work (a group's properties may set its own)."""
    cost = config.ams.cost
    return Price(core_hour=cost.core_hour, gb_written=cost.gb_written, currency=cost.currency)


@dataclass
class ServerRuntime:
    """Everything a running server is made of; the API's routes reach it through `app.state`."""

    config: Config
    db: Database
    auth: AuthService
    rest_catalog: RestCatalog  # lakewarden's Iceberg REST catalog (services/rest_catalog/)
    reads: TableReads  # how each table is read: its clients' reports and the benefits of its processes
    internal: InternalTables  # how the explorer, evaluator and planner read its tables in process
    evaluator: TableEvaluator
    explorer: TableExplorer
    engine: ProcessEngine
    dispatcher: TaskDispatcher
    keeper: OptimizerKeeper
    trigger: MaintenanceTrigger
    maintainer: ResourceMaintainer
    changes: ChangeListener  # a change the REST catalog announces gets its table evaluated at once
    leadership: Leadership
    outbox_tail: OutboxTail | None  # with high availability: the changes of every node, from the outbox
    history: HistoryPruner  # prunes old processes, timeline entries and events; rotates optimizer logs
    load_sampler: LoadSampler  # samples each group's load for the dashboard's charts
    background: bool = True
    claim: Claim | None = None  # this server's claim on the system database (store/claim.py)

    @classmethod
    def build(cls, config: Config, server_url: str) -> ServerRuntime:
        """The system database claimed (store/claim.py), migrated and seeded, and every service wired; nothing
        started yet."""
        claim = hold_alone(config.database_url, shared=config.ams.ha.enabled)
        try:
            runtime = cls._build(config, server_url)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        runtime.claim = claim
        heads = runtime.rest_catalog.heads
        if heads.keeping and claim is not None:  # every pointer change is this server's: its heads are them
            claim.on_regained = heads.forget  # a claim lost and taken again: others may have changed pointers
            heads.claim = claim
        return runtime

    @classmethod
    def _build(cls, config: Config, server_url: str) -> ServerRuntime:
        db = Database(config.database_url)
        server_key = load_secret_key(config.ams.auth, config.data_dir)
        secrets.configure(server_key)  # catalog secrets are encrypted at rest with a key derived from it
        auth = AuthService(db, config.ams.auth, config.data_dir, server_key)
        with db.startup_lock():  # nodes starting together: one migrates and seeds, the others find it done
            db.migrate()
            with db.write(any_node=True) as session:
                sealed = catalog_store.seal_secrets(session)
            if sealed:
                log.info("encrypted the secrets of %d catalog(s) stored before encryption at rest", sealed)
            ensure_seeds(db, config, server_url)
            written = auth.bootstrap()
        if written is not None:
            log.warning("first start: created principal admin; its API token is in %s (mode 0600)", written)
        work_ready = WakeSignal()  # tasks may be ready to hand out: wakes the optimizers' long polls
        manifests = ManifestCache(config.ams.manifest_cache.max_size)  # shared by the evaluator and scan planning
        reads = TableReads(db)
        catalog = rest_catalog(config, db, manifests, reads)
        internal = InternalTables(db, catalog.loads)
        evaluating = config.ams.evaluator
        evaluator = TableEvaluator(
            db,
            evaluating.interval.total_seconds(),
            evaluating.thread_count,
            None if evaluating.recheck_interval is None else evaluating.recheck_interval.total_seconds(),
            internal=internal,
            on_pending=work_ready.notify,
            cache=manifests,
            shape_interval=config.ams.history.table_shapes.interval,
        )
        refresh = config.ams.refresh_external_catalogs
        explorer = TableExplorer(
            db,
            refresh.interval.total_seconds(),
            refresh.thread_count,
            on_change=evaluator.wake,
            internal=internal,
            internal_interval=config.ams.refresh_internal_catalogs.interval.total_seconds(),
            watch_interval=None if refresh.watch_interval is None else refresh.watch_interval.total_seconds(),
        )
        registry = ProcessRegistry(
            [
                SelfOptimizingFactory(evaluator.cache),
                HudiServicesFactory(db),
                PaimonServicesFactory(db),
                *maintenance_factories(evaluator.cache),
            ]
        )
        timeouts = config.ams.optimizer
        engine = ProcessEngine(
            db,
            registry,
            internal,
            on_work=work_ready.notify,
            on_process_end=evaluator.wake,
            retry_backoff=timeouts.task_retry_backoff,
            retry_backoff_max=timeouts.task_retry_backoff_max,
        )
        explorer.on_closing = engine.close_for_change
        changes = ChangeListener(explorer, evaluator, on_yielded=YieldRecorder(db))
        ha = config.ams.ha
        if not ha.enabled:
            catalog.outbox.subscribe(changes)
        keeper = OptimizerKeeper(
            db,
            timeouts.heart_beat_timeout,
            timeouts.task_ack_timeout,
            timeouts.task_execute_timeout,
            on_released=work_ready.notify,
        )
        runtime = cls(
            config=config,
            db=db,
            auth=auth,
            rest_catalog=catalog,
            reads=reads,
            internal=internal,
            evaluator=evaluator,
            explorer=explorer,
            engine=engine,
            dispatcher=TaskDispatcher(
                db,
                engine,
                work_ready,
                auth,
                node_url=ha.node_url or server_url,
                price=price_of(config),
                max_long_polls=timeouts.max_long_polls,
                flights=catalog.commits.flights,
                break_quota_limit=config.ams.self_optimizing.break_quota_limit_enabled,
            ),
            keeper=keeper,
            trigger=MaintenanceTrigger(db, engine, maintenance_schedules(config)),
            maintainer=ResourceMaintainer(
                db, config, server_url, auth.registration_token, release_tokens=keeper.release
            ),
            changes=changes,
            leadership=Leadership(
                db if ha.enabled else None, ha.node_url or server_url, ha.lease, lambda _: None, lambda: None
            ),
            outbox_tail=OutboxTail(db, changes) if ha.enabled else None,
            history=HistoryPruner(
                db, config.ams.history, config.data_dir / OPTIMIZER_LOGS, settle=reads.settle_benefits
            ),
            load_sampler=LoadSampler(db, config.ams.history.group_load.interval.total_seconds()),
        )
        runtime.leadership.on_elected = runtime._lead
        runtime.leadership.on_deposed = runtime._follow
        return runtime

    @property
    def loops(self) -> list[LoopService]:
        return [
            self.explorer,
            self.evaluator,
            self.keeper,
            self.maintainer,
            self.trigger,
            self.history,
            self.load_sampler,
        ]

    def start(self, background: bool = True) -> None:
        """Join the election (one node: lead at once); tests that drive the loops themselves only recover."""
        self.background = background
        if background:
            self.rest_catalog.read_ahead.warm()  # every node: its own manifest cache
            self.leadership.start()
        else:
            self.engine.recover()

    def _lead(self, epoch: int) -> None:
        """Elected: recover what the previous leader (or a dead server) left, then run the loops."""
        self.engine.recover()
        self.changes.start()
        if self.outbox_tail is not None:
            self.outbox_tail.start()
        for loop in self.loops:
            loop.start()

    def _follow(self) -> None:
        """Deposed (or stopping): the loops stop at once; the local containers' optimizers are released."""
        for loop in self.loops:
            loop.stop()
        if self.outbox_tail is not None:
            self.outbox_tail.stop()
        self.changes.stop()

    def stop(self) -> None:
        self.leadership.stop()
        self._follow()
        self.rest_catalog.close()
        self.db.dispose()
        if self.claim is not None:
            self.claim.release()
            self.claim = None
