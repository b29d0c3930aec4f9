"""What runs in the server, one wing per concept (rest_catalog, tables, processes, maintenance, resources,
access); composition.py builds and wires them. Wings import one way (tests/test_architecture.py)."""
