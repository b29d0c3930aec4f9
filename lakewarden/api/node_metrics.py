"""Prometheus metrics of this node's services, read from them at scrape time: leadership, history pruning, the
metadata and manifest caches, the commit line, optimizers' waiting polls, scan planning and the background
services' CPU time (what the system database says is in api/metrics.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lakewarden.services.leadership import Leadership
from lakewarden.services.loop import LoopService
from lakewarden.services.processes.dispatcher import TaskDispatcher
from lakewarden.services.resources.allocator import Allocator
from lakewarden.services.rest_catalog.commit_queue import CommitQueue
from lakewarden.services.rest_catalog.metadata_files import MetadataFiles
from lakewarden.services.rest_catalog.read_ahead import ManifestReadAhead
from lakewarden.services.rest_catalog.scan_planning import ScanPlanning
from lakewarden.services.tables.history import HistoryPruner


class _Bounded(Protocol):
    @property
    def bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    def __len__(self) -> int: ...


def _sizes(prefix: str, setting: str, items: str, cache: _Bounded) -> Iterator[Metric]:
    """What a cache bounded by bytes exports besides its lookups: its size, bound, items and evictions."""
    yield GaugeMetricFamily(f"{prefix}_bytes", "Estimated bytes kept", value=cache.bytes)
    yield GaugeMetricFamily(f"{prefix}_max_bytes", f"The bound ({setting})", value=cache.max_bytes)
    yield GaugeMetricFamily(f"{prefix}_items", f"{items} kept", value=len(cache))
    yield CounterMetricFamily(f"{prefix}_evictions", f"{items} evicted", value=cache.evictions)


class ServiceCpuCollector(Collector):
    """CPU time each background service of this node spent (services/loop.py `charged`): its passes and the work
    of its thread pools."""

    def __init__(self, services: Sequence[LoopService]) -> None:
        self.services = services

    def collect(self) -> Iterator[Metric]:
        spent = CounterMetricFamily(
            "lakewarden_service_cpu_seconds", "CPU seconds a background service spent on this node", labels=["service"]
        )
        for service in self.services:
            spent.add_metric([service.name], service.cpu_seconds)
        yield spent


class HeapCollector(Collector):
    """The process's garbage collector: how many objects are frozen out of its collections (lakewarden/heap.py), and
    the collections of each generation with what they found (the oldest generation's collections are the long
    pauses the freezing bounds)."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lakewarden_heap_frozen_objects", "Objects frozen out of garbage collection", value=gc.get_freeze_count()
        )
        collections = CounterMetricFamily(
            "lakewarden_gc_collections", "Garbage collections of a generation", labels=["generation"]
        )
        collected = CounterMetricFamily(
            "lakewarden_gc_objects_collected", "Objects a generation's collections freed", labels=["generation"]
        )
        for generation, stats in enumerate(gc.get_stats()):
            collections.add_metric([str(generation)], stats["collections"])
            collected.add_metric([str(generation)], stats["collected"])
        yield collections
        yield collected


class AllocationCollector(Collector):
    """Dynamic allocation's decisions on this node (the leader's maintainer: services/resources/allocator.py)."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator

    def collect(self) -> Iterator[Metric]:
        decisions = CounterMetricFamily(
            "lakewarden_dynamic_allocation_decisions",
            "Scale decisions: up (optimizers started), down (drained for idleness), forced (stopped at drain-timeout)",
            labels=["group", "direction"],
        )
        idle = GaugeMetricFamily(
            "lakewarden_group_idle_optimizers", "Optimizers holding no task and not draining", labels=["group"]
        )
        draining = GaugeMetricFamily("lakewarden_group_draining_optimizers", "Optimizers draining", labels=["group"])
        backlog = GaugeMetricFamily(
            "lakewarden_dynamic_allocation_backlog_seconds",
            "How long demand has exceeded the threads",
            labels=["group"],
        )
        for group, state in sorted(self.allocator.groups.items()):
            decisions.add_metric([group, "up"], state.scale_ups)
            decisions.add_metric([group, "down"], state.scale_downs)
            decisions.add_metric([group, "forced"], state.forced)
            idle.add_metric([group], state.idle_optimizers)
            draining.add_metric([group], len(state.draining))
            backlog.add_metric([group], state.backlog_seconds)
        yield from (decisions, idle, draining, backlog)


class NodeCollector(Collector):
    """This node's part in high availability: every node exports its own (scrape each node)."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    def collect(self) -> Iterator[Metric]:
        leader = GaugeMetricFamily("lakewarden_node_leader", "1 while this node leads, else 0", labels=["node"])
        leader.add_metric([self.leadership.url], 1.0 if self.leadership.is_leader else 0.0)
        yield leader
        epoch = self.leadership.epoch
        if self.leadership.enabled and epoch is not None:
            yield GaugeMetricFamily("lakewarden_leader_epoch", "The fencing token this node leads with", value=epoch)


