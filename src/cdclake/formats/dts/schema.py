"""The DTS Record schema (dts-avro.md §3.1), revision R2 and the older R1, and its enum symbols."""

from __future__ import annotations

from typing import Any, Final

NAMESPACE: Final = "com.alibaba.dts.formats.avro"
SOURCE_TYPES: Final = ("MySQL", "Oracle", "SQLServer", "PostgreSQL", "MongoDB", "Redis", "DB2", "PPAS", "DRDS",
                       "HBASE", "HDFS", "FILE", "OTHER")
OPERATIONS: Final = ("INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT", "ROLLBACK", "ABORT", "HEARTBEAT",
                     "CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP", "INIT")

_VALUE_BRANCHES: Final = ("Integer", "Character", "Decimal", "Float", "Timestamp", "DateTime",
                          "TimestampWithTimeZone", "BinaryGeometry", "TextGeometry", "BinaryObject", "TextObject",
                          "EmptyObject")

# The DTS Record schema, revision R2 (written from dts-avro.md §3.1; docs omitted). R1 drops the last field.
RECORD_SCHEMA: Final[dict[str, Any]] = {
    "type": "record", "name": "Record", "namespace": NAMESPACE,
    "fields": [
        {"name": "version", "type": "int"},
        {"name": "id", "type": "long"},
        {"name": "sourceTimestamp", "type": "long"},
        {"name": "sourcePosition", "type": "string"},
        {"name": "safeSourcePosition", "type": "string", "default": ""},
        {"name": "sourceTxid", "type": "string", "default": ""},
        {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
            {"name": "sourceType", "type": {"type": "enum", "name": "SourceType", "symbols": list(SOURCE_TYPES)}},
            {"name": "version", "type": "string"}]}},
        {"name": "operation", "type": {"type": "enum", "name": "Operation", "symbols": list(OPERATIONS)}},
        {"name": "objectName", "type": ["null", "string"], "default": None},
        {"name": "processTimestamps", "type": ["null", {"type": "array", "items": "long"}], "default": None},
        {"name": "tags", "type": {"type": "map", "values": "string"}, "default": {}},
        {"name": "fields", "type": ["null", "string", {"type": "array", "items": {
            "type": "record", "name": "Field", "fields": [
                {"name": "name", "type": "string"}, {"name": "dataTypeNumber", "type": "int"}]}}],
         "default": None},
        {"name": "beforeImages", "type": ["null", "string", {"type": "array", "items": [
            "null",
            {"type": "record", "name": "Integer", "fields": [
                {"name": "precision", "type": "int"}, {"name": "value", "type": "string"}]},
            {"type": "record", "name": "Character", "fields": [
                {"name": "charset", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "Decimal", "fields": [
                {"name": "value", "type": "string"}, {"name": "precision", "type": "int"},
                {"name": "scale", "type": "int"}]},
            {"type": "record", "name": "Float", "fields": [
                {"name": "value", "type": "double"}, {"name": "precision", "type": "int"},
                {"name": "scale", "type": "int"}]},
            {"type": "record", "name": "Timestamp", "fields": [
                {"name": "timestamp", "type": "long"}, {"name": "millis", "type": "int"}]},
            {"type": "record", "name": "DateTime", "fields": [
                {"name": part, "type": ["null", "int"], "default": None}
                for part in ("year", "month", "day", "hour", "minute", "second", "millis")]},
            {"type": "record", "name": "TimestampWithTimeZone", "fields": [
                {"name": "value", "type": "DateTime"}, {"name": "timezone", "type": "string"}]},
            {"type": "record", "name": "BinaryGeometry", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "TextGeometry", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
            {"type": "record", "name": "BinaryObject", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
            {"type": "record", "name": "TextObject", "fields": [
                {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
            {"type": "enum", "name": "EmptyObject", "symbols": ["NULL", "NONE"]}]}], "default": None},
        {"name": "afterImages", "type": ["null", "string", {"type": "array", "items": [
            "null", *_VALUE_BRANCHES]}], "default": None},
        {"name": "bornTimestamp", "type": "long", "default": 0},
    ],
}
RECORD_SCHEMA_R1: Final[dict[str, Any]] = {**RECORD_SCHEMA, "fields": RECORD_SCHEMA["fields"][:-1]}
