"""Parquet objects in a store and their footers, as opening them reads them: listed, read and checked.

``list_parquet(fetcher, url)`` lists a folder prefix once (its ``.parquet`` objects, subfolders
too, in path order: each object's size and ETag or modification time come with the listing;
``list_folder`` gives the folder's summary ``_metadata`` from the same listing as well; objects,
their HEADs and tags: ``inplace.remoteobjects``). ``read_footers`` reads
each footer by ranged reads from the object's end (the last 8 bytes give its length; once one
footer of the set is known, one read of that length plus 8 usually gets the next whole), many
objects in parallel, through ``Fetcher.read_checked``: retried within the budget, a footer that
does not pass ``check_footer`` read again before it is called corrupt. ``opened_footers`` keeps
the footers in one small index file per opened set beside the page cache (``inplace.footers``:
private, sealed, written atomically), keyed by each object's URL, size and tag: opening the same
set again reads only the listing (or the HEADs), and checks each footer from the index again.

``check_footer(url, footer, size)`` is every check a footer gets before anything uses it: its
length and magic, pyarrow's parse of it (the schema as Arrow types, its Hugging Face features valid
JSON, its leaf columns), then its claims from its own bytes (``files.parquetfooter``: row counts,
every column chunk's byte range inside the object's data and apart from the others', value and
null counts). What it gives (``CheckedFooter``) is all a reader of the object uses: the column
chunks' places come from those checked claims, never from pyarrow's column chunk metadata, whose
accessors abort the interpreter on some damage. ``CorruptFileError`` naming the object otherwise.

A folder's summary (``_metadata`` at its root: one footer holding every data file's row groups,
each column chunk naming its file by a relative path) is read whole in one ranged read through
``Fetcher.read_checked`` (``read_summary``: a summary that fails is read again, the same failing
bytes three times are ``CorruptFileError`` naming it) and kept in the footer index as a footer is
(``opened_summary``). ``check_summary`` checks it as a footer is checked, its claims by data file
(``files.parquetfooter.checked_summary``); ``summary_differences`` compares it with the listing,
which is what exists (a listed object it does not name, a file it names that is not listed, chunks
past a listed object's data); ``folder_summary`` gives it only when it passes both, else warns
naming the folder (the caller reads every footer instead). What it says of one file
(``Summarized``: its row groups' rows, the schema, about how long its footer is) is all a reader
uses before that file's own footer is read (``object_footer``: the object's own index entry, read
once per cache) and compared with it (``agree``: ``ShardMismatchError`` naming the file, the
summary stale).
"""

from __future__ import annotations

import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from ..core.errors import CorruptFileError, MissingShardError, RemoteReadError, ShardMismatchError, add_note
from ..files.parquetfooter import (
    MAGIC,
    MAX_FOOTER,
    TAIL,
    FooterClaims,
    Leaf,
    SummaryFile,
    arrow_schema,
    checked_footer,
    checked_summary,
    footer_bounds,
    leaf_columns,
    parse_metadata,
)
from ..remote.fetch import Fetcher
from ..remote.store import join
from .footers import Footer, FooterIndex, index_name
from .parquet import SUFFIX
from .remoteobjects import ObjectInfo, list_objects, listing

__all__ = [
    "FOOTER_THREADS", "SUMMARY", "CheckedFooter", "Summarized", "Summary", "agree", "check_footer",
    "check_summary", "folder_summary", "list_folder", "list_parquet", "object_footer",
    "opened_footers", "opened_summary", "read_footer", "read_footers", "read_summary", "summarized", "summary_differences",
]  # fmt: skip

FOOTER_THREADS = 32  # footers read at once
SUMMARY = "_metadata"  # a folder's summary file, at its root: every data file's row groups in one footer


class CheckedFooter(NamedTuple):
    """A footer that passed ``check_footer``: its bytes (and the 8 after them), pyarrow's parse of
    it (``metadata``: its schema and file-level values only), its Arrow ``schema``, its ``leaves``
    and its ``claims`` (row groups' rows, column chunks' bytes)."""

    footer: bytes
    metadata: Any
    schema: Any
    leaves: list[Leaf]
    claims: FooterClaims


