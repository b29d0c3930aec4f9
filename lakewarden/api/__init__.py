"""The HTTP face of the server: the management API (`/api/v1`), the Iceberg REST catalog's routes
(`/iceberg/v1`), authentication, errors, metrics and the fast path. Routes parse, call one service, answer."""
