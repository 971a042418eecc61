"""Every slipstream exception, in one hierarchy. Each subclasses a built-in (code that catches the
built-in keeps working) and pickles: an error raised in a worker process reaches the parent as
itself, with its type, message, notes and attributes.

    Exception
    ├── PackedFileError                      a packed file cannot be used; ``path`` names it (catch this for "the file is bad";
    │                                        its path and message never show a credential: ``core.redact``)
    │   ├── NotAPackedFileError(ValueError)  not an Arrow IPC file, or an Arrow file slipstream did not write
    │   ├── FormatVersionError(ValueError)   written by a newer slipstream format than this one reads
    │   ├── TruncatedFileError(OSError)      the file ends early (an interrupted copy or download)
    │   ├── CorruptFileError(ValueError)     structure or contents that cannot be right
    │   │   └── ChecksumError                a page's bytes differ from what was written (names the page and samples)
    │   ├── MissingFieldError(ValueError)    a field asked for is not in the file (names the fields it has)
    │   ├── ShardMismatchError(ValueError)   the shards of one dataset do not hold the same fields, or a shard
    │   │                                    differs from what the dataset's index says of it
    │   ├── MissingShardError(FileNotFoundError)  a shard (or a sharded dataset's index) is not where it should be
    │   └── RemoteReadError(OSError)         a range of a remote object could not be read: transient failures past
    │                                        the retry budget, or a permanent one, not retried (a client-side error,
    │                                        a 4xx answer, a server ignoring ranged reads): ``url``, ``start``,
    │                                        ``stop``, ``attempts``; the last cause chained
    └── Cancelled                            raised inside a reader between samples once the iterator that
                                             wanted the batch is closed; never reaches the user
    RuntimeError
    └── WorkerError                          a worker process died (``pid``; ``exitcode``, negative for a signal:
                                             a segfault, the out-of-memory killer) or could not start; the other
                                             workers are stopped
    MemoryError
    └── SharedMemoryError                    the shared-memory file system (``/dev/shm`` or $SLIPSTREAM_SHM_DIR)
                                             has no room for the process workers' batch buffers, or cannot be
                                             written (says how much was needed and what to do)
    ValueError
    └── ConvertError                         a source ``slipstream convert`` cannot convert: an unknown kind,
                                             unequal lengths, nulls, unsupported types
    TimeoutError, RuntimeError
    └── DataLoaderTimeoutError               ``slipstream.torch``: no batch within ``timeout`` seconds, worded
                                             as torch's (``DataLoader timed out after N seconds``)

Errors while *encoding* a sample (a wrong type or shape for its field) are plain ``TypeError`` /
``ValueError`` naming the sample index and the field; a batch not ready within a loader's
``timeout`` is a plain ``TimeoutError``; a dataset that cannot be pickled for ``spawn`` workers is
a ``TypeError`` naming its type. An exception raised by user code (a container, a collate
function, ``worker_init``) propagates as itself, with a note (``add_note``) saying where it was
raised: which sample, batch and epoch, or which worker and its traceback.
"""

from __future__ import annotations

from .redact import redact

__all__ = [
    "Cancelled",
    "ChecksumError",
    "ConvertError",
    "CorruptFileError",
    "DataLoaderTimeoutError",
    "FormatVersionError",
    "MissingFieldError",
    "MissingShardError",
    "NotAPackedFileError",
    "PackedFileError",
    "RemoteReadError",
    "ShardMismatchError",
    "SharedMemoryError",
    "TruncatedFileError",
    "WorkerError",
    "add_note",
]


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)`` (kept in ``__notes__`` on Python 3.10 too)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # pragma: no cover - Python 3.10
        error.__notes__ = [*getattr(error, "__notes__", []), note]


def _rebuilt(cls: type[BaseException], args: tuple, state: dict) -> BaseException:
    """An exception of ``cls`` with ``args`` and attributes ``state``, its ``__init__`` not called."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


# -- packed files ------------------------------------------------------------------------------


class PackedFileError(Exception):
    """A packed file cannot be used; ``path`` names it. Pickles (a worker process's error arrives
    as itself, with its type, message, notes and attributes)."""

    def __init__(self, path: object, message: str):
        super().__init__(redact(f"{path}: {message}"))  # (credentials never shown: core.redact)
        self.path = redact(path)

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
    """A page's checksum does not match its bytes; ``page`` and ``samples`` (a range) locate it, in
    the numbers of the dataset that raised it (a sharded dataset's, not its shard's: ``path`` names
    the shard, and the message its own numbers too)."""

    def __init__(self, path: object, message: str, page: int, samples: range):
        super().__init__(path, message)
        self.page, self.samples = page, samples


class MissingFieldError(PackedFileError, ValueError):
    """A requested field is not in the file."""


class ShardMismatchError(PackedFileError, ValueError):
    """The shards of one dataset do not hold the same fields, or a shard is not what the index says."""


class MissingShardError(PackedFileError, FileNotFoundError):
    """A shard file or object (or a sharded dataset's index) is missing."""


class RemoteReadError(PackedFileError, OSError):
    """Bytes ``start``..``stop`` of the remote object ``url`` could not be read: a permanent error,
    or transient ones (timeouts, resets, 5xx, throttling, damaged transfers) past the retry budget."""

    def __init__(self, url: object, message: str, start: int = 0, stop: int = 0, attempts: int = 0):
        super().__init__(url, message)
        self.url, self.start, self.stop, self.attempts = redact(url), start, stop, attempts


# -- worker processes --------------------------------------------------------------------------


class WorkerError(RuntimeError):
    """A worker process died (``pid``, ``exitcode``: negative for a signal) or could not start."""

    def __init__(self, message: str, pid: int | None = None, exitcode: int | None = None):
        super().__init__(message)
        self.pid, self.exitcode = pid, exitcode

    def __reduce__(self) -> tuple:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


class SharedMemoryError(MemoryError):
    """The shared-memory file system has no room for the process workers' batch buffers."""


# -- conversion --------------------------------------------------------------------------------


class ConvertError(ValueError):
    """A source that cannot be converted (an unknown kind, unequal lengths, nulls, unsupported types)."""


class Cancelled(Exception):
    """Raised between samples once the iterator that wanted the batch has been closed."""


class DataLoaderTimeoutError(TimeoutError, RuntimeError):
    """No batch within ``timeout`` seconds: a ``TimeoutError`` and, as torch raises, a
    ``RuntimeError`` whose message starts with torch's ``DataLoader timed out after N seconds``."""
