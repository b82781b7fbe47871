"""The one mapping from a source's database and table names to the lake's path segments, and back.

A source name is data, never a path: ``..``, ``a/b``, ``_cdclake`` or ``Users`` beside ``users`` are names some
database allows. :func:`segment` encodes any ``str`` (empty, NUL, lone surrogates, very long) as a segment that

- keeps ``a-z``, ``0-9``, ``_`` and ``-`` as they are (but a leading ``_`` or ``-``), and writes every other byte
  of the name's UTF-8 (surrogates passed through) as ``~`` and two lowercase hex digits; the empty name is ``~``;
- is therefore never ``.``/``..``, never holds ``/``, ``\\``, NUL, ``%`` (URL readers may decode it) or ``=`` (Hive
  partition directories), never starts with ``_`` or ``.`` (the lake's own ``_cdclake`` and what Delta, Spark
  and Hadoop treat as hidden), and has no upper-case letter, so that two names never share a directory on a
  case-insensitive store either;
- stays within :data:`MAX_SEGMENT` bytes: a longer encoding is cut (at an escape's boundary) and ends with ``~~``
  and 32 hex digits of the name's SHA-256. Such a segment cannot be decoded: the table states its source names
  (see :func:`stated_name`) as its Delta table name, given when it is made, or, once a RENAME TABLE gave it a name
  of that kind, in its table property :data:`SOURCE_NAME`.

A lake of an earlier cdclake, whose names were written as they are, keeps every directory of ``[a-z0-9_-]`` not
starting with ``_`` or ``-``; :func:`foreign_tables` finds the others, which a run refuses rather than re-map
(:func:`migrate`, ``cdclake migrate-names``, moves them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid

ESCAPE = "~"
MAX_SEGMENT = 255  # bytes: the usual limit of a file name
HASH_CHARS = 32
SOURCE_NAME = "cdclake.sourceName"  # table property: stated_name() of a table a RENAME TABLE gave a hashed segment
RESERVED = "_cdclake"  # the lake's own directory; no segment starts with "_"
DISCARDED = "discarded"  # under RESERVED: table directories being deleted (see own_path, discard_path)
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_HASHED = re.compile(rf"[a-z0-9_~-]*~~[0-9a-f]{{{HASH_CHARS}}}")


def segment(name: str) -> str:
    """The path segment of a source database or table name (total, injective, case-free; see the module)."""
    raw = name.encode("utf-8", "surrogatepass")
    if not raw:
        return ESCAPE
    parts = [chr(b) if b in _PLAIN and (i or b not in b"_-") else f"{ESCAPE}{b:02x}" for i, b in enumerate(raw)]
    encoded = "".join(parts)
    if len(encoded) <= MAX_SEGMENT:
        return encoded
    keep, size = [], 0
    for part in parts:
        if size + len(part) > MAX_SEGMENT - 2 - HASH_CHARS:
            break
        keep.append(part)
        size += len(part)
    return "".join(keep) + ESCAPE * 2 + hashlib.sha256(raw).hexdigest()[:HASH_CHARS]


def source(segment_name: str) -> str | None:
    """The source name of a segment :func:`segment` made; None for a hashed one (its table's :data:`SOURCE_NAME`
    says it). Raises ValueError for anything else (a directory of an earlier cdclake or not of cdclake)."""
    if segment_name == ESCAPE:
        return ""
    if _HASHED.fullmatch(segment_name):
        return None
    raw, i = bytearray(), 0
    try:
        while i < len(segment_name):
            if segment_name[i] == ESCAPE:
                raw.append(int(segment_name[i + 1:i + 3], 16))
                i += 3
            else:
                raw.append(ord(segment_name[i]))
                i += 1
        name = raw.decode("utf-8", "surrogatepass")
    except (ValueError, UnicodeError, IndexError):
        raise ValueError(f"{segment_name!r} is not a cdclake name segment") from None
    if segment(name) != segment_name:
        raise ValueError(f"{segment_name!r} is not a cdclake name segment")
    return name


def table_path(lake: str, database: str, table: str) -> str:
    """Where the lake keeps the source table ``database``.``table``."""
    return f"{lake.rstrip('/')}/{segment(database)}/{segment(table)}"


def own_root(lake: str) -> str:
    """The lake's own directory, :data:`RESERVED`, which no source table's path can reach."""
    return f"{lake.rstrip('/')}/{RESERVED}"


def own_path(lake: str, name: str) -> str:
    """Where the lake keeps its own table (or directory) ``name``: under :func:`own_root`."""
    return f"{own_root(lake)}/{name}"


def discard_path(lake: str) -> str:
    """A new, unique place in the lake's own ``discarded`` directory for a table directory on its way out."""
    return f"{own_path(lake, DISCARDED)}/{uuid.uuid4().hex}"


