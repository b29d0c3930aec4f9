"""Randomized faults (tests/chaos.py) on a few fixed seeds: writers, lakewarden optimizing and maintaining,
faults at random points, then the checks (rows equal the model, no live file deleted, no orphan left after
cleanup, every process ended). bench/chaos.py runs hundreds of seeds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.chaos import Lake, chaos_lake, run_schedule

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    # pyiceberg warns on the writer's threads (e.g. a delete rewriting a file): not what these tests look at
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
SEEDS = (20261124, 7)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[Lake]:
    with chaos_lake(tmp_path_factory.mktemp("chaos"), spark) as lake:
        yield lake


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_schedule_of_faults_loses_nothing(lake: Lake, seed: int) -> None:
    outcome = run_schedule(lake, seed, ops=6, faults=3)
    print(outcome)
    assert outcome.passed, "\n".join([f"seed {seed}: {outcome.faults}", *outcome.problems])
    assert outcome.faults and outcome.ops["applied"] >= 3 * 4  # it did write, with faults among the writes
    assert sum(outcome.processes.values()) >= 1  # and lakewarden did work on the tables
