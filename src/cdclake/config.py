"""Pipeline configuration: the Python API and the ``PIPELINE.toml`` file describe the same thing.

```toml
name = "shop"                 # pipeline id: names the checkpoints and the lake's commit markers
lake = "/data/lake"           # the lake root (local path; s3:// etc. with [storage])
checkpoint = "/data/ckpt"     # optional; default <lake>/_cdclake/checkpoints/<name>
follow = false                # true: keep watching the sources
poll_seconds = 1
tombstone_retention_hours = 168

[spark]                       # optional: attach to a cluster instead of local[*]
master = "spark://host:7077"  # or remote = "sc://host:15002" for Spark Connect
conf = { "spark.executor.memory" = "8g" }

[[source]]
name = "orders"
format = "canal-json"
input = "/data/in/orders"     # a directory of captured-records or message-per-line files
max_records_per_batch = 500000
options = { "timestamp-zone" = "Asia/Shanghai" }
```
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from cdclake import formats


@dataclass
class SourceConfig:
    format: str
    input: str | None = None
    name: str = "main"
    options: dict[str, str] = field(default_factory=dict)
    max_records_per_batch: int = 0  # 0: no limit

    def validate(self) -> None:
        formats.create(self.format, self.options)  # unknown format or option → a clear ValueError
        if self.input is not None and not os.path.exists(self.input):
            raise ValueError(f"source {self.name}: input {self.input!r} does not exist")


@dataclass
class PipelineConfig:
    lake: str
    sources: list[SourceConfig]
    name: str = "default"
    checkpoint: str | None = None
    follow: bool = False
    poll_seconds: float = 1.0
    tombstone_retention_hours: float = 168.0
    spark_master: str | None = None
    spark_remote: str | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    storage_options: dict[str, str] | None = None

    def checkpoint_dir(self) -> str:
        return self.checkpoint or os.path.join(self.lake, "_cdclake", "checkpoints", self.name)

    def validate(self) -> None:
        if not self.sources:
            raise ValueError("the pipeline has no source")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique: {names}")
        for source in self.sources:
            source.validate()


_TOP = {"name", "lake", "checkpoint", "follow", "poll_seconds", "tombstone_retention_hours", "spark", "source",
        "storage"}
_SOURCE = {"name", "format", "input", "options", "max_records_per_batch"}


def load(path: str) -> PipelineConfig:
    """Read a ``PIPELINE.toml``; unknown keys are errors, so a typo never passes silently."""
    with open(path, "rb") as handle:
        data: dict[str, Any] = tomllib.load(handle)
    unknown = set(data) - _TOP
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    if "lake" not in data:
        raise ValueError(f"{path}: 'lake' is required")
    sources = []
    for index, raw in enumerate(data.get("source", [])):
        extra = set(raw) - _SOURCE
        if extra:
            raise ValueError(f"{path}: source {index + 1}: unknown key(s) {', '.join(sorted(extra))}")
        if "format" not in raw:
            raise ValueError(f"{path}: source {index + 1}: 'format' is required")
        sources.append(SourceConfig(
            format=raw["format"], input=raw.get("input"), name=raw.get("name", f"source{index + 1}"),
            options={k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.get("options", {}).items()},
            max_records_per_batch=int(raw.get("max_records_per_batch", 0))))
    spark = data.get("spark", {})
    return PipelineConfig(
        lake=data["lake"], sources=sources, name=data.get("name", "default"), checkpoint=data.get("checkpoint"),
        follow=bool(data.get("follow", False)), poll_seconds=float(data.get("poll_seconds", 1.0)),
        tombstone_retention_hours=float(data.get("tombstone_retention_hours", 168.0)),
        spark_master=spark.get("master"), spark_remote=spark.get("remote"),
        spark_conf={k: str(v) for k, v in spark.get("conf", {}).items()},
        storage_options=data.get("storage"))
