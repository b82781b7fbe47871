"""debezium-avro: the spec's byte vector, the corpus writer schema, semantic types, round trips, bad input."""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake import formats
from cdclake.errors import RegistryError
from cdclake.formats.avro.datum import read_payload
from cdclake.formats.avro.framing import frame, header_id
from cdclake.formats.avro.registry.base import parse
from cdclake.formats.debezium.avro import DebeziumAvro
from cdclake.model.events import ChangeEvent, Column, pad_position
from cdclake.model.records import Record
from tests.conftest import SPEC
from tests.formats.debezium.test_json import change_events
from tests.helpers.glue import glue_compressed
from tests.helpers.registries import APICURIO_FORMS, FakeRegistry, as_apicurio_framed
from tests.helpers.strategies import columns_of, rows


def spec_vector() -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """Key schema, value schema and the key/value bytes of debezium.md §10.3."""
    text = (SPEC / "debezium.md").read_text()
    section = text[text.index("### 10.3"):]
    key_schema = json.loads(section[section.index("Key schema id 1: `") + 18:section.index("`.\nValue schema id 2")]
                            .replace("\n", ""))
    value_text = section[section.index("```json") + 7:]
    value_schema = json.loads(value_text[:value_text.index("```")])
    dump = section[section.index("key   :"):]
    dump = dump[:dump.index("```")]
    key_hex, value_hex = dump.split("value :")
    return (key_schema, value_schema, bytes.fromhex(key_hex.replace("key   :", "").strip()),
            bytes.fromhex(" ".join(value_hex.split())))


def registry_dir(path: Path, schemas: dict[int, Any]) -> str:
    path.mkdir(parents=True, exist_ok=True)
    for schema_id, schema in schemas.items():
        (path / f"{schema_id}.avsc").write_text(json.dumps(schema))
    return str(path)


def framed(schema: Any, schema_id: int, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas={}), datum)
    return frame(schema_id, out.getvalue())


def only_event(fmt: DebeziumAvro, record: Record) -> ChangeEvent:
    result = fmt.decode([record])
    assert not result.failures, result.failures[0].describe()
    (event,) = result.events
    return event


# ------------------------------------------------------------------------------------- spec vector

