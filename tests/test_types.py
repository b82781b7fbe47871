"""Type text: parse_type and type_text are inverses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cdclake import types as T
from cdclake.types import SqlType, parse_type, type_text


@given(st.sampled_from([T.ENUM, T.SET]), st.lists(st.text(), max_size=5))
def test_enum_and_set_members_round_trip_through_type_text(family, members):
    t = SqlType(family, family, members=tuple(members))
    assert parse_type(type_text(t)) == t


def test_members_with_quotes_and_backslashes():
    members = ("x\\y", "it's", 'say "hi"', "\\", "a,b", "'")
    text = type_text(SqlType(T.ENUM, T.ENUM, members=members))
    assert text == "enum('x\\\\y','it''s','say \"hi\"','\\\\','a,b','''')"
    assert parse_type(text).members == members
