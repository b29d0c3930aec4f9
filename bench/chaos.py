"""Randomized faults over many seeded schedules (tests/chaos.py; the suite's tests/test_chaos.py runs two).

One real `lakewarden server` (SQLite system database, its embedded `local` SQL catalog and internal `lake`
catalog, one optimizer of its local container) lives across the schedules; each schedule makes its own three
tables, writes to them from Spark and pyiceberg while lakewarden optimizes and maintains them and faults strike
(SIGKILL/SIGSTOP of the server, a restart, SIGKILL/SIGSTOP of the optimizer or of its Spark JVM alone, a
table's storage refusing every write for a moment), then settles and checks: rows equal the writers' model,
no live file deleted, no orphan left after lakewarden's cleanup, every process ended within two timeouts.

Prints one line per schedule and the seed of each failure (`--first-seed N --schedules 1` replays one);
results and a plot land in bench/results/chaos.*. Runs are additive: `--first-seed` lets several runs cover
the seeds 1..500 between them.

    .venv/bin/python bench/chaos.py [--schedules 500] [--first-seed 1] [--ops 8] [--faults 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import RESULTS, bar_chart, in_temporary_dir, write
from tests.chaos import FAULTS, Outcome, chaos_lake, run_schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--ops", type=int, default=8, help="operations per writer (three writers)")
    parser.add_argument("--faults", type=int, default=3, help="faults per schedule")
    parser.add_argument("--append", action="store_true", help="add to bench/results/chaos.json's totals")
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)  # pyiceberg's notes on the writers' threads
    in_temporary_dir(lambda tmp: run(tmp, args))


def run(tmp: Path, args: argparse.Namespace) -> None:
    from lakewarden.spark.session import build_spark_session

    os.environ.setdefault("LAKEWARDEN_SPARK_LOG_LEVEL", "ERROR")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # this JVM, the server's and the optimizer's: loopback only
    spark = build_spark_session(
        app_name="lakewarden-chaos",
        driver_memory="2g",
        master="local[2]",
        extra_conf={"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"},
    )
    seeds = range(args.first_seed, args.first_seed + args.schedules)
    earlier: list[dict[str, Any]] = []
    if args.append and (RESULTS / "chaos.json").exists():
        earlier = [o for o in json.loads((RESULTS / "chaos.json").read_text())["schedules"] if o["seed"] not in seeds]
    outcomes: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        with chaos_lake(tmp, spark) as lake:
            for seed in seeds:
                try:
                    outcome = run_schedule(lake, seed, ops=args.ops, faults=args.faults)
                except Exception as exc:  # the schedule could not even run (its tables not made, …)
                    outcome = Outcome(seed, problems=[f"the schedule broke off: {type(exc).__name__}: {exc}"])
                verdict = "ok  " if outcome.passed else "FAIL"
                print(
                    f"{verdict} seed {seed:4d} {outcome.seconds:5.0f}s ops {outcome.ops} processes {outcome.processes}"
                    f" faults {outcome.faults}",
                    flush=True,
                )
                for problem in outcome.problems:
                    print(f"     {problem}", flush=True)
                outcomes.append(
                    {
                        "seed": seed,
                        "passed": outcome.passed,
                        "seconds": round(outcome.seconds, 1),
                        "faults": outcome.faults,
                        "ops": outcome.ops,
                        "processes": outcome.processes,
                        "problems": outcome.problems,
                    }
                )
                save(earlier + outcomes)  # after each schedule: a run stopped part-way keeps what it did
    except KeyboardInterrupt:
        print("\ninterrupted: reporting the schedules that finished")
    finally:
        spark.stop()
    report(earlier + outcomes, time.monotonic() - started)


def totals(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    ops: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    for o in outcomes:
        ops.update(o["ops"])
        processes.update(o["processes"])
    return {
        "schedules": len(outcomes),
        "failed_seeds": [o["seed"] for o in outcomes if not o["passed"]],
        "faults": dict(Counter(f.split(" ")[0] for o in outcomes for f in o["faults"])),
        "operations": dict(ops),
        "processes": dict(processes),
    }


def save(outcomes: list[dict[str, Any]]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # quietly: the summary at the end says where it went
        write("chaos", {"schedules": outcomes, "totals": totals(outcomes)})


def report(outcomes: list[dict[str, Any]], seconds: float) -> None:
    summary = totals(outcomes)
    failed = summary["failed_seeds"]
    print(
        f"\n{len(outcomes)} schedules, {len(outcomes) - len(failed)} passed, {len(failed)} failed"
        f"{' (seeds ' + ', '.join(map(str, failed)) + ')' if failed else ''}; this run {seconds / 60:.0f} min"
    )
    print(f"faults: {summary['faults']}")
    print(f"writers' operations: {summary['operations']}; lakewarden's processes: {summary['processes']}")
    write("chaos", {"schedules": outcomes, "totals": summary})
    bar_chart(
        "chaos",
        f"{len(outcomes)} seeded schedules, {len(failed)} failed: faults injected",
        {fault: float(summary["faults"].get(fault, 0)) for fault in FAULTS},
        "faults",
    )


if __name__ == "__main__":
    main()