def test_spec_10_3_byte_vector(tmp_path: Path) -> None:
    key_schema, value_schema, key, value = spec_vector()
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {1: key_schema, 2: value_schema}))
    event = only_event(fmt, Record(key=key, value=value, topic="mysql_server_1.inventory.customers"))
    assert (event.kind, event.op, event.database, event.table) == ("row", "c", "inventory", "customers")
    assert event.key == {"id": 1004}
    assert event.before is None
    assert event.after == {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert event.columns == [Column("id", "int", True, False), Column("first_name", "text", False, False),
                             Column("last_name", "text", False, False), Column("email", "text", False, False)]
    assert event.commit_ts == event.ts_ms == 1465491411000
    assert event.position == pad_position("mysql-bin.000003", 154, 0)


def test_spec_10_3_vector_is_what_fastavro_writes(tmp_path: Path) -> None:
    # The vector read back as a datum has the fields the spec lists (string-first snapshot union).
    _, value_schema, _, value = spec_vector()
    datum = read_payload(parse(value_schema), value, 2)
    assert datum["source"]["snapshot"] == "false" and datum["source"]["ts_us"] == 1465491411000000
    assert framed(value_schema, 2, datum) == value


# ------------------------------------------------------------------------------- corpus writer schema

CORPUS_SCHEMA_ID = 81


def person_source(**overrides: Any) -> dict[str, Any]:
    source = {"version": "1.1.1.Final", "connector": "mysql", "name": "fullfillment", "ts_ms": 1589361987000,
              "snapshot": "false", "db": "test1", "table": "person", "server_id": 223344, "gtid": None,
              "file": "mysql-bin.000003", "pos": 362, "row": 0, "thread": 2, "query": None}
    source.update(overrides)
    return source


@pytest.fixture
def corpus_schema(corpus: Path) -> dict[str, Any]:
    return json.loads((corpus / "flink/debezium-test-schema.json").read_text())


def test_corpus_writer_schema_insert_update_delete(corpus_schema: dict[str, Any], tmp_path: Path) -> None:
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {CORPUS_SCHEMA_ID: corpus_schema}))
    row = {"id": 107, "name": "rocks", "description": "box of assorted rocks", "weight": 5.3}
    changed = {**row, "weight": 5.1}
    datums = [
        {"before": None, "after": row, "source": person_source(snapshot="true", ts_ms=0), "op": "r",
         "ts_ms": 1589355606100, "transaction": None},
        {"before": row, "after": changed, "source": person_source(), "op": "u", "ts_ms": 1589361987936,
         "transaction": {"id": "tx", "total_order": 1, "data_collection_order": 1}},
        {"before": changed, "after": None, "source": person_source(pos=2443, row=1, snapshot=None), "op": "d",
         "ts_ms": 1589362344455, "transaction": None},
    ]
    result = fmt.decode([Record(value=framed(corpus_schema, CORPUS_SCHEMA_ID, d)) for d in datums])
    assert not result.failures
    read, update, delete = result.events
    assert (read.op, read.commit_ts, read.after) == ("r", 0, row)
    assert (update.op, update.before, update.after, update.commit_ts) == ("u", row, changed, 1589361987000)
    assert (delete.op, delete.before, delete.after) == ("d", changed, None)
    assert delete.position == pad_position("mysql-bin.000003", 2443, 1)
    assert all((e.database, e.table) == ("test1", "person") for e in result.events)
    assert [(c.name, c.type, c.nullable) for c in read.columns or []] == [
        ("id", "bigint", False), ("name", "text", True), ("description", "text", True), ("weight", "double", True)]


@settings(max_examples=100, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.none() | st.text(), st.none() | st.text(),
       st.none() | st.floats(allow_nan=False))
def test_corpus_writer_schema_round_trip(corpus: Path, id_: int, name: str | None, description: str | None,
                                         weight: float | None) -> None:
    schema = json.loads((corpus / "flink/debezium-test-schema.json").read_text())
    fmt = DebeziumAvro(registry="memory:")
    schema_id = fmt.registry().register("fullfillment.test1.person-value", schema)
    row = {"id": id_, "name": name, "description": description, "weight": weight}
    datum = {"before": None, "after": row, "source": person_source(), "op": "c", "ts_ms": 1, "transaction": None}
    assert only_event(fmt, Record(value=framed(schema, schema_id, datum))).after == row


# ---------------------------------------------------------------------------- semantic types in Avro

