"""Schema registries, one module per kind, and :func:`registry_from`, which picks one from a format's
``registry`` option:

* :class:`~.http.HttpRegistry` — a Confluent-compatible REST registry (``http(s)://[user:password@]host[:port]``),
  spoken through confluent-kafka's ``SchemaRegistryClient``, or Apicurio Registry's core API for an
  :class:`~cdclake.formats.avro.framing.ApicurioId`; credentials in the URL become basic auth and never appear in
  logs, reprs or error messages.
* :class:`~.glue.GlueRegistry` — the AWS Glue Schema Registry (``glue://REGION[/REGISTRY][?endpoint=URL]``),
  spoken through boto3 with the AWS SDK's own credentials (``pip install 'cdclake[glue]'``).
* :class:`~.directory.DirectoryRegistry` — offline: a folder of ``<id>.avsc`` (or ``<uuid>.avsc``) files plus
  ``subjects.json`` (subject → list of IDs, oldest first). Good for tests, replays and air-gapped debugging.
* :class:`~.memory.MemoryRegistry` — in-process, for tests and encoders.

Every registry (:class:`~.base.CachingRegistry`) caches parsed schemas by ID, is picklable (Spark ships it to
executors; network clients are created lazily and not pickled), and reports an unknown schema ID as
:class:`~cdclake.formats.base.DecodeError` — a failure of that record, not of the run. A registry that cannot be
reached or refuses our credentials raises :class:`~cdclake.errors.RegistryError`.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

from cdclake.errors import RegistryError  # noqa: F401 — its old import place, kept as cdclake.errors says
from cdclake.formats.avro.registry.base import SchemaRegistry
from cdclake.formats.avro.registry.directory import DirectoryRegistry
from cdclake.formats.avro.registry.glue import GlueRegistry
from cdclake.formats.avro.registry.http import HttpRegistry
from cdclake.formats.avro.registry.memory import MemoryRegistry


def registry_from(url_or_dir: str | os.PathLike[str]) -> SchemaRegistry:
    """An :class:`~.http.HttpRegistry` for an ``http(s)://`` URL, a :class:`GlueRegistry` for ``glue://``, a
    :class:`MemoryRegistry` for ``memory:``, otherwise a :class:`DirectoryRegistry` on that folder
    (``file://`` prefix allowed)."""
    text = os.fspath(url_or_dir)
    lowered = text.lower()
    if lowered.startswith(("http://", "https://")):
        return HttpRegistry(text)
    if lowered.startswith("glue://"):
        return GlueRegistry(text)
    if lowered == "memory:":
        return MemoryRegistry()
    if lowered.startswith("file://"):
        text = unquote(urlsplit(text).path)
    if not text:
        raise ValueError("no schema registry given: pass an http(s):// or glue:// URL or a folder of <id>.avsc files")
    return DirectoryRegistry(text)
