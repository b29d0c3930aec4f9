"""Filters that scope a rewrite to planned partitions, in Iceberg's ExpressionParser JSON.

The optimizer hands the JSON to `org.apache.iceberg.expressions.ExpressionParser.fromJson`, which
handles transform terms (bucket, day, truncate, …), so a task's scan keeps to its partitions.
"""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.table import Table

Json = dict[str, Any] | bool


def _and(left: Json, right: Json) -> Json:
    if left is True:
        return right
    if right is True:
        return left
    return {"type": "and", "left": left, "right": right}


def _or(terms: list[Json]) -> Json:
    if not terms:
        return False
    result = terms[0]
    for term in terms[1:]:
        result = {"type": "or", "left": result, "right": term}
    return result


def partition_filter_json(table: Table, partitions: list[dict[str, Any]]) -> str:
    """`(field1 = v1 AND field2 = v2) OR …` over the given partitions, each in the terms of its own spec."""
    schema = table.schema()
    specs = table.specs()
    # Iceberg's identity transform projects a predicate on any transform of its column as if it were on the
    # column itself (`bucket[4](n) = 0` becomes `n = 0`), so a transform's term on a column some spec partitions
    # by identity would drop that spec's files from the scan. Such a term is left out: the filter needs only to
    # keep every planned file (the optimizer takes the planned ones from the scan by path), and within a spec
    # that partitions by the column itself, its identity value implies the transform's.
    by_identity = {f.source_id for spec in specs.values() for f in spec.fields if str(f.transform) == "identity"}
    alternatives: list[Json] = []
    for partition in partitions:
        spec = specs[int(partition["spec_id"])]
        clause: Json = True
        for field, value in zip(spec.fields, partition["values"], strict=True):
            column = schema.find_column_name(field.source_id)
            transform = str(field.transform)
            if transform != "identity" and field.source_id in by_identity:
                continue
            term: Any = (
                column if transform == "identity" else {"type": "transform", "transform": transform, "term": column}
            )
            if value is None:
                clause = _and(clause, {"type": "is-null", "term": term})
            else:
                clause = _and(clause, {"type": "eq", "term": term, "value": value})
        alternatives.append(clause)
    if any(a is True for a in alternatives):  # an unpartitioned spec: the whole table
        return json.dumps(True)
    return json.dumps(_or(alternatives))
