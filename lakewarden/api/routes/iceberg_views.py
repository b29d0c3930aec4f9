"""The REST catalog's views (`/iceberg/v1/{prefix}/…/views`): list, create, load, exists, replace, drop,
rename and register, answered by the catalog the prefix names (services/rest_catalog/served.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewVersion

from lakewarden.api.auth import Caller, require_catalog
from lakewarden.api.fast_path.lean_routes import LeanRoute
from lakewarden.api.routes.iceberg_common import Served, TableRef, ns, page
from lakewarden.api.schemas import ClientBody
from lakewarden.domain.errors import NoSuchView
from lakewarden.domain.security import Privilege
from lakewarden.metadata.views import AssertViewUUID, ViewUpdate
from lakewarden.services.rest_catalog.served import NewView
from lakewarden.store import rest_catalog as store

router = APIRouter(tags=["iceberg rest catalog: views"], route_class=LeanRoute)


class CreateView(ClientBody):
    name: str = Field(min_length=1)
    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str]


class CommitView(ClientBody):
    identifier: TableRef | None = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate]


class RegisterView(ClientBody):
    name: str = Field(min_length=1)
    metadata_location: str = Field(alias="metadata-location", min_length=1)


class RenameView(ClientBody):
    source: TableRef
    destination: TableRef


@router.get("/{prefix}/namespaces/{namespace}/views")
def list_views(
    prefix: str,
    namespace: str,
    catalog: Served,
    me: Caller,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    key = ns(namespace)
    levels = tuple(store.levels(key))
    names = [n for n in catalog.list_views(key) if me.may(prefix, levels, n, Privilege.READ)]
    found, token = page(names, page_token, page_size)
    return {"identifiers": [{"namespace": list(levels), "name": n} for n in found], "next-page-token": token}


@router.post("/{prefix}/namespaces/{namespace}/views")
def create_view(prefix: str, namespace: str, body: CreateView, catalog: Served) -> dict[str, Any]:
    view = NewView(body.name, body.view_schema, body.view_version, body.properties, body.location)
    return catalog.create_view(ns(namespace), view)


@router.get("/{prefix}/namespaces/{namespace}/views/{view}")
def load_view(prefix: str, namespace: str, view: str, catalog: Served) -> dict[str, Any]:
    return catalog.load_view(ns(namespace), view)


@router.head("/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def view_exists(prefix: str, namespace: str, view: str, catalog: Served) -> Response:
    if not catalog.view_exists(ns(namespace), view):
        raise NoSuchView(f"View does not exist: {namespace}.{view}")
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/views/{view}")
def replace_view(
    prefix: str,
    namespace: str,
    view: str,
    body: CommitView,
    catalog: Served,
    user_agent: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    return catalog.replace_view(ns(namespace), view, body.requirements, body.updates, user_agent)


@router.delete("/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def drop_view(prefix: str, namespace: str, view: str, catalog: Served) -> Response:
    catalog.drop_view(ns(namespace), view)
    return Response(status_code=204)


@router.post("/{prefix}/views/rename", status_code=204)
def rename_view(prefix: str, body: RenameView, catalog: Served, me: Caller) -> Response:
    require_catalog(me, prefix, tuple(body.source.namespace), body.source.name, Privilege.WRITE)
    require_catalog(me, prefix, tuple(body.destination.namespace), body.destination.name, Privilege.WRITE)
    catalog.rename_view(body.source.key, body.destination.key)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/register-view")
def register_view(prefix: str, namespace: str, body: RegisterView, catalog: Served) -> dict[str, Any]:
    return catalog.register_view(ns(namespace), body.name, body.metadata_location)
