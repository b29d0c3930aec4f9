"""Reading tables with pyiceberg and their formats' own files: catalogs, manifests (parsed once, cached), table
metadata, commit conflicts, scan planning's pruning; Hudi and Paimon tables. Imports domain/ only."""
