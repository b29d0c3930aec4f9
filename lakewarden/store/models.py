"""ORM rows of the system database. The schema changes only through Alembic migrations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, datetime: DateTime(timezone=True)}


class CatalogRow(Base):
    __tablename__ = "catalog_meta"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    properties: Mapped[dict[str, Any]]
    # unknown until the first refresh; unhealthy while the last listing failed
    health: Mapped[str] = mapped_column(String(16), default="unknown")
    last_refresh_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ResourceGroupRow(Base):
    __tablename__ = "resource_group"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    container: Mapped[str] = mapped_column(String(64))
    properties: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class TableIdentifierRow(Base):
    __tablename__ = "table_identifier"
    __table_args__ = (UniqueConstraint("catalog_name", "db_name", "table_name", name="uq_table_identifier"),)

    table_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    catalog_name: Mapped[str] = mapped_column(String(64), ForeignKey("catalog_meta.name"), index=True)
    db_name: Mapped[str] = mapped_column(String(255))
    table_name: Mapped[str] = mapped_column(String(255))
    format: Mapped[str] = mapped_column(String(32), default="iceberg")
    created_at: Mapped[datetime]


class TableRuntimeRow(Base):
    __tablename__ = "table_runtime"

    table_id: Mapped[int] = mapped_column(ForeignKey("table_identifier.table_id"), primary_key=True)
    status_code: Mapped[int] = mapped_column(Integer, default=700, index=True)
    status_changed_at: Mapped[datetime]
    optimizing_group: Mapped[str] = mapped_column(String(64), index=True)
    # effective configuration: built-in defaults < catalog `table.` defaults < table properties
    config: Mapped[dict[str, Any]]
    # file and snapshot summary of the current snapshot
    summary: Mapped[dict[str, Any]]
    metadata_location: Mapped[str | None] = mapped_column(Text)
    current_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    last_refreshed_at: Mapped[datetime | None]
    refresh_error: Mapped[str | None] = mapped_column(Text)
