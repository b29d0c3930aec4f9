"""The optimizer: a PySpark application whose threads pull tasks over the optimizer protocol and run them on
Spark with Iceberg's actions. It never touches the system database."""
