"""The REST catalog's views (`/iceberg/v1/{prefix}/…/views`): list, create, load, exists, replace, drop,
rename and register, for catalogs of type `internal` (services/rest_catalog/views.py does the work)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from pydantic import Field
from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewVersion

from lakewarden.api.auth import Caller, require_catalog
from lakewarden.api.context import ServerContext, server_context
from lakewarden.api.fast_path.lean_routes import LeanRoute
from lakewarden.api.routes.iceberg_rest import TableRef, _ns, _page
from lakewarden.api.schemas import ClientBody
from lakewarden.domain.errors import NoSuchView
from lakewarden.domain.security import Privilege
from lakewarden.metadata.views import AssertViewUUID, ViewUpdate
from lakewarden.services.rest_catalog.views import ViewCatalog
from lakewarden.store import rest_catalog as store

router = APIRouter(tags=["iceberg rest catalog: views"], route_class=LeanRoute)


async def views(ctx: Annotated[ServerContext, Depends(server_context)]) -> ViewCatalog:
    return ctx.rest_catalog.views


Views = Annotated[ViewCatalog, Depends(views)]


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
    catalog: Views,
    me: Caller,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
    page_size: Annotated[int | None, Query(alias="pageSize", ge=1)] = None,
) -> dict[str, Any]:
    ns = _ns(namespace)
    names = [n for n in catalog.list_views(prefix, ns) if me.may(prefix, tuple(store.levels(ns)), n, Privilege.READ)]
    page, token = _page(names, page_token, page_size)
    return {"identifiers": [{"namespace": store.levels(ns), "name": n} for n in page], "next-page-token": token}


@router.post("/{prefix}/namespaces/{namespace}/views")
def create_view(prefix: str, namespace: str, body: CreateView, catalog: Views) -> dict[str, Any]:
    loaded = catalog.create(
        prefix, _ns(namespace), body.name, body.view_schema, body.view_version, body.properties, body.location
    )
    return loaded.body()


@router.get("/{prefix}/namespaces/{namespace}/views/{view}")
def load_view(prefix: str, namespace: str, view: str, catalog: Views) -> dict[str, Any]:
    return catalog.load(prefix, _ns(namespace), view).body()


@router.head("/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def view_exists(prefix: str, namespace: str, view: str, catalog: Views) -> Response:
    if not catalog.exists(prefix, _ns(namespace), view):
        raise NoSuchView(f"View does not exist: {namespace}.{view}")
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/views/{view}")
def replace_view(
    prefix: str,
    namespace: str,
    view: str,
    body: CommitView,
    catalog: Views,
    user_agent: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    return catalog.replace(prefix, _ns(namespace), view, body.requirements, body.updates, user_agent).body()


@router.delete("/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def drop_view(prefix: str, namespace: str, view: str, catalog: Views) -> Response:
    catalog.drop(prefix, _ns(namespace), view)
    return Response(status_code=204)


@router.post("/{prefix}/views/rename", status_code=204)
def rename_view(prefix: str, body: RenameView, catalog: Views, me: Caller) -> Response:
    require_catalog(me, prefix, tuple(body.source.namespace), body.source.name, Privilege.WRITE)
    require_catalog(me, prefix, tuple(body.destination.namespace), body.destination.name, Privilege.WRITE)
    source = (store.key(body.source.namespace), body.source.name)
    target = (store.key(body.destination.namespace), body.destination.name)
    catalog.rename(prefix, source, target)
    return Response(status_code=204)


@router.post("/{prefix}/namespaces/{namespace}/register-view")
def register_view(prefix: str, namespace: str, body: RegisterView, catalog: Views) -> dict[str, Any]:
    return catalog.register(prefix, _ns(namespace), body.name, body.metadata_location).body()