# ------------------------------------------------------------------------------------------ listing


def list_parquet(fetcher: Fetcher, url: str) -> list[ObjectInfo]:
    """(name, size, tag) of each ``.parquet`` object under the folder prefix ``url`` (its subfolders
    too), in path order; one listing, retried."""
    return list_folder(fetcher, url)[0]


def list_folder(fetcher: Fetcher, url: str) -> tuple[list[ObjectInfo], ObjectInfo | None]:
    """``list_parquet``'s objects, and the (name, size, tag) of the folder's summary ``_metadata``
    at its root (``None`` when it has none): one listing, retried."""
    found = listing(fetcher, url)
    base = url.rstrip("/")
    summary = next(((join(base, r), n, t) for r, n, t in found if r == SUMMARY), None)
    return list_objects(fetcher, url, SUFFIX, found), summary


# --------------------------------------------------------------------------------------------- footers


def _parsed(url: str, footer: bytes, size: int) -> tuple[bytes, Any, Any, list[Leaf]]:
    """A footer's (its bytes and the 8 after them, of the ``size``-byte object ``url``) first checks:
    its length and magic, pyarrow's parse of it, its schema as Arrow types, its Hugging Face features
    valid JSON, its leaf columns: (its bytes, the parse, the schema, the leaves)."""
    footer = bytes(footer)
    if len(footer) < TAIL or footer_bounds(url, size, footer[-TAIL:], what="object") != size - len(footer):
        raise CorruptFileError(url, f"its footer's {len(footer)} bytes do not end with its length and the magic bytes PAR1")
    metadata = parse_metadata(url, footer)
    schema = arrow_schema(url, metadata)
    features = (schema.metadata or {}).get(b"huggingface")
    if features is not None:
        try:
            json.loads(features)
        except ValueError:
            raise CorruptFileError(url, "its footer's Hugging Face features are not valid JSON") from None
    return footer, metadata, schema, leaf_columns(url, metadata, schema)


def check_footer(url: str, footer: bytes, size: int, claims: FooterClaims | None = None) -> CheckedFooter:
    """A footer (its bytes and the 8 after them) of the ``size``-byte object ``url``, checked (see
    the module doc); ``claims``: its claims when this process has them from a check done before
    (a source pickled to it), else read from its bytes. ``CorruptFileError`` naming ``url``."""
    footer, metadata, schema, leaves = _parsed(url, footer, size)
    if claims is None:
        claims = checked_footer(url, footer[:-TAIL], size - len(footer), leaves)
    if len(claims.rows) != metadata.num_row_groups or sum(claims.rows) != metadata.num_rows:
        raise CorruptFileError(
            url, f"its footer holds {len(claims.rows)} row groups of {sum(claims.rows)} rows, but pyarrow reads "
            f"{metadata.num_row_groups} of {metadata.num_rows}"
        )  # fmt: skip
    return CheckedFooter(footer, metadata, schema, leaves, claims)


def read_footer(fetcher: Fetcher, url: str, size: int, guess: int = 0) -> CheckedFooter:
    """The footer of the Parquet object ``url`` of ``size`` bytes, checked: the last ``max(guess,
    8)`` bytes first, then what they lack; a footer that fails ``check_footer`` is read again, as
    ``Fetcher.read_checked`` does."""

    def parse(reads: Any) -> CheckedFooter:
        if size < len(MAGIC) + TAIL:
            footer_bounds(url, size, b"", what="object")  # (too short: raises)
        first = min(size, max(TAIL, int(guess)))
        tail = bytes(reads.ranges([(size - first, size)])[0])
        length = size - TAIL - footer_bounds(url, size, tail[-TAIL:], what="object")
        if length + TAIL > first:
            footer = bytes(reads.ranges([(size - TAIL - length, size - first)])[0]) + tail
        else:
            footer = tail[first - TAIL - length :]
        return check_footer(url, footer, size)

    try:
        return fetcher.read_checked(url, parse, "its Parquet footer")
    except RemoteReadError as exc:
        add_note(exc, "(reading its Parquet footer, to open it)")
        raise


