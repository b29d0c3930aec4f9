"""Store functions of the REST catalog's views: their pointers, with the same compare-and-swap as tables' and in
the same names (store/rest_catalog.py)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from lakewarden.domain.errors import NoSuchView
from lakewarden.store.models import IcebergViewRow
from lakewarden.store.rest_catalog import add_pointer, levels, list_names, rename_row, swap_row


def get_view(session: Session, catalog: str, namespace: str, view: str) -> IcebergViewRow:
    row = session.get(IcebergViewRow, (catalog, namespace, view))
    if row is None:
        raise NoSuchView(f"View does not exist: {'.'.join(levels(namespace))}.{view}")
    return row


def view_exists(session: Session, catalog: str, namespace: str, view: str) -> bool:
    return session.get(IcebergViewRow, (catalog, namespace, view)) is not None


def list_views(session: Session, catalog: str, namespace: str) -> list[str]:
    return list_names(session, IcebergViewRow.view_name, catalog, namespace)


def create_view(session: Session, catalog: str, namespace: str, view: str, location: str) -> IcebergViewRow:
    return add_pointer(session, IcebergViewRow, "view_name", (catalog, namespace, view), location)


def swap_view(session: Session, catalog: str, namespace: str, view: str, expected: str, version: int, new: str) -> bool:
    key = (catalog, namespace, view)
    return swap_row(session, IcebergViewRow, IcebergViewRow.view_name, key, expected, version, new)


def drop_view(session: Session, catalog: str, namespace: str, view: str) -> IcebergViewRow:
    row = get_view(session, catalog, namespace, view)
    session.delete(row)
    session.flush()
    return row


def rename_view(session: Session, catalog: str, source: tuple[str, str], target: tuple[str, str]) -> None:
    rename_row(session, get_view(session, catalog, *source), IcebergViewRow.view_name, catalog, source, target)
