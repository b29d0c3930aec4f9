"""lakewarden's Iceberg REST catalog, served by api/routes/iceberg_*.py through one face.

served.py is the face every route talks to (ServedCatalog), with two kinds: own.py, lakewarden's own catalogs, and
forwarded.py, external catalogs forwarded to their catalog of record (federation.py). catalog.py's RestCatalog
chooses between them and holds the own catalog's parts: warehouses, catalog_tables, loads, commits, commit_queue,
heads, metadata_files, views, scan_planning, read_ahead, credentials and outbox."""
