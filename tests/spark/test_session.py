"""The local session's Python processes import the installed pyspark (see ``session.worker_python``)."""

from __future__ import annotations

import pyspark
import pytest

from cdclake.spark.session import worker_python

pytestmark = pytest.mark.spark


def test_the_local_sessions_python_workers_run_through_the_launcher_and_import_the_installed_pyspark(spark):
    def imported(batches):
        import pyarrow as pa
        import pyspark

        for batch in batches:
            yield pa.RecordBatch.from_pydict({"file": [pyspark.__file__] * batch.num_rows})

    assert {row.file for row in spark.range(4).mapInArrow(imported, "file string").collect()} == {pyspark.__file__}
    assert spark.conf.get("spark.pyspark.python") == worker_python()
