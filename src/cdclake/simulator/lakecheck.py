"""How a lake table compares with an expected state: the check behind ``cdclake demo`` and the end-to-end
tests. Expected rows are canonical values (as :func:`cdclake.simulator.oracle.fold` folds them); each is converted to
what the lake column of its Arrow type must hold, independently of the Spark casts that wrote it."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from cdclake.model import values as V


def as_lake_value(value: Any, arrow_type: Any) -> Any:
    """A canonical value as the lake column of this Arrow type must hold it."""
    if value is None:
        return None
    if pa.types.is_integer(arrow_type):
        return int(value)
    if pa.types.is_decimal(arrow_type):
        return Decimal(str(value))
    if pa.types.is_float32(arrow_type):
        return V.float32(float(value))
    if pa.types.is_float64(arrow_type):
        return float(value)
    if pa.types.is_boolean(arrow_type):
        return value if isinstance(value, bool) else str(value).lower() in ("1", "true")
    if pa.types.is_date(arrow_type):
        return None if V.is_zero_date(value) else dt.date.fromisoformat(value)
    if pa.types.is_timestamp(arrow_type):
        if V.is_zero_date(value):
            return None
        moment = V.parse_datetime_text(value)
        if arrow_type.tz is None:
            return moment.replace(tzinfo=None)
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return base64.b64decode(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def differences(lake: str, expected: dict, key_names: dict, limit: int = 10) -> list[str]:
    """How the lake differs from an expected state (``workload`` form: canonical rows per table), also in tables
    with rows that the state does not have, in its databases (a table left under a name that a rename or a drop
    freed)."""
    from cdclake.lake.paths import lake_tables, table_path

    databases = {database for database, _ in expected}
    problems: list[str] = [
        f"{database}.{table}: unexpected table" for database, table in lake_tables(lake)
        if (database, table) not in expected and database in databases
        and DeltaTable(table_path(lake, database, table)).to_pyarrow_dataset().count_rows()]
    for (database, table), rows in sorted(expected.items()):
        path = table_path(lake, database, table)
        if not rows:
            if DeltaTable.is_deltatable(path) and DeltaTable(path).to_pyarrow_dataset().count_rows():
                problems.append(f"{database}.{table}: expected empty")
            continue
        if not DeltaTable.is_deltatable(path):
            problems.append(f"{database}.{table}: no lake table")
            continue
        from cdclake.lake.store import read_table

        data = read_table(DeltaTable(path))
        types = {f.name: f.type for f in data.schema}
        keys = key_names.get((database, table)) or []
        got = {tuple(repr(r[k]) for k in keys): r for r in data.to_pylist()}
        for row in rows.values():
            try:
                want = {name: as_lake_value(value, types[name]) if name in types else value
                        for name, value in row.items()}
            except (ValueError, TypeError, ArithmeticError) as exc:  # a lake column of the wrong type, say
                problems.append(f"{database}.{table}: expected row {row} does not fit the lake's columns: {exc}")
                got.clear()  # the rest of this table cannot be compared
                break
            key = tuple(repr(want[k]) for k in keys)
            have = got.pop(key, None)
            if have is None:
                problems.append(f"{database}.{table}: missing row {key}")
                continue
            for name, value in want.items():
                if name not in have:
                    problems.append(f"{database}.{table} {key}: no column {name}")
                elif have[name] != value:
                    problems.append(f"{database}.{table} {key}.{name}: lake {have[name]!r} != expected {value!r}")
        problems.extend(f"{database}.{table}: unexpected row {key}" for key in got)
        if len(problems) > limit:
            break
    return problems[:limit]
