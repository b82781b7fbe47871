"""The DDL statements the lake follows, parsed from MySQL/TiDB statement text.

Only what changes a lake table's shape or contents matters: ADD / DROP / MODIFY / CHANGE / RENAME COLUMN,
TRUNCATE, DROP TABLE, RENAME TABLE. Index, constraint, partition, comment and option changes leave the
lake unchanged. Anything else that alters a table is reported as unsupported, so the pipeline can stop
that table with a clear message instead of guessing.
"""

from __future__ import annotations

import re

import msgspec


class AddColumn(msgspec.Struct, frozen=True):
    name: str
    type: str


class DropColumn(msgspec.Struct, frozen=True):
    name: str


class ModifyColumn(msgspec.Struct, frozen=True):
    name: str
    type: str
    new_name: str | None = None


class RenameColumn(msgspec.Struct, frozen=True):
    name: str
    new_name: str


class Truncate(msgspec.Struct, frozen=True):
    pass


class DropTable(msgspec.Struct, frozen=True):
    pass


class RenameTable(msgspec.Struct, frozen=True):
    database: str | None
    table: str


class Unsupported(msgspec.Struct, frozen=True):
    reason: str


Action = AddColumn | DropColumn | ModifyColumn | RenameColumn | Truncate | DropTable | RenameTable | Unsupported

_IDENT = r"(?:`(?:[^`]|``)+`|\"[^\"]+\"|[\w$]+)"
_QUALIFIED = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_IGNORED_ALTER = re.compile(
    r"^(ADD\s+(UNIQUE|INDEX|KEY|PRIMARY|CONSTRAINT|FULLTEXT|SPATIAL|FOREIGN|PARTITION)|DROP\s+(INDEX|KEY|PRIMARY|"
    r"FOREIGN|CONSTRAINT|PARTITION|CHECK)|RENAME\s+(INDEX|KEY)|ALTER\s+(INDEX|CHECK|CONSTRAINT)|COMMENT|"
    r"ENGINE|AUTO_INCREMENT|(DEFAULT\s+)?(CHARSET|CHARACTER\s+SET|COLLATE)|CONVERT\s+TO|ROW_FORMAT|"
    r"TRUNCATE\s+PARTITION|REORGANIZE|COALESCE|PARTITION\s+BY|REMOVE\s+PARTITIONING|SHARD_ROW_ID_BITS|"
    r"ALGORITHM|LOCK|FORCE|ORDER\s+BY|CACHE|NOCACHE|SET\s+TIFLASH|ATTRIBUTES|STATS_)", re.IGNORECASE)
_COLUMN_TYPE_END = re.compile(
    r"\s+(NOT\s+NULL|NULL|DEFAULT|AUTO_INCREMENT|COMMENT|PRIMARY|UNIQUE|KEY|COLLATE|CHARACTER\s+SET|CHARSET|"
    r"GENERATED|AS\s*\(|ON\s+UPDATE|FIRST|AFTER|CHECK|REFERENCES|INVISIBLE|VISIBLE|STORAGE|COLUMN_FORMAT|"
    r"SRID)\b.*$", re.IGNORECASE | re.DOTALL)


def quote(identifier: str) -> str:
    """A MySQL identifier of any name (what :func:`unquote` reads back): the one way a name enters DDL text."""
    return "`" + identifier.replace("`", "``") + "`"


def qualified(database: str | None, table: str | None) -> str:
    """```database`.`table``` (```table``` without a database), quoted by :func:`quote`."""
    return f"{quote(database)}.{quote(table or '')}" if database else quote(table or "")


def unquote(identifier: str) -> str:
    identifier = identifier.strip()
    if identifier[:1] == "`" and identifier[-1:] == "`":
        return identifier[1:-1].replace("``", "`")
    if identifier[:1] == '"' and identifier[-1:] == '"':
        return identifier[1:-1]
    return identifier


