"""The readers of tables of other formats than Iceberg, by format (domain/catalogs.FORMAT_OF_CATALOG names the
catalog types): each finds a warehouse's tables, says whether one changed, and reads what the explorer keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from lakewarden.domain.tables import TableSnapshot
from lakewarden.metadata import hudi, paimon


class FormatReader(Protocol):
    def find_tables(self, warehouse: str) -> dict[tuple[str, str], Path]: ...

    def change_token(self, table: Path) -> str: ...

    def snapshot(self, table: Path) -> TableSnapshot: ...


READERS: dict[str, FormatReader] = {"hudi": hudi, "paimon": paimon}
