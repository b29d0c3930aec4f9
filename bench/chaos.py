"""Randomized faults over many seeded schedules (tests/chaos.py; the suite's tests/test_chaos.py runs two).

One real `lakewarden server` (SQLite system database, its embedded `local` SQL catalog and internal `lake`
catalog, one optimizer of its local container) lives across the schedules; each schedule makes its own three
tables, writes to them from Spark and pyiceberg while lakewarden optimizes and maintains them and faults strike
(SIGKILL/SIGSTOP of the server, a restart, SIGKILL/SIGSTOP of the optimizer or of its Spark JVM alone, a
table's storage failing for a moment), then settles and checks: rows equal the writers' model,
no live file deleted, no orphan left after lakewarden's cleanup, every process ended within two timeouts.

With `--storage s3` both catalogs keep their tables on an S3 server (moto, behind a proxy that refuses or
slows the requests on one table's objects among the faults); results go to bench/results/chaos_s3.*.

Prints one line per schedule and the seed of each failure (`--first-seed N --schedules 1` replays one);
results and a plot land in bench/results/chaos.*. Runs are additive: `--first-seed` lets several runs cover
the seeds 1..500 between them.

    .venv/bin/python bench/chaos.py [--schedules 500] [--first-seed 1] [--ops 8] [--faults 3] [--storage s3]
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
from tests.chaos import Outcome, chaos_lake, run_schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=500)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--ops", type=int, default=8, help="operations per writer (three writers)")
    parser.add_argument("--faults", type=int, default=3, help="faults per schedule")
    parser.add_argument("--storage", choices=("local", "s3"), default="local", help="where the tables live")
    parser.add_argument("--append", action="store_true", help="add to the earlier results' totals")
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
    name = "chaos" if args.storage == "local" else f"chaos_{args.storage}"
    if args.append and (RESULTS / f"{name}.json").exists():
        earlier = [o for o in json.loads((RESULTS / f"{name}.json").read_text())["schedules"] if o["seed"] not in seeds]
    outcomes: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        with chaos_lake(tmp, spark, args.storage) as lake:
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
                save(name, earlier + outcomes)  # after each schedule: a run stopped part-way keeps what it did
    except KeyboardInterrupt:
        print("\ninterrupted: reporting the schedules that finished")
    finally:
        spark.stop()
    report(name, earlier + outcomes, time.monotonic() - started)


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


def save(name: str, outcomes: list[dict[str, Any]]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # quietly: the summary at the end says where it went
        write(name, {"schedules": outcomes, "totals": totals(outcomes)})


def report(name: str, outcomes: list[dict[str, Any]], seconds: float) -> None:
    summary = totals(outcomes)
    failed = summary["failed_seeds"]
    print(
        f"\n{len(outcomes)} schedules, {len(outcomes) - len(failed)} passed, {len(failed)} failed"
        f"{' (seeds ' + ', '.join(map(str, failed)) + ')' if failed else ''}; this run {seconds / 60:.0f} min"
    )
    print(f"faults: {summary['faults']}")
    print(f"writers' operations: {summary['operations']}; lakewarden's processes: {summary['processes']}")
    write(name, {"schedules": outcomes, "totals": summary})
    bar_chart(
        name,
        f"{len(outcomes)} seeded schedules, {len(failed)} failed: faults injected",
        {fault: float(count) for fault, count in sorted(summary["faults"].items())},
        "faults",
    )


if __name__ == "__main__":
    main()
