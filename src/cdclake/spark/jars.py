"""The jar sets that ``make jars`` fetches with Maven (``jars/<set>/pom.xml``) into ``.cache/jars/<set>/`` of a
source checkout: ``spark`` (delta-spark, spark-sql-kafka, without what pyspark ships) and ``kafka``
(Apache Kafka's broker, for the tests). An installed package has none."""

from __future__ import annotations

from pathlib import Path

CACHE = Path(__file__).resolve().parents[3] / ".cache" / "jars"


def cached(name: str = "spark") -> list[str] | None:
    """The jars of set ``name`` once fetched completely (its stamp written last), sorted; else None."""
    folder = CACHE / name
    if not (folder / ".fetched").is_file():
        return None
    return sorted(str(path) for path in folder.glob("*.jar"))
