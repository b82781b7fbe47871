from tests.spark.conftest import spark  # noqa: F401 - the one local Spark session of a test run