def split_qualified(name: str) -> tuple[str | None, str]:
    parts = re.findall(_IDENT, name)
    if len(parts) >= 2:
        return unquote(parts[0]), unquote(parts[1])
    return None, unquote(parts[0])


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes (``decimal(10,2)``, ``enum('a,b')``)."""
    parts, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _column_type(definition: str) -> str:
    return _COLUMN_TYPE_END.sub("", definition.strip()).strip()


# A quoted identifier or string (kept whole: a name may hold "--", "#" or "/*"), or a comment.
_QUOTED_OR_COMMENT = re.compile(
    r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|/\*.*?\*/|(?:--|#)[^\n]*", re.DOTALL)


def _strip_comments(sql: str) -> str:
    sql = _QUOTED_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0)[0] in "`'\"" else " ", sql)
    return sql.strip().rstrip(";").strip()


def parse(sql: str) -> list[Action]:
    """The lake actions of one DDL statement (``[]`` when it does not concern table contents)."""
    text = _strip_comments(sql)
    head = text.upper()
    if re.match(r"^TRUNCATE\b", head):
        return [Truncate()]
    if re.match(r"^DROP\s+TABLE\b", head):
        return [DropTable()]
    match = re.match(rf"^RENAME\s+TABLE\s+{_QUALIFIED}\s+TO\s+({_QUALIFIED})", text, re.IGNORECASE)
    if match:
        return [RenameTable(*split_qualified(match.group(1)))]
    match = re.match(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+{_QUALIFIED}\s+(.*)$", text,
                     re.IGNORECASE | re.DOTALL)
    if not match:
        return []  # CREATE TABLE/DATABASE, views, indexes, grants: nothing for existing lake rows
    actions: list[Action] = []
    for spec in _split_top_level(match.group(1)):
        actions.extend(_alter_spec(spec))
    return _one_after_another(actions)


def _one_after_another(actions: list[Action]) -> list[Action]:
    """A statement's clauses, which the lake applies one after another. MySQL renames at once (``RENAME COLUMN a
    TO b, RENAME COLUMN b TO a`` swaps them), which is the same unless a clause renames onto a name that a later
    clause renames away or drops."""
    for index, action in enumerate(actions):
        if isinstance(action, RenameColumn | ModifyColumn) and action.new_name:
            target = action.new_name.lower()
            for later in actions[index + 1:]:
                if isinstance(later, RenameColumn | ModifyColumn | DropColumn) and later.name.lower() == target and (
                        not isinstance(later, ModifyColumn) or later.new_name):
                    return [Unsupported(f"renaming column {action.name} to {action.new_name} in the statement that "
                                        f"also renames or drops {later.name} is not applied to lake tables")]
    return actions


def _alter_spec(spec: str) -> list[Action]:
    if _IGNORED_ALTER.match(spec):
        return []
    match = re.match(r"^ADD\s+(?:COLUMN\s+)?\((.*)\)$", spec, re.IGNORECASE | re.DOTALL)
    if match:
        return [a for part in _split_top_level(match.group(1)) for a in _alter_spec("ADD COLUMN " + part)]
    match = re.match(rf"^ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?({_IDENT})\s+(.+)$", spec,
                     re.IGNORECASE | re.DOTALL)
    if match:
        return [AddColumn(unquote(match.group(1)), _column_type(match.group(2)))]
    match = re.match(rf"^DROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?({_IDENT})$", spec, re.IGNORECASE)
    if match:
        return [DropColumn(unquote(match.group(1)))]
    match = re.match(rf"^MODIFY\s+(?:COLUMN\s+)?({_IDENT})\s+(.+)$", spec, re.IGNORECASE | re.DOTALL)
    if match:
        return [ModifyColumn(unquote(match.group(1)), _column_type(match.group(2)))]
    match = re.match(rf"^CHANGE\s+(?:COLUMN\s+)?({_IDENT})\s+({_IDENT})\s+(.+)$", spec, re.IGNORECASE | re.DOTALL)
    if match:
        old, new = unquote(match.group(1)), unquote(match.group(2))
        return [ModifyColumn(old, _column_type(match.group(3)), None if new == old else new)]
    match = re.match(rf"^RENAME\s+(?:TO|AS)?\s*({_QUALIFIED})$", spec, re.IGNORECASE)
    if match:
        return [RenameTable(*split_qualified(match.group(1)))]
    match = re.match(rf"^RENAME\s+COLUMN\s+({_IDENT})\s+TO\s+({_IDENT})$", spec, re.IGNORECASE)
    if match:
        return [RenameColumn(unquote(match.group(1)), unquote(match.group(2)))]
    if re.match(r"^ALTER\s+(COLUMN\s+)?\S+\s+(SET|DROP)\s+DEFAULT", spec, re.IGNORECASE):
        return []
    return [Unsupported(f"unsupported ALTER TABLE clause: {spec[:80]}")]


_TARGET = re.compile(
    r"^(?:ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE|DROP\s+(?:TEMPORARY\s+)?TABLE(?:\s+IF\s+EXISTS)?|TRUNCATE(?:\s+TABLE)?"
    r"|RENAME\s+TABLE|CREATE\s+(?:TEMPORARY\s+)?TABLE(?:\s+IF\s+NOT\s+EXISTS)?"
    rf"|(?:CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?|DROP\s+)INDEX\s+{_IDENT}\s+ON)\s+({_QUALIFIED})",
    re.IGNORECASE)


_RENAME_TABLES = re.compile(r"^RENAME\s+TABLES?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_RENAME_CLAUSE = re.compile(rf"^({_QUALIFIED})\s+TO\s+({_QUALIFIED})$", re.IGNORECASE)
_DROP_TABLES = re.compile(r"^DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?(.*?)(?:\s+(?:RESTRICT|CASCADE))?$",
                          re.IGNORECASE | re.DOTALL)

TableName = tuple[str, str]


def by_table(sql: str, database: str, table: str) -> list[tuple[TableName, list[Action]]]:
    """The lake tables a DDL statement changes, each with its actions, in the statement's order: the message's
    ``database.table``, except where the statement names several tables, and for a rename, which Canal and TiCDC
    name by its new name.
    ``RENAME TABLE a TO b, c TO d`` renames each in turn (MySQL too goes left to right), ``DROP TABLE a, b``
    drops each. An unqualified name is in ``database``, the message's."""
    text = _strip_comments(sql)
    renames = _RENAME_TABLES.match(text)
    if renames:
        clauses = [_RENAME_CLAUSE.match(clause) for clause in _split_top_level(renames.group(1))]
        if not clauses or not all(clauses):
            return [((database, table), [Unsupported(f"RENAME TABLE statement not understood: {text[:80]}")])]
        return [(_in(split_qualified(c.group(1)), database), [RenameTable(*_in(split_qualified(c.group(2)), database))])
                for c in clauses if c]
    drops = _DROP_TABLES.match(text)
    dropped = _split_top_level(drops.group(1)) if drops else []
    if len(dropped) > 1:
        return [(_in(split_qualified(name), database), [DropTable()]) for name in dropped]
    actions = parse(text)
    renames = [a for a in actions if isinstance(a, RenameTable)]
    if renames:  # ALTER TABLE … RENAME TO: the statement's other clauses change the table before it moves
        named = table_of(text)
        return [(_in(named, database) if named else (database, table),
                 [a for a in actions if not isinstance(a, RenameTable)]
                 + [RenameTable(*_in((renames[-1].database, renames[-1].table), database))])]
    return [((database, table), actions)]


def changed_table(sql: str, database: str | None, table: str | None) -> tuple[str | None, str | None]:
    """The (first) table a DDL statement changes, for a message that names ``database.table``: the canonical event
    names it, whichever name the message gives (see :func:`message_table`)."""
    (changed_database, changed), _ = by_table(sql, database or "", table or "")[0]
    return changed_database or None, changed or None


def message_table(sql: str, database: str | None, table: str | None) -> tuple[str | None, str | None]:
    """The table that Canal and TiCDC name in the message of a DDL statement that changes ``database.table``: a
    RENAME's (first) new name, else that table (for encoders that write as they do)."""
    changed = by_table(sql, database or "", table or "")
    renames = [a for _, actions in changed for a in actions if isinstance(a, RenameTable)]
    if renames:
        return renames[0].database or database, renames[0].table
    return database, table


def _in(name: tuple[str | None, str], database: str) -> TableName:
    return name[0] or database, name[1]


def table_of(sql: str) -> tuple[str | None, str] | None:
    """(database or None, table) of the table a table statement applies to — the first one it names — for
    sources whose DDL records name only the database (DTS Avro); None for other statements."""
    match = _TARGET.match(_strip_comments(sql))
    return split_qualified(match.group(1)) if match else None
