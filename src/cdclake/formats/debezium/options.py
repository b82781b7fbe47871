"""The options both Debezium converters declare, and their common base class."""

from __future__ import annotations

from typing import Any, ClassVar, Final

from cdclake.formats.base import Format, Option

OPTIONS: Final = (
    Option("decimal-handling-mode", "precise",
           "How the producer writes DECIMAL (decoding with a schema reads every mode; encoding and "
           "debezium-json's column-types use this one)",
           ("precise", "double", "string")),
    Option("bigint-unsigned-handling-mode", "long",
           "BIGINT UNSIGNED as wrapped int64 or as Decimal (decoding with a schema reads both; encoding and "
           "debezium-json's column-types use this one)",
           ("long", "precise")),
    Option("binary-handling-mode", "bytes",
           "How the producer writes BINARY/BLOB: bytes, or a string in base64, base64-url-safe or hex",
           ("bytes", "base64", "base64-url-safe", "hex")),
    Option("time-precision-mode", "adaptive_time_microseconds",
           "Temporal types the producer writes (decoding with a schema reads every mode; encoding and "
           "debezium-json's column-types use this one)",
           ("adaptive_time_microseconds", "connect", "structured")),
    Option("tombstones-on-delete", True, "Encoder: write a tombstone (null value) after each delete"),
    Option("propagate-source-type", True,
           "Encoder: add __debezium.source.column.* schema parameters, which make a round trip exact"),
    Option("topic-prefix", "cdclake", "Encoder: topic.prefix; records go to <prefix>.<database>.<table>"),
)


class DebeziumFormat(Format):
    """Base of the Debezium converters: the shared options, and caches that are rebuilt lazily after
    pickling (Spark ships formats to executors; compiled schemas hold dynamically made classes)."""

    options: ClassVar[tuple[Option, ...]] = OPTIONS
    CACHE_LIMIT: ClassVar[int] = 512

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._caches: dict[str, dict[Any, Any]] = {}

    def cache(self, name: str) -> dict[Any, Any]:
        table = self._caches.get(name)
        if table is None:
            table = self._caches[name] = {}
        elif len(table) >= self.CACHE_LIMIT:
            table.clear()  # a stream of ever-new schemas must not grow memory without bound
        return table

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_caches"] = {}
        return state
