"""What an optimizing process bought: its table's scans before it against those since, beside its CPU-seconds
(services/tables/reads.py measures and settles it; domain/reads.py says what a scan report holds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

BENEFIT_WINDOW = timedelta(hours=24)  # the scans before a process, and after it, that it is judged by


@dataclass(frozen=True)
class ReadCost:
    """What the scans of a table in a window read, on average."""

    scans: int
    files_per_scan: float  # data and delete files
    delete_files_per_scan: float
    bytes_per_scan: float


@dataclass(frozen=True)
class Benefit:
    """What an optimizing process bought: the table's scans in the BENEFIT_WINDOW before it was planned against
    those since it ended (until the window is over, the table's next optimizing process starts, or now), beside
    its CPU-seconds. `settled` once the window after it is closed (then it is kept in the process's summary)."""

    before: ReadCost
    after: ReadCost
    cpu_seconds: float
    files_saved: float  # files the scans since did not open: the drop in files per scan, times those scans
    settled: bool
    text: str


def _share(after: float, before: float) -> str:
    if after <= 0:
        return "none"
    ratio = after / before
    return f"1/{before / after:.0f}" if ratio <= 0.5 else f"{ratio:.0%}"


def benefit_text(before: ReadCost, after: ReadCost, cpu_seconds: float) -> str:
    """ "cost 41 CPU-s; 12 scans since read 1/9 of the files"."""
    cost = f"cost {cpu_seconds:.3g} CPU-s"
    if before.scans == 0:
        return f"{cost}; no scans in the day before it to compare with"
    if after.scans == 0:
        return f"{cost}; no scans since"
    if before.files_per_scan <= 0:
        return f"{cost}; {after.scans} scans since (none before read a file)"
    return (
        f"{cost}; {after.scans} scans since read {_share(after.files_per_scan, before.files_per_scan)} of the files "
        f"({after.files_per_scan:.3g} per scan, {before.files_per_scan:.3g} before)"
    )


def benefit_of(before: ReadCost, after: ReadCost, cpu_seconds: float, settled: bool) -> Benefit:
    saved = (before.files_per_scan - after.files_per_scan) * after.scans if before.scans and after.scans else 0.0
    return Benefit(before, after, cpu_seconds, saved, settled, benefit_text(before, after, cpu_seconds))


@dataclass(frozen=True)
class NetBenefit:
    """What a table's (a group's) optimizing processes bought, added up."""

    processes: int  # those with scans before and after to judge them by
    cpu_seconds: float
    files_saved: float
    files_saved_per_cpu_second: float

    @staticmethod
    def of(benefits: Sequence[Benefit]) -> NetBenefit:
        judged = [b for b in benefits if b.before.scans and b.after.scans]
        cpu = sum(b.cpu_seconds for b in judged)
        saved = sum(b.files_saved for b in judged)
        return NetBenefit(len(judged), cpu, saved, saved / cpu if cpu > 0 else 0.0)


def benefit_json(benefit: Benefit) -> dict[str, Any]:
    """As a process summary keeps it."""
    return asdict(benefit)


def benefit_from_json(data: Mapping[str, Any]) -> Benefit:
    return Benefit(
        before=ReadCost(**data["before"]),
        after=ReadCost(**data["after"]),
        cpu_seconds=float(data["cpu_seconds"]),
        files_saved=float(data["files_saved"]),
        settled=bool(data["settled"]),
        text=str(data["text"]),
    )
