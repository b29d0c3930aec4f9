"""Whether a file may hold rows a reported scan's filter matches.

A client's ScanReport carries its filter sanitized (Iceberg's ExpressionUtil.sanitize): a string becomes the
hash of its value, a number the count of its digits, a date or time how far it is from now. So the filter
cannot be evaluated, but an equality or IN on a column a spec partitions by identity can be compared with a
file's partition value, sanitized the same way. Everything else may match."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, StringType

# ExpressionUtil's string hash: Iceberg's bucket transform over Integer.MAX_VALUE buckets
_HASH = BucketTransform(2147483647).transform(StringType())
# strings ExpressionUtil sanitizes as dates, times or timestamps rather than hashing them
_DATE_OR_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}|\d{2}:\d{2})")


def sanitized(value: Any, kind: Any) -> str | None:
    """A partition value as ExpressionUtil sanitizes a literal of its type; None where lakewarden does not
    reproduce it (its filter then may match)."""
    if value is None:
        return None
    if isinstance(kind, StringType) and isinstance(value, str) and not _DATE_OR_TIME.match(value):
        return f"(hash-{_HASH(value):08x})"
    if isinstance(kind, IntegerType | LongType) and isinstance(value, int):
        digits = 1 if value == 0 else int(math.log10(abs(value))) + 1
        return f"({digits}-digit-int)"
    return None


class ReportedFilter:
    """A scan report's filter (Iceberg's ExpressionParser JSON, sanitized) against a table's files."""

    def __init__(self, expression: Any, schema: Schema, specs: Mapping[int, PartitionSpec]) -> None:
        self.expression = expression
        self.schema = schema
        self.specs = specs

    def may_match(self, data_file: DataFile, spec_id: int) -> bool:
        spec = self.specs.get(spec_id)
        if spec is None:
            return True
        values: dict[str, str | None] = {}
        for position, field in enumerate(spec.fields):
            if not isinstance(field.transform, IdentityTransform):
                continue
            column = self.schema.find_field(field.source_id)
            values[column.name] = sanitized(data_file.partition[position], column.field_type)
        return _may(self.expression, values)


def _may(node: Any, values: Mapping[str, str | None]) -> bool:
    """Whether rows of a file whose identity partition values sanitize to `values` may match `node`."""
    if node is False or node == "false":
        return False
    if not isinstance(node, Mapping):
        return True
    kind = str(node.get("type", "")).lower()
    if kind == "and":
        return _may(node.get("left"), values) and _may(node.get("right"), values)
    if kind == "or":
        return _may(node.get("left"), values) or _may(node.get("right"), values)
    term = node.get("term")
    if not isinstance(term, str) or term not in values or values[term] is None:
        return True  # a transform's term, a column no spec partitions by identity, a value not reproduced
    if kind == "eq":
        return node.get("value") == values[term]
    if kind == "in":
        found = node.get("values")
        return not isinstance(found, list) or values[term] in found
    return True
