"""Start-up seeding: the resource groups and catalogs the config names exist (created once, never changed)."""

from __future__ import annotations

import logging

from lakewarden.config import Config
from lakewarden.domain.catalogs import CatalogSpec, validate_catalog, with_internal_defaults
from lakewarden.domain.groups import validate_group
from lakewarden.metadata.catalogs import initialize_catalog
from lakewarden.store import catalogs as catalog_store
from lakewarden.store import groups as group_store
from lakewarden.store.database import Database

log = logging.getLogger(__name__)


def ensure_seeds(db: Database, config: Config, server_url: str) -> None:
    with db.write(any_node=True) as session:
        for group in config.resource_groups:
            if not group_store.group_exists(session, group.name):
                validate_group(group.name, group.container, group.properties, config.container_impls)
                group_store.create_group(session, group.name, group.container, group.properties)
                log.info("created resource group %s (container %s)", group.name, group.container)
    for seed in config.catalog_seeds():
        default_warehouse = str(config.data_dir / "warehouse" / seed.name)
        spec = with_internal_defaults(CatalogSpec(seed.name, seed.type, seed.properties), server_url, default_warehouse)
        with db.write(any_node=True) as session:
            exists = catalog_store.catalog_exists(session, seed.name)
            if not exists:
                validate_catalog(spec)
                catalog_store.create_catalog(session, spec)
                log.info("registered catalog %s (%s)", seed.name, seed.type)
        if not exists:
            try:
                initialize_catalog(spec)
            except Exception as exc:
                log.warning("catalog %s could not be initialised yet: %s", seed.name, exc)
