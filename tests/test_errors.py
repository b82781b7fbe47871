"""One error hierarchy: every public exception class of cdclake is defined in cdclake.errors under CdclakeError."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from cdclake import errors

SRC = Path(errors.__file__).parent


def test_every_error_class_derives_from_the_one_base():
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, errors.CdclakeError), cls
    for cls in (errors.DecodeError, errors.BadValue, errors.InvalidType, errors.ChecksumInputError):
        assert issubclass(cls, ValueError) and issubclass(cls, errors.DataError), cls


def test_no_public_exception_class_is_defined_outside_cdclake_errors():
    found = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {ast.unparse(b) for b in node.bases}
                if bases & {"Exception", "ValueError", "RuntimeError", "OSError", "BaseException"}:
                    found.append(f"{path.relative_to(SRC)}: {node.name}")
    assert not found, found


def test_the_old_import_places_name_the_same_classes():
    from cdclake.formats.avro.registry import RegistryError
    from cdclake.formats.base import DecodeError
    from cdclake.lake.delta import TableStopped
    from cdclake.sources.kafka import DataLoss

    assert (DecodeError, RegistryError, TableStopped, DataLoss) == (
        errors.DecodeError, errors.RegistryError, errors.TableStopped, errors.DataLoss)
