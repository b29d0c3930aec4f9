"""Iceberg view metadata, built and changed as Java's `ViewMetadata.Builder` does.

Kept from it: equal schemas and equivalent versions reuse their ids, `-1` names what this change added last, one
query per dialect, the version log, `replace.drop-dialect.allowed`, and `version.history.num-entries` versions
kept. One deliberate difference: a created view keeps the client's version summary, so the engine that wrote it
stays known. docs/rest-catalog.md lists the rules."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AssignUUIDUpdate,
    RemovePropertiesUpdate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    UpgradeFormatVersionUpdate,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.view.metadata import SQLViewRepresentation, ViewHistoryEntry, ViewMetadata, ViewVersion

LAST_ADDED = -1
HISTORY_SIZE = "version.history.num-entries"
DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"


class AddViewVersionUpdate(IcebergBaseModel):
    action: Literal["add-view-version"] = Field(default="add-view-version")
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersionUpdate(IcebergBaseModel):
    action: Literal["set-current-view-version"] = Field(default="set-current-view-version")
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUIDUpdate
    | UpgradeFormatVersionUpdate
    | AddSchemaUpdate
    | SetLocationUpdate
    | SetPropertiesUpdate
    | RemovePropertiesUpdate
    | AddViewVersionUpdate
    | SetCurrentViewVersionUpdate,
    Field(discriminator="action"),
]


class AssertViewUUID(IcebergBaseModel):
    type: Literal["assert-view-uuid"] = Field(default="assert-view-uuid")
    uuid: str


class ViewChangeError(ValueError):
    """An update that cannot apply to the view (the message says why)."""


def _same_schema(one: Schema, two: Schema) -> bool:
    return one.fields == two.fields and one.identifier_field_ids == two.identifier_field_ids


def _same_version(one: ViewVersion, two: ViewVersion) -> bool:
    return (
        one.summary == two.summary
        and one.representations == two.representations
        and one.default_catalog == two.default_catalog
        and tuple(one.default_namespace) == tuple(two.default_namespace)
        and one.schema_id == two.schema_id
    )


def _dialects(version: ViewVersion) -> set[str]:
    return {r.root.dialect.lower() for r in version.representations if isinstance(r.root, SQLViewRepresentation)}


class _Builder:
    def __init__(self, base: ViewMetadata | None) -> None:
        self.base = base
        self.uuid = base.view_uuid if base else None
        self.format_version = base.format_version if base else 1
        self.location = base.location if base else None
        self.schemas = list(base.schemas) if base else []
        self.versions = list(base.versions) if base else []
        self.history = list(base.version_log) if base else []
        self.properties = dict(base.properties) if base else {}
        self.current_version_id = base.current_version_id if base else None
        self.previous = next(v for v in base.versions if v.version_id == base.current_version_id) if base else None
        self.last_added_schema: int | None = None
        self.last_added_version: int | None = None
        self.added_versions: set[int] = set()
        self.history_entry: ViewHistoryEntry | None = None
        self.changed = False

    def assign_uuid(self, value: str) -> None:
        if self.uuid is not None and self.uuid != value:
            raise ViewChangeError("Cannot reassign uuid")
        if self.uuid != value:
            self.uuid, self.changed = value, True

    def upgrade_format_version(self, version: int) -> None:
        if version < self.format_version:
            raise ViewChangeError(f"Cannot downgrade v{self.format_version} view to v{version}")
        if version > 1:
            raise ViewChangeError(f"Unsupported view format version: {version}")

    def set_location(self, location: str) -> None:
        if location != self.location:
            self.location, self.changed = location, True

    def add_schema(self, schema: Schema) -> int:
        new_id = 0
        for known in self.schemas:
            if _same_schema(known, schema):
                return known.schema_id
            new_id = max(new_id, known.schema_id + 1)
        self.schemas.append(Schema(*schema.fields, schema_id=new_id, identifier_field_ids=schema.identifier_field_ids))
        self.last_added_schema, self.changed = new_id, True
        return new_id

    def add_version(self, version: ViewVersion) -> int:
        if version.schema_id == LAST_ADDED:
            if self.last_added_schema is None:
                raise ViewChangeError("Cannot set last added schema: no schema has been added")
            version = version.model_copy(update={"schema_id": self.last_added_schema})
        new_id = version.version_id
        for known in self.versions:
            if _same_version(known, version):
                self.last_added_version = known.version_id if known.version_id in self.added_versions else None
                return known.version_id
            new_id = max(new_id, known.version_id + 1)
        if not any(s.schema_id == version.schema_id for s in self.schemas):
            raise ViewChangeError(f"Cannot add version with unknown schema: {version.schema_id}")
        seen: set[str] = set()
        for representation in version.representations:
            dialect = representation.root.dialect.lower()
            if dialect in seen:
                raise ViewChangeError(f"Invalid view version: Cannot add multiple queries for dialect {dialect}")
            seen.add(dialect)
        self.versions.append(version.model_copy(update={"version_id": new_id}))
        self.added_versions.add(new_id)
        self.last_added_version, self.changed = new_id, True
        return new_id

    def set_current_version(self, version_id: int) -> None:
        if version_id == LAST_ADDED:
            if self.last_added_version is None:
                raise ViewChangeError("Cannot set last version id: no current version id has been set")
            version_id = self.last_added_version
        if version_id == self.current_version_id:
            return
        version = next((v for v in self.versions if v.version_id == version_id), None)
        if version is None:
            raise ViewChangeError(f"Cannot set current version to unknown version: {version_id}")
        self.current_version_id, self.changed = version_id, True
        stamp = version.timestamp_ms if version_id in self.added_versions else int(time.time() * 1000)
        self.history_entry = ViewHistoryEntry(timestamp_ms=stamp, version_id=version_id)

    def apply(self, update: object) -> None:
        if isinstance(update, AssignUUIDUpdate):
            self.assign_uuid(str(update.uuid))
        elif isinstance(update, UpgradeFormatVersionUpdate):
            self.upgrade_format_version(update.format_version)
        elif isinstance(update, AddSchemaUpdate):
            self.add_schema(update.schema_)
        elif isinstance(update, SetLocationUpdate):
            self.set_location(update.location)
        elif isinstance(update, SetPropertiesUpdate):
            if update.updates:
                self.properties.update(update.updates)
                self.changed = True
        elif isinstance(update, RemovePropertiesUpdate):
            if update.removals:
                for key in update.removals:
                    self.properties.pop(key, None)
                self.changed = True
        elif isinstance(update, AddViewVersionUpdate):
            self.add_version(update.view_version)
        elif isinstance(update, SetCurrentViewVersionUpdate):
            self.set_current_version(update.view_version_id)
        else:
            raise ViewChangeError(f"{getattr(update, 'action', type(update).__name__)} is not a view update")

    def build(self) -> ViewMetadata:
        if self.location is None:
            raise ViewChangeError("Invalid location: null")
        if not self.versions or self.current_version_id is None:
            raise ViewChangeError("Invalid view: no versions were added")
        history = [*self.history, *([self.history_entry] if self.history_entry else [])]
        current = next(v for v in self.versions if v.version_id == self.current_version_id)
        allowed = self.properties.get(DROP_DIALECT_ALLOWED, "false").lower() == "true"
        if self.previous is not None and not allowed and not _dialects(self.previous) <= _dialects(current):
            raise ViewChangeError(
                f"Cannot replace view due to loss of view dialects ({DROP_DIALECT_ALLOWED}=false): "
                f"previous dialects {sorted(_dialects(self.previous))}, new dialects {sorted(_dialects(current))}"
            )
        try:
            size = int(self.properties.get(HISTORY_SIZE, "10"))
        except ValueError:
            raise ViewChangeError(f"{HISTORY_SIZE} must be an integer") from None
        if size <= 0:
            raise ViewChangeError(f"{HISTORY_SIZE} must be positive but was {size}")
        keep = max(len(self.added_versions | {self.current_version_id}), size)
        versions = self.versions
        if len(versions) > keep:
            newest = sorted((v.version_id for v in versions), reverse=True)[:keep]
            kept = {self.current_version_id, *newest[: keep - 1 if self.current_version_id not in newest else keep]}
            versions = [v for v in versions if v.version_id in kept]
            retained: list[ViewHistoryEntry] = []
            for entry in history:  # cleared before any version no longer kept
                retained = [*retained, entry] if entry.version_id in kept else []
            history = retained
        return ViewMetadata(
            view_uuid=self.uuid or str(uuid.uuid4()),
            format_version=self.format_version,
            location=self.location,
            schemas=self.schemas,
            current_version_id=self.current_version_id,
            versions=versions,
            version_log=history,
            properties=self.properties,
        )


def new_view(
    schema: Schema, version: ViewVersion, properties: dict[str, str], location: str, timestamp_ms: int | None = None
) -> ViewMetadata:
    """A created view: the schema, then the version (id 1, its schema the one added) made current."""
    builder = _Builder(None)
    builder.properties.update(properties)
    builder.set_location(location)
    schema_id = builder.add_schema(schema)
    stamp = timestamp_ms or int(time.time() * 1000)
    first = version.model_copy(update={"version_id": 1, "schema_id": schema_id, "timestamp_ms": stamp})
    builder.set_current_version(builder.add_version(first))
    return builder.build()


def apply_view_updates(base: ViewMetadata, updates: Sequence[object]) -> ViewMetadata:
    """A replace's updates applied to `base`; `base` itself when nothing changes. Raises ViewChangeError."""
    builder = _Builder(base)
    for update in updates:
        builder.apply(update)
    return builder.build() if builder.changed else base


def view_json(metadata: ViewMetadata) -> str:
    return metadata.model_dump_json(by_alias=True, exclude_none=True)
