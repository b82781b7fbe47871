"""Every error cdclake raises on purpose, in one hierarchy: catch :class:`CdclakeError` for all of them.

Each message is one line for a person and says what to do where something can be done. Errors about one
message's content derive from :class:`DataError` (and ``ValueError``): the pipeline turns them into dead letters.
Errors about a service or the lake (``RuntimeError``) stop a batch or a table instead; the CLI maps them to its
exit codes (see the README's table).
"""

from __future__ import annotations


class CdclakeError(Exception):
    """Base of every error cdclake raises on purpose."""


# ------------------------------------------------------------------------------------------ message content

class DataError(CdclakeError, ValueError):
    """Content of a message or of a records file that cannot be used as it is; the record becomes a dead letter
    (replay it with ``cdclake run --input`` once the cause is fixed)."""


class DecodeError(DataError):
    """A record a format cannot turn into events; the message says why, for a person."""


class BadValue(DataError):
    """A wire value that does not fit its column type; the message names the value and the type."""


class InvalidType(DataError):
    """A column type with a parameter no database allows (``decimal(10,20)``, ``datetime(9)``, ``bit(0)``): a
    broken or hostile message's. Refused before it reaches the lake's writer, which would fail on it."""


class ChecksumInputError(DataError):
    """A value that cannot be encoded for TiCDC's row checksum (an ENUM name not in ``allowed``, a BIT wider
    than 64 bits, a malformed TIMESTAMP…): the row cannot be the one TiCDC hashed."""


class RecordFileError(DataError):
    """A file of captured records (``--input``, ``cdclake decode``) that is not in a form cdclake reads."""


class CorruptionError(CdclakeError, RuntimeError):
    """A row whose checksum does not match, or that TiCDC flagged as corrupted, under
    ``corruption-handling=error``: the run stops before writing data that cannot be trusted, and resumes at
    that record once the cause is dealt with."""


# ------------------------------------------------------------------------------------------------- services

class RegistryError(CdclakeError, RuntimeError):
    """The schema registry itself failed (unreachable, refused the credentials, rejected a schema): not a
    problem of one record. Check the ``registry`` option and the registry's health, then run again."""


class KafkaSourceError(CdclakeError, RuntimeError):
    """Kafka could not be read as asked; the message names the servers (never a secret) and why."""


class KafkaUnavailable(KafkaSourceError):
    """The brokers stayed unreachable for longer than the retry window; the run can be started again."""


class DataLoss(KafkaSourceError):
    """Records a range was planned to hold are no longer in Kafka (retention removed them before they were
    applied); the message names the partition and offsets."""


# ----------------------------------------------------------------------------------------------------- lake

class TableStopped(CdclakeError):
    """A change that cannot be applied safely; the pipeline stops this table and keeps the others
    (``cdclake status`` shows why; the table's records are in the dead letters)."""


class LakeError(CdclakeError):
    """A failure of the lake's own tables, which every table's step reads: it fails the batch, whichever table's
    step met it (see :func:`cdclake.pipeline.batch.table_failure`)."""


class StopRequested(CdclakeError):
    """Raised in a batch that began after the run was asked to stop: the query ends, and the batch's records are
    read again by the next run."""
