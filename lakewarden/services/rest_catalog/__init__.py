"""lakewarden's Iceberg REST catalog (catalogs of type `internal`), served by api/routes/iceberg_*.py.

catalog.py          RestCatalog: the parts below side by side, as the routes reach them
warehouses.py       the internal catalogs served: each one's storage profile and the server's FileIO
catalog_tables.py   namespaces and tables created, registered, dropped (purged) and renamed
loads.py            reads: a table's current metadata, loadTable's answers (ETags, config, credentials)
commits.py          commits to one table or several at once: staged, then compare-and-swapped
commit_queue.py     a table's commits take turns on this node, in a bounded line
heads.py            each table's head as this node knows it
metadata_files.py   parsed metadata files and loadTable bodies, kept
views.py            views: create, replace (compare-and-swap), drop, rename
scan_planning.py    server-side scan planning's state: plans, plan tasks, the result cache
read_ahead.py       manifests parsed as commits land and at start
credentials.py      storage credentials vended to clients (STS or static keys)
outbox.py           every change's event, written with it and published once it committed
"""