def test_semantic_types_and_logical_types(tmp_path: Path) -> None:
    def opt(avro: Any) -> list[Any]:
        return ["null", avro]

    fields = [
        ("i8", opt({"type": "int", "connect.type": "int8"}), -5, "tinyint", -5),
        ("i16", {"type": "int", "connect.type": "int16"}, 300, "smallint", 300),
        ("dec", opt({"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                     "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                     "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}),
         b"\xfb", "decimal(10,2)", "-0.05"),
        ("d", {"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Date",
               "logicalType": "date"}, 17702, "date", "2018-06-20"),
        ("t", {"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Time",
               "logicalType": "time-millis"}, 36930500, "time", "10:15:30.500000"),
        ("ts", {"type": "long", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Timestamp",
                "logicalType": "timestamp-millis"}, 1529476623123, "datetime", "2018-06-20 06:37:03.123000"),
        ("mt", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTime"},
         -45296123456, "time", "-12:34:56.123456"),
        ("z", {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"},
         "2018-06-20T13:37:03Z", "timestamp", "2018-06-20T13:37:03Z"),
        ("bits", {"type": "bytes", "connect.version": 1, "connect.parameters": {"length": "10"},
                  "connect.name": "io.debezium.data.Bits"}, b"\x01\x02", "bit(10)", 513),
        ("e", {"type": "string", "connect.version": 1, "connect.parameters": {"allowed": "a,b"},
               "connect.name": "io.debezium.data.Enum"}, "b", "enum('a','b')", "b"),
        ("bin", "bytes", b"\x00\x01", "blob", "AAE="),
        ("g", opt({"type": "record", "name": "Geometry", "namespace": "io.debezium.data.geometry",
                   "fields": [{"name": "wkb", "type": "bytes"}, {"name": "srid", "type": ["null", "int"]}],
                   "connect.version": 1, "connect.name": "io.debezium.data.geometry.Geometry"}),
         {"wkb": b"\x01\x01\x00\x00\x00" + bytes(16), "srid": None}, "geometry",
         base64.b64encode(b"\x01\x01\x00\x00\x00" + bytes(16)).decode()),
        ("g2", opt("io.debezium.data.geometry.Geometry"), None, "geometry", None),
        ("u", {"type": "long", "connect.parameters": {"__debezium.source.column.type": "BIGINT UNSIGNED",
                                                      "__debezium.source.column.name": "u-1"}},
         -2, "bigint unsigned", 2**64 - 2),
    ]
    value_schema = {"type": "record", "name": "Envelope", "namespace": "s.db.t", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": n, "type": t} for n, t, *_ in fields]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.mysql",
                                    "fields": [{"name": "db", "type": "string"}, {"name": "table", "type": "string"},
                                               {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"}]}
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {5: value_schema}))
    datum = {"before": None, "after": {n: wire for n, _, wire, *_ in fields},
             "source": {"db": "db", "table": "t", "ts_ms": 7}, "op": "c"}
    event = only_event(fmt, Record(value=framed(value_schema, 5, datum)))
    names = [n if n != "u" else "u-1" for n, *_ in fields]
    assert [(c.name, c.type) for c in event.columns or []] == [(n, f[3]) for n, f in zip(names, fields, strict=True)]
    assert event.after == {n: f[4] for n, f in zip(names, fields, strict=True)}
    assert (event.database, event.table, event.commit_ts, event.position) == ("db", "t", 7, None)


# -------------------------------------------------------------------------------------- round trips

ALL_COLUMNS = columns_of()


@settings(max_examples=100, deadline=None)
@given(change_events(ALL_COLUMNS))
def test_round_trip_every_type(events: list[ChangeEvent]) -> None:
    fmt = DebeziumAvro(registry="memory:")
    records = fmt.encode(events)
    assert all(r.key is not None and r.key[:1] == b"\x00" for r in records)
    assert [r.value is None for r in records] == [False] * len(events) + [True]
    result = fmt.decode(records)
    assert not result.failures, result.failures[0].describe()
    for event in result.events:
        event.source = None
    assert result.events == events and result.skipped == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change_events(ALL_COLUMNS))
def test_round_trip_through_aws_glue(glue_registry: str, events: list[ChangeEvent]) -> None:
    # AWS Glue's Kafka Connect converter frames key and value with the registry's 18-byte header, compressed
    # with zlib when so configured
    records = DebeziumAvro(registry=glue_registry).encode(events)
    assert all(r.key is not None and r.key[:2] == b"\x03\x00" for r in records)
    decoder = pickle.loads(pickle.dumps(DebeziumAvro(registry=glue_registry)))  # knows no schema yet
    compressed = [Record(key=glue_compressed(r.key), value=glue_compressed(r.value), headers=r.headers)
                  for r in records]
    for sent in (records, compressed):
        result = decoder.decode(sent)
        assert not result.failures, result.failures[0].describe()
        for event in result.events:
            event.source = None
        assert result.events == events and result.skipped == 1


@pytest.fixture(scope="module")
def apicurio() -> Iterator[FakeRegistry]:
    with FakeRegistry() as fake:
        yield fake


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change_events(ALL_COLUMNS), st.sampled_from(APICURIO_FORMS))
def test_round_trip_through_apicurio_framing(apicurio: FakeRegistry, events: list[ChangeEvent], form: str) -> None:
    # debezium.md §3: Apicurio Registry's serializers write the id in a Kafka header (2.x's default), behind 0x00 in 8
    # bytes (2.x's Kafka Connect converter) or in 4 (3.x's default); its core API serves the schema by that id.
    encoder = DebeziumAvro(registry="memory:")
    records = as_apicurio_framed(encoder.encode(events), encoder.registry(), apicurio, form)
    decoder = pickle.loads(pickle.dumps(DebeziumAvro(registry=apicurio.url(), framing="apicurio")))
    assert decoder.reads_headers and not encoder.reads_headers
    result = decoder.decode(records)
    assert not result.failures, result.failures[0].describe()
    for event in result.events:
        event.source = None
    assert result.events == events and result.skipped == 1
    if form != "headers":  # the same bytes, read as Confluent's framing, name ids that registry does not know
        confluent_reader = DebeziumAvro(registry=apicurio.url())
        assert all("Apicurio" in f.reason for f in confluent_reader.decode(records[:1]).failures)


def test_apicurio_framing_needs_its_registry_and_names_a_wrong_id_kind(apicurio: FakeRegistry) -> None:
    with pytest.raises(ValueError, match=r"framing=apicurio .* must be its http\(s\):// URL"):
        DebeziumAvro(registry="memory:", framing="apicurio")
    with pytest.raises(ValueError, match="option framing takes one of confluent, apicurio"):
        DebeziumAvro(registry="memory:", framing="apicurio-native")
    with pytest.raises(ValueError, match="the encoder writes Confluent's framing only"):
        DebeziumAvro(registry=apicurio.url(), framing="apicurio").encode([])
    encoder = DebeziumAvro(registry="memory:")
    events = [ChangeEvent(kind="row", op="c", database="db", table="t", after={"id": 1},
                          columns=[Column("id", "int", key=True, nullable=False)], commit_ts=1)]
    records = as_apicurio_framed(encoder.encode(events), encoder.registry(), apicurio, "4-byte")
    wrong = DebeziumAvro(registry=apicurio.url(), framing="apicurio", **{"apicurio-id": "globalId"})
    (failure,) = wrong.decode(records[:1]).failures
    assert re.match(r"schema id globalId 500\d is not in schema registry .* option apicurio-id names", failure.reason)


@settings(max_examples=50, deadline=None)
@given(change_events(columns_of(("bigint unsigned", "decimal(65,0)", "decimal(38,10)", "datetime(3)", "date",
                                 "bit(1)", "bit(64)", "enum('x','y')", "timestamp(3)"))))
def test_round_trip_other_modes(events: list[ChangeEvent]) -> None:
    fmt = DebeziumAvro(**{"registry": "memory:", "decimal-handling-mode": "string",
                          "bigint-unsigned-handling-mode": "precise", "time-precision-mode": "connect"})
    result = fmt.decode(fmt.encode(events))
    assert not result.failures
    assert [e.after for e in result.events] == [e.after for e in events]


@settings(max_examples=50, deadline=None)
@given(change_events(columns_of(("date", "datetime(3)", "datetime(6)", "timestamp", "timestamp(6)", "time(2)",
                                 "time(6)", "geometry", "geometry"))),
       st.sampled_from(["structured", "adaptive_time_microseconds"]))
def test_round_trip_structured_time_precision_mode(events: list[ChangeEvent], mode: str) -> None:
    # Each structured column's record is its own (named after the column, as Debezium does), so that two DATETIME
    # columns of different precision keep their own parameters, which Avro carries on the record. Geometry records
    # are shared by their columns: the parameters of the first must not rename the second.
    fmt = DebeziumAvro(**{"registry": "memory:", "time-precision-mode": mode})
    result = fmt.decode(fmt.encode(events))
    assert not result.failures, result.failures[0].describe()
    assert [(e.after, e.columns) for e in result.events] == [(e.after, e.columns) for e in events]


@settings(max_examples=30, deadline=None)
@given(rows(columns_of(("varchar(10)", "int"))))
def test_sanitised_names_keep_their_identity(row: dict[str, Any]) -> None:
    columns = [Column("id", "bigint", True, False), Column("1st col", "varchar(10)", False, True),
               Column("naïve-name", "int", False, True)]
    row = {"id": row["id"], "1st col": row["c0_varchar"], "naïve-name": row["c1_int"]}
    event = ChangeEvent(kind="row", op="c", database="my-db", table="tab$le", key={"id": row["id"]}, after=row,
                        columns=columns, commit_ts=5, ts_ms=5, position=pad_position("mysql-bin.000001", 4, 0))
    fmt = DebeziumAvro(registry="memory:")
    (record,) = fmt.encode([event])
    subjects = fmt.registry().subjects()  # type: ignore[attr-defined]
    value_id = subjects["cdclake.my-db.tab$le-value"][0]
    schema = fmt.registry().raw_schema(value_id)
    assert schema["namespace"] == "cdclake.my_db.tab_le"
    assert [f["name"] for f in schema["fields"][0]["type"][1]["fields"]] == ["id", "_1st_col", "na_ve_name"]
    (decoded,) = fmt.decode([record]).events
    decoded.source = None
    assert decoded == event


def test_primary_key_change_truncate_and_tombstones() -> None:
    columns = [Column("id", "int", True, False), Column("v", "varchar(5)", False, True)]
    update = ChangeEvent(kind="row", op="u", database="db", table="t", key={"id": 1}, before={"id": 1, "v": "a"},
                         after={"id": 2, "v": "a"}, columns=columns, commit_ts=9, ts_ms=9,
                         position=pad_position("mysql-bin.000001", 4, 0))
    truncate = ChangeEvent(kind="truncate", database="db", table="t", commit_ts=10, ts_ms=10,
                           position=pad_position("mysql-bin.000001", 5, 0))
    fmt = DebeziumAvro(registry="memory:")
    records = fmt.encode([update, truncate])
    assert [r.value is None for r in records] == [False, True, False, False]
    assert json.loads(dict(records[0].headers)["__debezium.newkey"]) == {"id": 2}
    assert json.loads(dict(records[2].headers)["__debezium.oldkey"]) == {"id": 1}
    assert records[3].key is None
    result = fmt.decode(records)
    assert [(e.kind, e.op, e.key) for e in result.events] == [
        ("row", "d", {"id": 1}), ("row", "c", {"id": 2}), ("truncate", None, None)]
    assert result.skipped == 1


def test_registered_and_picklable(tmp_path: Path) -> None:
    key_schema, value_schema, key, value = spec_vector()
    fmt = formats.create("debezium-avro", {"registry": registry_dir(tmp_path, {1: key_schema, 2: value_schema})})
    event = only_event(fmt, Record(key=key, value=value))
    clone = pickle.loads(pickle.dumps(fmt))
    assert only_event(clone, Record(key=key, value=value)) == event


# ---------------------------------------------------------------------------------------- bad input

@pytest.fixture
def vector_format(tmp_path: Path) -> tuple[DebeziumAvro, bytes, bytes, dict[str, Any]]:
    key_schema, value_schema, key, value = spec_vector()
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {1: key_schema, 2: value_schema}))
    return fmt, key, value, value_schema


