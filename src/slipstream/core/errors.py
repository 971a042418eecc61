"""Exceptions for packed files. Every one names the file; each subclasses a built-in.

    PackedFileError                      base of all below (catch this for "the file is bad")
    ├── NotAPackedFileError(ValueError)  not an Arrow IPC file, or an Arrow file slipstream did not write
    ├── FormatVersionError(ValueError)   written by a newer slipstream format than this one reads
    ├── TruncatedFileError(OSError)      the file ends early (an interrupted copy or download)
    ├── CorruptFileError(ValueError)     structure or contents that cannot be right
    │   └── ChecksumError                a page's bytes differ from what was written (names the page and samples)
    └── MissingFieldError(ValueError)    a field asked for is not in the file (names the fields it has)

Errors while *encoding* a sample (a wrong type or shape for its field) are plain ``TypeError`` /
``ValueError`` naming the sample index and the field.
"""

from __future__ import annotations

__all__ = [
    "ChecksumError",
    "CorruptFileError",
    "FormatVersionError",
    "MissingFieldError",
    "NotAPackedFileError",
    "PackedFileError",
    "TruncatedFileError",
]


def _rebuilt(cls: type[BaseException], args: tuple, state: dict) -> BaseException:
    """An exception of ``cls`` with ``args`` and attributes ``state``, its ``__init__`` not called."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class PackedFileError(Exception):
    """A packed file cannot be used; ``path`` names it. Pickles (a worker process's error arrives
    as itself, with its type, message, notes and attributes)."""

    def __init__(self, path: object, message: str):
        super().__init__(f"{path}: {message}")
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


class NotAPackedFileError(PackedFileError, ValueError):
    """The file is not an Arrow IPC file written by slipstream."""


class FormatVersionError(PackedFileError, ValueError):
    """The file's format version is newer than this slipstream reads."""


class TruncatedFileError(PackedFileError, OSError):
    """The file ends before its end: it was cut (an interrupted copy, download or write)."""


class CorruptFileError(PackedFileError, ValueError):
    """The file's structure or contents are damaged."""


class ChecksumError(CorruptFileError):
    """A page's checksum does not match its bytes; ``page`` and ``samples`` (a range) locate it."""

    def __init__(self, path: object, message: str, page: int, samples: range):
        super().__init__(path, message)
        self.page, self.samples = page, samples


class MissingFieldError(PackedFileError, ValueError):
    """A requested field is not in the file."""
