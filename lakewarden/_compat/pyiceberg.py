"""pyiceberg's private names, as metadata/ uses them: a commit's updates applied as pyiceberg applies them (the
REST catalog stages commits on the server), a manifest's entries inheriting from their manifest as pyiceberg reads
them, pyiceberg's metrics evaluator (scan planning prunes files as pyiceberg does), the SQL catalog's filter
that leaves views out of its table listing, the Hive catalog's thrift client, the REST catalog's HTTP session
and table paths, and a manifest writer for delete files (pyiceberg writes data manifests only).
tests/test_compat.py checks each contract against the installed pyiceberg."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import OutputFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema

from lakewarden._compat._check import broken

LIBRARY = "pyiceberg"
SUPPORTED = "==0.12.0"  # pyproject.toml pins the same

try:
    # pyiceberg.expressions.visitors: the evaluator of a filter against a file's column metrics (lower and upper
    # bounds, null and NaN counts), as pyiceberg's own planning uses it
    from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator as InclusiveMetricsEvaluator

    # pyiceberg.manifest: the format-version 2 manifest writer, whose content delete manifests override
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    # pyiceberg.manifest: an entry's snapshot id and sequence numbers inherited from its manifest, as a read does
    from pyiceberg.manifest import _inherit_from_manifest as inherit_from_manifest

    # pyiceberg.table.update: one update applied to table metadata (a singledispatch over the update models), the
    # context that collects what a commit changed, and the metadata log's entry of the version a commit replaces
    from pyiceberg.table.update import _apply_table_update as apply_table_update
    from pyiceberg.table.update import _TableMetadataUpdateContext as TableMetadataUpdateContext
    from pyiceberg.table.update import _update_table_metadata_log as update_table_metadata_log
except ImportError as exc:
    raise broken(LIBRARY, SUPPORTED, exc) from exc

__all__ = [
    "InclusiveMetricsEvaluator",
    "TableMetadataUpdateContext",
    "apply_table_update",
    "inherit_from_manifest",
    "update_table_metadata_log",
]


def views_filter(catalog: Any) -> Any:
    """A SQL catalog's condition that leaves views out of its `iceberg_tables` rows (`SqlCatalog._iceberg_type_filter`:
    Iceberg's Java and Rust catalogs keep views in the same table), or None for rows of tables only. Without it a
    listing would take views for tables: a pyiceberg that lacks it is refused."""
    filtering = getattr(catalog, "_iceberg_type_filter", None)
    if filtering is None:
        raise broken(LIBRARY, SUPPORTED, "SqlCatalog._iceberg_type_filter is gone")
    return filtering()


def hive_client(catalog: Any) -> Any:
    """A HiveCatalog's thrift connection (`HiveCatalog._client`), a context manager giving the metastore's client.
    pyiceberg reads one table per call; lakewarden reads every table's metadata location a batch of names at a
    time (`get_table_objects_by_name`) through the same connection and its settings (URI, ugi, Kerberos)."""
    client = getattr(catalog, "_client", None)
    if client is None or not hasattr(client, "__enter__"):
        raise broken(LIBRARY, SUPPORTED, "HiveCatalog._client is gone")
    return client


def rest_session(catalog: Any) -> Any:
    """A RestCatalog's HTTP session (`RestCatalog._session`: a requests Session with the catalog's authentication and
    headers). pyiceberg has no conditional loadTable; lakewarden's watch pass sends `If-None-Match` through it."""
    session = getattr(catalog, "_session", None)
    if session is None or not callable(getattr(session, "get", None)):
        raise broken(LIBRARY, SUPPORTED, "RestCatalog._session is gone")
    return session


def delete_manifest_writer(
    spec: PartitionSpec, schema: Schema, output: OutputFile, snapshot_id: int, compression: AvroCompressionCodec
) -> ManifestWriterV2:
    """A format-version 2 manifest of delete files. pyiceberg's ManifestWriterV2 writes data manifests only: its
    `content()` is DATA and its private `_meta` property names the content in the file's metadata, which Java's
    ManifestReader checks. Both are overridden here."""
    if not isinstance(getattr(ManifestWriterV2, "_meta", None), property):
        raise broken(LIBRARY, SUPPORTED, "ManifestWriterV2._meta is gone")
    return _DeleteManifestWriterV2(spec, schema, output, snapshot_id, compression)


class _DeleteManifestWriterV2(ManifestWriterV2):
    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def rest_table_path(catalog: Any, identifier: tuple[str, ...]) -> dict[str, str]:
    """A table's path parameters as a RestCatalog encodes them (`_split_identifier_for_path`: the namespace with the
    separator the server advertised, each part quoted)."""
    split = getattr(catalog, "_split_identifier_for_path", None)
    if split is None:
        raise broken(LIBRARY, SUPPORTED, "RestCatalog._split_identifier_for_path is gone")
    return dict(split(identifier))


CONTRACT: Mapping[str, Callable[..., Any]] = {
    "InclusiveMetricsEvaluator": InclusiveMetricsEvaluator,
    "inherit_from_manifest": inherit_from_manifest,
    "apply_table_update": apply_table_update,
    "update_table_metadata_log": update_table_metadata_log,
}
PARAMETERS = {
    "InclusiveMetricsEvaluator": ["schema", "expr", "case_sensitive", "include_empty_files"],
    "inherit_from_manifest": ["entry", "manifest"],
    "apply_table_update": ["update", "base_metadata", "context"],
    "update_table_metadata_log": ["base_metadata", "metadata_location", "last_updated_ms"],
}
