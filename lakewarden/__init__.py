"""lakewarden: a lakehouse table-management service for Apache Iceberg."""

__version__ = "0.1.0"