def read_footers(
    fetcher: Fetcher, objects: list[ObjectInfo], threads: int = FOOTER_THREADS, guess: int = 0
) -> list[CheckedFooter]:
    """The footers of ``objects``, read ``threads`` at once (see ``read_footer``); after the first,
    each read guesses the largest footer seen so far (a set's footers are alike)."""
    if not objects:
        return []
    out: list[CheckedFooter] = []
    if guess <= 0:
        out.append(read_footer(fetcher, objects[0][0], objects[0][1]))
        guess = len(out[0].footer)
    rest = objects[len(out) :]
    largest = [guess]

    def one(entry: ObjectInfo) -> CheckedFooter:
        checked = read_footer(fetcher, entry[0], entry[1], largest[0])
        largest[0] = max(largest[0], len(checked.footer))  # (a race here only changes a guess)
        return checked

    if len(rest) <= 1:
        return out + [one(entry) for entry in rest]
    pool = ThreadPoolExecutor(max(1, min(int(threads), len(rest))), thread_name_prefix="slipstream-footers")
    try:
        out.extend(pool.map(one, rest))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def opened_footers(
    fetcher: Fetcher, infos: list[ObjectInfo], opened: str, threads: int = FOOTER_THREADS, guess: int = 0
) -> dict[str, CheckedFooter]:
    """Every object's checked footer: from the footer index where its size and tag are the ones
    recorded (and it passes ``check_footer``), else read (the first read asking for ``guess`` bytes,
    or the largest footer known); the index saved again when it changed (``opened``: what was
    opened, which names the index)."""
    index = FooterIndex(Path(fetcher.cache.folder).parent / "footers")
    name = index_name(opened)
    known = index.load(name)
    out: dict[str, CheckedFooter] = {}
    missing: list[ObjectInfo] = []
    for url, size, tag in infos:
        entry = known.get(url)
        checked = None
        if entry is not None and tag and entry[0] == size and entry[1] == tag:
            try:
                checked = check_footer(url, entry[2], size)
            except CorruptFileError:
                checked = None
        if checked is None:
            missing.append((url, size, tag))
        else:
            out[url] = checked
    if missing:
        guess = max([guess, *(len(checked.footer) for checked in out.values())])
        for (url, _, _), checked in zip(missing, read_footers(fetcher, missing, threads, guess)):
            out[url] = checked
    keep: dict[str, Footer] = {
        url: (size, tag, out[url].footer) for url, size, tag in infos if tag
    }  # (untagged objects: read every time)
    if keep != known:
        index.save(name, keep)
    return out


# ------------------------------------------------------------------------------- a folder's summary


class Summary(NamedTuple):
    """A folder's ``_metadata`` that passed ``check_summary``: its URL, its footer's bytes (and the 8
    after them), its Arrow ``schema`` (every data file's, as the summary says), and each data file's
    claims and footer length by URL (``files``, in the order the summary names them)."""

    url: str
    footer: bytes
    schema: Any
    files: dict[str, SummaryFile]


class Summarized(NamedTuple):
    """What a folder's summary says of one data file, all a reader uses of it before that file's own
    footer is read: the summary's URL, each row group's rows (empty ones too), the Arrow schema, and
    about how long that footer is (with the 8 bytes after it: what its first read asks for)."""

    summary: str
    rows: tuple[int, ...]
    schema: Any
    footer: int


