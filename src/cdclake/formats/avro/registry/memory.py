"""An in-process schema registry, for tests and encoders."""

from __future__ import annotations

from cdclake.formats.avro.registry.base import CachingRegistry


class MemoryRegistry(CachingRegistry):
    """A registry held in this process: IDs from 1 upwards; an identical schema gets its existing ID."""

    def __init__(self) -> None:
        super().__init__()
        self._texts: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._subjects: dict[str, list[int]] = {}

    def subjects(self) -> dict[str, list[int]]:
        """Each subject's schema IDs, oldest first."""
        return {subject: list(ids) for subject, ids in self._subjects.items()}

    def describe(self) -> str:
        return "memory registry"

    def _fetch(self, schema_id: int) -> str | None:
        return self._texts.get(schema_id)

    def _store(self, subject: str, text: str) -> int:
        schema_id = self._ids.get(text)
        if schema_id is None:
            schema_id = len(self._texts) + 1
            self._texts[schema_id] = text
            self._ids[text] = schema_id
        versions = self._subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id
