"""The chaos harness (tests/chaos.py) with the tables on S3: both catalogs keep them on an S3 server (moto,
with IAM authentication on) that every process reaches through a proxy, and among the faults the store
refuses (503 SlowDown, 500 InternalError) or slows every request on one table's objects for a moment. The
checks are the local run's: rows equal the writers' model, no live object deleted, none left over after
orphan cleanup (listed from the bucket itself), every process ended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.chaos import Lake, chaos_lake, run_schedule
from tests.chaos_storage import ObjectStorage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]
SEED = 21  # its schedule: the store refuses (503), then slows, then the server is killed


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Iterator[Lake]:
    with chaos_lake(tmp_path_factory.mktemp("chaos-s3"), spark, storage="s3") as lake:
        yield lake


def test_a_seeded_schedule_of_faults_on_s3_loses_nothing(lake: Lake) -> None:
    outcome = run_schedule(lake, SEED, ops=6, faults=3)
    print(outcome)
    assert outcome.passed, "\n".join([f"seed {SEED}: {outcome.faults}", *outcome.problems])
    assert outcome.faults[0].startswith("storage-refuses"), outcome.faults
    assert isinstance(lake.storage, ObjectStorage)
    assert lake.storage.proxy.refused > 0  # the refusal did hit requests
    assert outcome.ops["applied"] >= 3 * 4
    assert sum(outcome.processes.values()) >= 1  # lakewarden did work on the tables, on S3