def failure(fmt: DebeziumAvro, value: bytes | None, key: bytes | None = None) -> str:
    result = fmt.decode([Record(value=value, key=key, topic="t", offset=3)])
    assert not result.events and len(result.failures) == 1
    assert result.failures[0].format == "debezium-avro"
    return result.failures[0].reason


def test_bad_input(vector_format: tuple[DebeziumAvro, bytes, bytes, dict[str, Any]]) -> None:
    fmt, _, value, value_schema = vector_format
    assert "shorter than the 5-byte Confluent header" in failure(fmt, value[:3])
    assert "neither the Confluent magic byte 0x00 nor the AWS Glue header version" in failure(fmt, b"{" + value[1:])
    assert "schema id 9 is not in" in failure(fmt, frame(9, value[5:]))
    assert "truncated" in failure(fmt, value[:-12])
    assert "trailing byte" in failure(fmt, value + b"\x00")
    datum = read_payload(parse(value_schema), value, 2)
    assert "unknown op 'x'" in failure(fmt, framed(value_schema, 2, {**datum, "op": "x"}))
    assert "op c without an after image" in failure(fmt, framed(value_schema, 2, {**datum, "after": None}))
    assert "key: first byte is 0x7b" in failure(fmt, value, key=b'{"id": 1}')
    assert "truncated" in failure(fmt, value, key=frame(1, b""))
    assert "needs the registry option" in failure(DebeziumAvro(), value)


