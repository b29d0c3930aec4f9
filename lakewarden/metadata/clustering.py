"""A table's clustering (domain/clustering.py), read from its metadata: its sort order and its schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyiceberg.schema import index_by_name
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from lakewarden.domain.clustering import Clustering
from lakewarden.domain.optimizing_config import OptimizingConfig


def table_clustering(table: Table, config: OptimizingConfig, marks: Mapping[str, Any] | None) -> Clustering | None:
    """z-order on `self-optimizing.z-order.columns`, else the table's default sort order, else none; raises
    InvalidField naming the property when it names no column of the table."""
    schema = table.schema()
    order = table.sort_order()
    fields = []
    for f in order.fields:
        name = schema.find_column_name(f.source_id) or f"#{f.source_id}"
        column = name if isinstance(f.transform, IdentityTransform) else f"{f.transform}({name})"
        fields.append(f"{column} {f.direction.name.lower()}")
    identity = {
        schema.find_column_name(p.source_id) or ""
        for p in table.spec().fields
        if isinstance(p.transform, IdentityTransform)
    }
    columns = set(index_by_name(schema))  # nested fields by their dotted names too
    return Clustering.of(config.z_order_columns, order.order_id, fields, columns, identity, marks)
