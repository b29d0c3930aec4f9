"""Spark for lakewarden: the SparkSession with Iceberg configured, the jar set-up, spark-submit's command, and
the Java classes the optimizer reaches through py4j."""