def test_unsupported_writer_schemas(tmp_path: Path) -> None:
    union = {"type": "record", "name": "Envelope", "fields": [
        {"name": "after", "type": ["null", "int", "string"]}, {"name": "op", "type": "string"}]}
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {3: union, 4: {"type": "string"}}))
    assert "is not an optional value" in failure(fmt, frame(3, b"\x02\x02\x02c"))
    assert "is not a record schema" in failure(fmt, frame(4, b"\x02c"))


def test_non_change_values_are_skipped_or_ddl(tmp_path: Path) -> None:
    heartbeat = {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
                 "fields": [{"name": "ts_ms", "type": "long"}]}
    change = {"type": "record", "name": "SchemaChangeValue", "namespace": "io.debezium.connector.mysql",
              "fields": [{"name": "source", "type": {"type": "record", "name": "Source", "fields": [
                  {"name": "db", "type": "string"}, {"name": "table", "type": ["null", "string"]},
                  {"name": "ts_ms", "type": "long"}, {"name": "file", "type": "string"},
                  {"name": "pos", "type": "long"}]}},
                  {"name": "databaseName", "type": ["null", "string"]}, {"name": "ddl", "type": ["null", "string"]}]}
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {1: heartbeat, 2: change}))
    result = fmt.decode([
        Record(value=framed(heartbeat, 1, {"ts_ms": 5})),
        Record(value=framed(change, 2, {"source": {"db": "d", "table": "t", "ts_ms": 6, "file": "f", "pos": 1},
                                        "databaseName": "d", "ddl": "DROP TABLE t"})),
    ])
    assert not result.failures and result.skipped == 1
    (ddl,) = result.events
    assert (ddl.kind, ddl.database, ddl.table, ddl.ddl, ddl.commit_ts) == ("ddl", "d", "t", "DROP TABLE t", 6)


