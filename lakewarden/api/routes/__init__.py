"""Routes of the ams API, one module per resource."""
