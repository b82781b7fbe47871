"""Everything that touches Spark lives here; no other package imports pyspark."""