def test_simulated_workload_reaches_the_expected_state(tmp_path: Path) -> None:
    from cdclake import simulator as workload

    options = {"registry": str(tmp_path / "registry")}
    generated = workload.generate("debezium-avro", events=600, tables=2, seed=5, partitions=3, replays=0.05,
                                  options=options)
    result = DebeziumAvro(**options).decode(generated.records)
    assert not result.failures and result.skipped > 0
    assert workload.diff_states(generated.expected, workload.fold(result.events)) == []


@settings(max_examples=60, deadline=None)
@given(change_events(ALL_COLUMNS))
def test_generated_reader_matches_fastavro(events: list[ChangeEvent]) -> None:
    fmt = DebeziumAvro(registry="memory:")
    for record in fmt.encode(events):
        for data, key in ((record.value, False), (record.key, True)):
            if data is None:
                continue
            reader = fmt._reader(header_id(data), key=key)
            assert reader.fast is not None
            assert reader.fast(data) == read_payload(reader.parsed, data, reader.schema_id)
            with pytest.raises((ValueError, IndexError)):
                reader.fast(data[:-1] if len(data) > 6 else data + b"\x00")


def test_schemas_the_generator_does_not_handle_go_through_fastavro(tmp_path: Path) -> None:
    schema = {"type": "record", "name": "Envelope", "namespace": "s.db.t", "fields": [
        {"name": "after", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "int"},
            {"name": "v", "type": ["null", {"type": "array", "items": "float"}], "default": None},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
            {"name": "f", "type": {"type": "fixed", "name": "F", "size": 2}}]}]},
        {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
            {"name": "db", "type": "string"}, {"name": "table", "type": "string"}, {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"}]}
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {1: schema}))
    datum = {"after": {"id": 1, "v": [0.5, 2.0], "e": "B", "f": b"\x01\x02"},
             "source": {"db": "db", "table": "t", "ts_ms": 1}, "op": "c"}
    event = only_event(fmt, Record(value=framed(schema, 1, datum)))
    assert fmt._reader(1).fast is None
    assert event.after == {"id": 1, "v": "[0.5,2.0]", "e": "B", "f": "AQI="}
    assert [c.type for c in event.columns or []] == ["int", "json", "text", "blob"]


