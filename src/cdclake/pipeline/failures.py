"""What a failure means to the user: the machine refusing to write a file, or an error that stops a run by design.

Spark hands an error of its Python processes back as traceback text inside its own exception, so both are found
in the failure's text.
"""

from __future__ import annotations

import re

# How the JVM and delta-rs say the machine refused to write a file: the user can fix that, and a traceback does not
# help with it. Each names the path before the reason ("PATH (Read-only file system)", "directory: PATH\nError: Os
# { …, message: \"Read-only file system\" }").
_REFUSED = re.compile("Read-only file system|Permission denied|No space left on device|Disk quota exceeded")
_PATH = re.compile(r"[\w.~-]*/[\w./~-]+")


def file_system_problem(failure: BaseException) -> str | None:
    """"PATH: REASON" when a run failed because the machine refused to write a file of the lake or the checkpoint;
    None for any other failure."""
    text = str(failure)
    refused = _REFUSED.search(text)
    if refused is None:
        return None
    paths = _PATH.findall(text, 0, refused.start())
    return f"{paths[-1] if paths else 'a file'}: {refused[0]}"


# Errors that stop a run by design (a registry down, corruption under corruption-handling=error, a broker gone for
# good), raised in Spark's Python processes: Spark hands them back inside its own exception, as traceback text.
_STOPPING = re.compile(r"^(?:[\w.]+\.)?(RegistryError|CorruptionError|KafkaUnavailable|DataLoss|KafkaSourceError): "
                       r"(.+)$", re.MULTILINE)


def stopping_error(failure: BaseException) -> tuple[str, str] | None:
    """The class name and message of the error that stopped a run by design, found within Spark's exception; None
    for any other failure."""
    found = _STOPPING.search(str(failure))
    return None if found is None else (found[1], found[2].strip())
