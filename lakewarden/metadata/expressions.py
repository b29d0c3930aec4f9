"""Filters that scope a rewrite to planned partitions, in Iceberg's ExpressionParser JSON.

The optimizer hands the JSON to `org.apache.iceberg.expressions.ExpressionParser.fromJson`, which
handles transform terms (bucket, day, truncate, …), so a task touches exactly its partitions.
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
    alternatives: list[Json] = []
    for partition in partitions:
        spec = specs[int(partition["spec_id"])]
        clause: Json = True
        for field, value in zip(spec.fields, partition["values"], strict=True):
            column = schema.find_column_name(field.source_id)
            transform = str(field.transform)
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
