"""Type text: parse_type and type_text are inverses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdclake.model import types as T
from cdclake.model.types import SqlType, parse_type, type_text
from cdclake.spark.lake_types import arrow_type, lake_type


@given(st.sampled_from([T.ENUM, T.SET]), st.lists(st.text(), max_size=5))
def test_enum_and_set_members_round_trip_through_type_text(family, members):
    t = SqlType(family, family, members=tuple(members))
    assert parse_type(type_text(t)) == t


def test_members_with_quotes_and_backslashes():
    members = ("x\\y", "it's", 'say "hi"', "\\", "a,b", "'")
    text = type_text(SqlType(T.ENUM, T.ENUM, members=members))
    assert text == "enum('x\\\\y','it''s','say \"hi\"','\\\\','a,b','''')"
    assert parse_type(text).members == members


@pytest.mark.parametrize("text", [
    "decimal(10,20)", "decimal(0)", "decimal(0,0)", "numeric(5,6)", "datetime(7)", "timestamp(9)", "time(10)",
    "bit(0)", "bit(65)", "bit(99999999999999999999)", "decimal(99999999999999999999,99999999999999999999999)",
    "set(" + ",".join(f"'m{i}'" for i in range(65)) + ")",
    "enum(" + ",".join(f"'m{i}'" for i in range(65536)) + ")",
])
def test_a_type_parameter_out_of_range_is_refused_before_it_reaches_the_lake(text):
    with pytest.raises(T.InvalidType, match="column type"):
        lake_type(parse_type(text))
    with pytest.raises(T.InvalidType):
        arrow_type(parse_type(text))


@pytest.mark.parametrize("text, lake", [
    ("decimal(38,38)", "DECIMAL(38,38)"), ("decimal(1,0)", "DECIMAL(1,0)"), ("decimal(65,30)", "STRING"),
    ("decimal(40,50)", None), ("decimal", "DECIMAL(10,0)"), ("datetime(6)", "TIMESTAMP_NTZ"), ("time(0)", "STRING"),
    ("bit(1)", "BIGINT"), ("bit(64)", "DECIMAL(20,0)"), ("bit", "DECIMAL(20,0)"), ("enum", "STRING"),
    ("set(" + ",".join(f"'m{i}'" for i in range(64)) + ")", "STRING"), ("varchar(99999999999)", "STRING"),
    ("bigint(255) unsigned", "DECIMAL(20,0)"), ("no such type(1,2,3)", "STRING"), ("", "STRING"),
])
def test_types_in_range_keep_their_lake_type(text, lake):
    if lake is None:  # precision above 38 is text, but a scale above the precision no database makes
        with pytest.raises(T.InvalidType):
            lake_type(parse_type(text))
        return
    assert lake_type(parse_type(text)) == lake