def check_summary(url: str, footer: bytes, size: int, folder: str) -> Summary:
    """A summary's footer (its bytes and the 8 after them) of the ``size``-byte object ``url`` at the
    root of ``folder``, checked as ``check_footer`` checks a footer (its length and magic, pyarrow's
    parse of it, its schema, its Hugging Face features valid JSON, its leaf columns), then its claims
    from its own bytes by data file (``files.parquetfooter.checked_summary``). Each data file's
    chunks' ends are not compared with its size here (``summary_differences`` does, against the
    listing). ``CorruptFileError`` naming ``url``."""
    footer, metadata, schema, leaves = _parsed(url, footer, size)
    by_path = checked_summary(url, footer[:-TAIL], leaves)
    groups, rows = sum(len(f.claims.rows) for f in by_path.values()), sum(sum(f.claims.rows) for f in by_path.values())
    if groups != metadata.num_row_groups or rows != metadata.num_rows:
        raise CorruptFileError(
            url, f"its footer holds {groups} row groups of {rows} rows, but pyarrow reads {metadata.num_row_groups} of {metadata.num_rows}"
        )  # fmt: skip
    return Summary(url, footer, schema, {join(folder.rstrip("/"), name): said for name, said in by_path.items()})


def read_summary(fetcher: Fetcher, info: ObjectInfo, folder: str) -> Summary:
    """The summary ``info`` of ``folder``, read whole (one ranged read) and checked (``check_summary``,
    and its first 4 bytes the magic): a summary that fails is read again, as ``Fetcher.read_checked``
    does, and the same failing bytes three times raise ``CorruptFileError`` naming it. A read that
    comes short asks the store for the summary's size (never the client's memory of the listing):
    one shorter than listed is ``ShardMismatchError`` at once, one removed ``MissingShardError``;
    only a cut transfer of the listed summary is retried within the budget."""
    url, size, _ = info
    if size < len(MAGIC) + TAIL:
        footer_bounds(url, size, b"", what="object")  # (too short: raises)
    if size > MAX_FOOTER + len(MAGIC) + TAIL:
        raise CorruptFileError(url, f"the object is {size} bytes, more than a summary's footer may be ({MAX_FOOTER} bytes)")
    fs, path = fetcher.store.filesystem(url)
    if hasattr(fs, "invalidate_cache"):
        fs.invalidate_cache(path)  # (the listing's sizes, which fsspec keeps: a short read's size check asks the store)

    def parse(reads: Any) -> Summary:
        data = bytes(reads.ranges([(0, size)])[0])
        start = footer_bounds(url, size, data[-TAIL:], data[: len(MAGIC)], what="object")
        return check_summary(url, data[start:], size, folder)

    try:
        return fetcher.read_checked(url, parse, "its Parquet summary")
    except RemoteReadError as exc:
        add_note(exc, "(reading the folder's _metadata summary, to open it)")
        raise


def opened_summary(fetcher: Fetcher, info: ObjectInfo, folder: str) -> Summary:
    """The summary ``info`` of ``folder``, checked: from the footer index where its size and tag are
    the ones recorded (and it passes ``check_summary``), else read (``read_summary``) and kept there."""
    url, size, tag = info
    index = FooterIndex(Path(fetcher.cache.folder).parent / "footers")
    name = index_name(url)
    entry = index.load(name).get(url)
    if entry is not None and tag and entry[0] == size and entry[1] == tag:
        try:
            return check_summary(url, entry[2], size, folder)
        except CorruptFileError:
            pass
    summary = read_summary(fetcher, info, folder)
    if tag:
        index.save(name, {url: (size, tag, summary.footer)})
    return summary


def summary_differences(summary: Summary, infos: list[ObjectInfo]) -> list[str]:
    """How ``summary`` and the folder's listing ``infos`` differ (empty when they agree): listed
    objects it does not name, files it names that are not listed, and files whose column chunks it
    places past the listed object's data. The listing is what exists."""
    listed = {url: size for url, size, _ in infos}
    unnamed = [url for url in listed if url not in summary.files]
    absent = [url for url in summary.files if url not in listed]
    out = []
    if unnamed:
        out.append(f"{len(unnamed)} listed object{'s' * (len(unnamed) > 1)} it does not name ({_few(unnamed)})")
    if absent:
        out.append(
            f"{len(absent)} file{'s' * (len(absent) > 1)} it names that {'are' if len(absent) > 1 else 'is'} not listed ({_few(absent)})"
        )
    past = []
    for url, said in summary.files.items():
        end = max((chunk.stop for group in said.claims.chunks for chunk in group if chunk.values), default=0)
        if url in listed and end > listed[url] - TAIL:
            past.append(f"{url}: bytes up to {end} of {listed[url]}")
    if past:
        out.append(f"{len(past)} file{'s' * (len(past) > 1)} whose column chunks it places past the object's data ({_few(past)})")
    return out