class HistoryCollector(Collector):
    """What the history pruner pruned and rotated on this node since it started (services/tables/history.py)."""

    def __init__(self, history: HistoryPruner) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        pruned = CounterMetricFamily(
            "lakewarden_history_pruned", "Rows deleted from history by retention (ams.history)", labels=["kind"]
        )
        for kind, count in self.history.pruned.items():
            pruned.add_metric([kind], float(count))
        yield pruned
        logs = CounterMetricFamily(
            "lakewarden_optimizer_logs", "Optimizer log files rotated and deleted", labels=["operation"]
        )
        logs.add_metric(["rotated"], float(self.history.logs_rotated))
        logs.add_metric(["deleted"], float(self.history.logs_deleted))
        yield logs


class MetadataCacheCollector(Collector):
    """The REST catalog's cache of parsed metadata files and loadTable bodies on this node
    (services/rest_catalog/metadata_files.py)."""

    def __init__(self, files: MetadataFiles) -> None:
        self.lru = files.lru

    def collect(self) -> Iterator[Metric]:
        lookups = CounterMetricFamily(
            "lakewarden_metadata_cache_lookups", "Lookups of the metadata cache", labels=["result"]
        )
        lookups.add_metric(["hit"], self.lru.hits)
        lookups.add_metric(["miss"], self.lru.misses)
        yield lookups
        yield from _sizes("lakewarden_metadata_cache", "metadata-cache.max-size", "Metadata files and bodies", self.lru)


class CommitQueueCollector(Collector):
    """The line commits to one table wait in on this node (services/rest_catalog/commit_queue.py)."""

    def __init__(self, queue: CommitQueue) -> None:
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lakewarden_commit_queue_waiting", "Commits waiting for their table's turn", value=self.queue.waiting
        )
        yield CounterMetricFamily(
            "lakewarden_commit_queue_served", "Commits that had their turn", value=self.queue.served
        )
        yield CounterMetricFamily(
            "lakewarden_commit_queue_refused",
            "Commits refused with 503 (the line was full, or they waited past max-wait)",
            value=self.queue.refused,
        )


class LongPollCollector(Collector):
    """Optimizer threads' polls waiting for a task on this node, and those that could not wait
    (ams.optimizer.max-long-polls were waiting already)."""

    def __init__(self, dispatcher: TaskDispatcher) -> None:
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lakewarden_optimizer_polls_waiting", "Optimizer polls waiting for a task", value=self.dispatcher.long_polls
        )
        yield CounterMetricFamily(
            "lakewarden_optimizer_polls_turned_away",
            "Optimizer polls answered at once with Retry-After: max-long-polls were waiting",
            value=self.dispatcher.polls_turned_away,
        )


class ScanPlanningCollector(Collector):
    """The REST catalog's scan planning on this node (its cache of results, the plans it holds) and the
    node's manifest cache, which planning shares with the evaluator."""

    def __init__(self, planning: ScanPlanning, read_ahead: ManifestReadAhead) -> None:
        self.planning = planning
        self.read_ahead = read_ahead

    def collect(self) -> Iterator[Metric]:
        planning = self.planning
        results = CounterMetricFamily(
            "lakewarden_scan_planning_cache_lookups",
            "Lookups of scan planning's cache of planning results",
            labels=["cache", "result"],
        )
        results.add_metric(["results", "hit"], planning.results.hits)
        results.add_metric(["results", "miss"], planning.results.misses)
        yield results
        yield GaugeMetricFamily(
            "lakewarden_scan_planning_open_plans", "Plans whose tasks are kept for clients", value=planning.open_plans
        )
        yield CounterMetricFamily(
            "lakewarden_scan_planning_read_ahead_manifests",
            "Manifests parsed ahead of any plan, as commits landed",
            value=self.read_ahead.manifests_read,
        )
        cache = planning.cache
        lookups = CounterMetricFamily(
            "lakewarden_manifest_cache_lookups",
            "Lookups of the manifest cache, by part (lists, entries, views, summaries)",
            labels=["part", "result"],
        )
        for part, hits in cache.hits.items():
            lookups.add_metric([part, "hit"], hits)
            lookups.add_metric([part, "miss"], cache.misses[part])
        yield lookups
        yield from _sizes("lakewarden_manifest_cache", "manifest-cache.max-size", "Parts", cache)