@pytest.mark.parametrize("kind", ["confluent", "glue"])
def test_an_unreachable_registry_stops_the_run(kind: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if kind == "glue":
        fmt = DebeziumAvro(registry=f"glue://us-west-1?endpoint=http://127.0.0.1:{port}")
        value = frame(uuid.UUID(int=1), b"\x02")
    else:
        fmt = DebeziumAvro(registry=f"http://127.0.0.1:{port}")
        fmt.registry().retries = 0
        value = frame(1, b"\x02")
    with pytest.raises(RegistryError, match=r"failed while fetching|could not be reached"):
        fmt.decode([Record(value=value)])


def test_array_and_map_items_take_their_canonical_form(tmp_path: Path) -> None:
    """Avro arrays and maps of Debezium's temporal and decimal items: each item in its canonical form."""
    date = {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}
    micro_ts = {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}
    decimal = {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1, "logicalType": "decimal",
               "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
               "connect.name": "org.apache.kafka.connect.data.Decimal"}
    fields = [
        ("dates", {"type": "array", "items": ["null", date]}, [19000, None], '["2022-01-08",null]'),
        ("mts", ["null", {"type": "array", "items": micro_ts}], [1_700_000_000_123_456],
         '["2023-11-14 22:13:20.123456"]'),
        ("mt", {"type": "array", "items": {"type": "long", "connect.name": "io.debezium.time.MicroTime"}},
         [3_723_000_001], '["01:02:03.000001"]'),
        ("decs", {"type": "array", "items": decimal}, [b"\x04\xd2", b"\xfb"], '["12.34","-0.05"]'),
        ("m", {"type": "map", "values": ["null", micro_ts]}, {"a": 0, "b": None},
         '{"a":"1970-01-01 00:00:00.000000","b":null}'),
        ("bins", {"type": "array", "items": "bytes"}, [b"\x00\x01"], '["AAE="]'),
    ]
    value_schema = {"type": "record", "name": "Envelope", "namespace": "s.db.t", "fields": [
        {"name": "after", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": n, "type": t} for n, t, *_ in fields]}], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
            {"name": "db", "type": "string"}, {"name": "table", "type": "string"}, {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"}]}
    fmt = DebeziumAvro(registry=registry_dir(tmp_path, {6: value_schema}))
    datum = {"after": {n: wire for n, _, wire, _ in fields}, "source": {"db": "db", "table": "t", "ts_ms": 7},
             "op": "c"}
    event = only_event(fmt, Record(value=framed(value_schema, 6, datum)))
    assert event.after == {n: text for n, _, _, text in fields}