def stated_name(database: str, table: str) -> str | None:
    """What a table whose path segments cannot be decoded (hashed) states as its name: JSON ``[database, table]``;
    None for every other table."""
    if source(segment(database)) is not None and source(segment(table)) is not None:
        return None
    return json.dumps([database, table])


def _names(lake: str, database_dir: str, table_dir: str) -> tuple[str, str] | None:
    """The source names of a table directory; None where it is not one this mapping made."""
    try:
        database, table = source(database_dir), source(table_dir)
    except ValueError:
        return None
    if database is not None and table is not None:
        return database, table
    from deltalake import DeltaTable

    metadata = DeltaTable(os.path.join(lake, database_dir, table_dir)).metadata()
    for stated in (metadata.configuration.get(SOURCE_NAME), metadata.name):  # a rename's name, else the first
        try:
            database, table = json.loads(stated or "null")
        except (TypeError, ValueError):
            continue
        if isinstance(database, str) and isinstance(table, str) and stated_name(database, table) == stated and (
                segment(database), segment(table)) == (database_dir, table_dir):
            return database, table
    return None


def _table_dirs(lake: str) -> list[tuple[str, str]]:
    """Every ``<database dir>/<table dir>`` of a local lake that holds a Delta table, but the lake's own."""
    found = []
    if "://" in lake or not os.path.isdir(lake):
        return found
    for database in sorted(os.listdir(lake)):
        if database == RESERVED or not os.path.isdir(os.path.join(lake, database)):
            continue
        for table in sorted(os.listdir(os.path.join(lake, database))):
            if os.path.isdir(os.path.join(lake, database, table, "_delta_log")):
                found.append((database, table))
    return found


def lake_tables(lake: str) -> list[tuple[str, str]]:
    """The source (database, table) names of each table of a local lake (see :func:`foreign_tables` for the
    directories that hold a Delta table but no name of this mapping: they are not listed)."""
    return [names for dirs in _table_dirs(lake) if (names := _names(lake, *dirs)) is not None]


def foreign_tables(lake: str) -> list[str]:
    """The ``database/table`` directories of a local lake that hold a Delta table under a name this mapping does not
    make (an earlier cdclake wrote names as they were, and ``_`` for an empty database). A hashed segment whose
    table does not state its name (a crash between a RENAME TABLE's commit and its move) is not listed: the run
    that follows completes the rename."""
    return [f"{d}/{t}" for d, t in _table_dirs(lake) if not _decodes(d) or not _decodes(t)]


def _decodes(segment_name: str) -> bool:
    try:
        source(segment_name)
    except ValueError:
        return False
    return True


def refuse_foreign(lake: str) -> str | None:
    """A one-line refusal for a lake holding tables under names of an earlier cdclake, or None."""
    foreign = foreign_tables(lake)
    if not foreign:
        return None
    more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
    return (f"{lake}: table directory {foreign[0]}{more} is not named as this cdclake names tables; move it to "
            f"{_moved(foreign[0])} or run `cdclake migrate-names {lake}` (see the README's 'Lake layout')")


def _moved(directory: str) -> str:
    """Where a table directory of an earlier cdclake belongs: its names were the source's (``_``: no database)."""
    database, _, table = directory.partition("/")
    return f"{segment('' if database == '_' else database)}/{segment(table)}"


def migrate(lake: str) -> list[str]:
    """Moves each table of a local lake that an earlier cdclake named as its source did to the directory that names
    it now (a hashed one states its names first); returns ``old -> new`` for each. A target that exists stops it
    before that move (ValueError). Run it while no pipeline writes to the lake; run again after a crash."""
    from deltalake import DeltaTable

    moved = []
    for old in foreign_tables(lake):
        new = _moved(old)
        source, target = os.path.join(lake, old), os.path.join(lake, new)
        if os.path.exists(target):
            raise ValueError(f"{lake}: cannot move {old} to {new}, which exists")
        database, _, table = old.partition("/")
        stated = stated_name("" if database == "_" else database, table)
        if stated is not None:
            DeltaTable(source).alter.set_table_properties({SOURCE_NAME: stated}, raise_if_not_exists=False)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(source, target)
        if not os.listdir(os.path.dirname(source)):
            os.rmdir(os.path.dirname(source))
        moved.append(f"{old} -> {new}")
    return moved