def _few(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def folder_summary(fetcher: Fetcher, folder: str, info: ObjectInfo, infos: list[ObjectInfo]) -> Summary | None:
    """The summary ``info`` of ``folder`` when it is checked and agrees with the listing ``infos``
    (``summary_differences``); else ``None``, with a warning naming the folder and what is wrong
    (the caller reads every footer instead). A summary that fails its checks three times
    (``CorruptFileError``), or that is removed (``MissingShardError``) or changed (``ShardMismatchError``:
    shorter than listed) between the listing and its read, is warned of too, not raised: every claim it
    makes is in the data files' own footers, which are read and checked instead, so falling back never
    reads other data, and the folder stays readable while its summary is written again. A store that
    fails for good is ``RemoteReadError`` naming the summary."""
    try:
        summary = opened_summary(fetcher, info, folder)
    except CorruptFileError as exc:
        warnings.warn(
            f"{folder}: its {SUMMARY} summary is damaged ({exc}); every data file's footer is read instead", stacklevel=3
        )
        return None
    except (MissingShardError, ShardMismatchError) as exc:
        warnings.warn(
            f"{folder}: its {SUMMARY} summary is stale, removed or changed since the folder was listed ({exc}); every data "
            "file's footer is read instead", stacklevel=3,
        )  # fmt: skip
        return None
    differences = summary_differences(summary, infos)
    if differences:
        warnings.warn(
            f"{folder}: its {SUMMARY} summary is stale, the listing differs: {'; '.join(differences)}; every data file's footer "
            "is read instead (write the summary again, or remove it)", stacklevel=3,
        )  # fmt: skip
        return None
    return summary


def summarized(summary: Summary, url: str) -> Summarized:
    """What ``summary`` says of its data file ``url``."""
    said = summary.files[url]
    return Summarized(summary.url, said.claims.rows, summary.schema, said.footer)


def object_footer(fetcher: Fetcher, info: ObjectInfo, guess: int = 0) -> CheckedFooter:
    """One object's checked footer, as ``opened_footers`` gives it for the object opened alone (the
    same index entry: read once per cache); ``guess``: about how long it is (one read, when it is no
    longer)."""
    return opened_footers(fetcher, [info], info[0], 1, guess)[info[0]]


def agree(url: str, checked: CheckedFooter, said: Summarized) -> None:
    """``ShardMismatchError`` naming the data file ``url`` when its own footer (``checked``) is not
    what the folder's summary said of it: its row groups' rows, its Arrow schema (field names, types
    and nullability, and the Hugging Face features its fields come from)."""
    rows, want = checked.claims.rows, said.rows
    why = ""
    if rows != want:
        if len(rows) != len(want):
            why = f"its footer holds {len(rows)} row groups of {sum(rows)} rows, the summary says {len(want)} of {sum(want)}"
        else:
            g = next(g for g in range(len(rows)) if rows[g] != want[g])
            why = f"its footer says row group {g} holds {rows[g]} rows, the summary {want[g]}"
    elif not checked.schema.equals(said.schema, check_metadata=False):
        mine, theirs = checked.schema, said.schema
        diff = next((f"{a} where it says {b}" for a, b in zip(mine, theirs) if not a.equals(b)), None)
        why = f"its columns are {diff}" if diff else f"its footer has {len(mine)} columns, the summary {len(theirs)}"
    elif (checked.schema.metadata or {}).get(b"huggingface") != (said.schema.metadata or {}).get(b"huggingface"):
        why = "its Hugging Face features are not the ones the summary holds"
    if why:
        raise ShardMismatchError(
            url, f"{why}: the folder's {SUMMARY} summary ({said.summary}) is stale (written before this file changed); "
            "write it again or remove it, then open the folder again"
        )  # fmt: skip
