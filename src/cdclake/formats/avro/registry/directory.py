"""An offline schema registry: a folder of ``<id>.avsc`` files and ``subjects.json``; good for tests, replays
and air-gapped debugging."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from pathlib import Path

from cdclake.errors import RegistryError
from cdclake.formats.avro.framing import SchemaId
from cdclake.formats.avro.registry.base import CachingRegistry, canonical_text
from cdclake.support.atomic import write_atomic


class DirectoryRegistry(CachingRegistry):
    """An offline registry: ``<id>.avsc`` files in one folder, and ``subjects.json`` mapping each subject
    to its schema IDs (oldest first). :meth:`register` takes the next free ID under a file lock, so
    concurrent writers on one machine do not collide. Schemas of Glue-framed messages are read from
    ``<uuid>.avsc`` files (the schema version's UUID in its usual text form), put there by hand."""

    INDEX = "subjects.json"
    id_kinds = (int, uuid.UUID)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)

    def describe(self) -> str:
        return f"schema directory {self.path}"

    def _fetch(self, schema_id: SchemaId) -> str | None:
        if not self.path.is_dir():  # a wrong path: every message would be a dead letter for want of its schema
            raise RegistryError(f"{self.describe()} is no directory")
        if isinstance(schema_id, int) and schema_id < 0:
            return None
        try:
            return (self.path / f"{schema_id}.avsc").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"cannot read schema id {schema_id} from {self.describe()}: {exc}") from exc

    def subjects(self) -> dict[str, list[int]]:
        """Each subject's schema IDs, oldest first."""
        try:
            return json.loads((self.path / self.INDEX).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _ids(self) -> list[int]:
        ids = []
        for entry in self.path.glob("*.avsc"):
            with contextlib.suppress(ValueError):
                ids.append(int(entry.stem))
        return ids

    def _store(self, subject: str, text: str) -> int:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ids = self._ids()
            schema_id = next((i for i in sorted(ids) if canonical_text(self._fetch(i) or "null") == text), None)
            if schema_id is None:
                schema_id = max(ids, default=0) + 1
                write_atomic(self.path / f"{schema_id}.avsc", text)
            subjects = self.subjects()
            versions = subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
                write_atomic(self.path / self.INDEX, json.dumps(subjects, indent=1, sort_keys=True))
        return schema_id
