"""``slipstream inspect`` and ``slipstream validate``: what a packed file (or folder, or URL) holds, and
whether every page matches its checksum. Paths are printed with any credentials redacted."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..core.errors import PackedFileError
from ..core.redact import redact
from ..files.shards import ShardedDataset
from ..remote.open import open as open_any

__all__ = ["fail", "human", "inspect", "validate"]


def fail(command: str, exc: BaseException) -> int:
    """Print ``exc`` on one line (with its notes: where it happened) for ``slipstream COMMAND``; return 2."""
    notes = " ".join(f"({note})" for note in getattr(exc, "__notes__", ()) if not note.startswith("(in a Ray task"))
    message = " ".join(f"{exc} {notes}".split()) or type(exc).__name__  # one line, with where it happened (the notes)
    print(f"slipstream {command}: {message}", file=sys.stderr)
    return 2


def human(n: float) -> str:
    """``n`` bytes in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _settings(field: Any) -> str:
    params = field.params()
    if field.kind == "image":
        if params.get("policy") != "smart":
            params.pop("threshold", None)
        if params.get("policy") != "proportion":
            params.pop("proportion", None)
            params.pop("seed", None)
        if params.get("codec") != "jpeg":
            params.pop("quality", None)
    if field.kind == "array" and params.get("shape") is not None:
        params.pop("ndim", None)
    shown = [f"{k}={v}" for k, v in params.items() if v is not None]
    return " ".join(shown) or "-"


def validate(files: list[str], pa: Any) -> int:
    """``slipstream validate``: one line per file (stdout when it is intact, stderr naming the bad
    page otherwise); 2 when any file fails."""
    failed = 0
    for file in files:
        try:
            ds = open_any(file)
            ds.validate()
        except (PackedFileError, OSError, ValueError, pa.ArrowException) as exc:
            failed += 1
            fail("validate", exc)
            continue
        shards = f" in {len(ds.shards)} shards" if isinstance(ds, ShardedDataset) else ""
        pages = f"{ds.num_pages} page{'' if ds.num_pages == 1 else 's'}"
        print(f"{redact(file)}: ok, {len(ds)} samples, {pages}{shards}, every page matches its checksum", flush=True)
    return 2 if failed else 0


def inspect(file: str, validate: bool, pa: Any) -> int:
    try:
        ds = open_any(file)
        shards = ds.shards if isinstance(ds, ShardedDataset) else [ds]
        names = list(ds.fields)
        stored = dict.fromkeys(names, 0)
        images = {n: {"codes": [], "heights": [], "widths": []} for n, f in ds.fields.items() if f.kind == "image"}
        for shard in shards:
            for name, nbytes in shard.stored_bytes().items():
                stored[name] += nbytes
            for p in range(shard.num_pages) if images else ():
                columns = shard.page(p)
                for name, acc in images.items():
                    column = columns[name]
                    acc["codes"].append(np.asarray(column.codes))
                    acc["heights"].append(np.asarray(column.heights))
                    acc["widths"].append(np.asarray(column.widths))
        if validate:
            ds.validate()
    except (PackedFileError, OSError, ValueError, pa.ArrowException) as exc:
        return fail("inspect", exc)

    n = len(ds)
    size = sum(shard.file_size for shard in shards)
    per = (lambda b: human(b / n)) if n else (lambda b: "-")
    meta = shards[0].format_metadata
    out = [
        f"file      {redact(file)}" + (f" ({len(shards)} shards)" if isinstance(ds, ShardedDataset) else ""),
        f"format    {meta.get('format')} version {meta.get('version')}, pages of about {human(meta.get('page_size', 0))}",
        f"samples   {n}",
        f"pages     {ds.num_pages}",
        f"size      {human(size)} ({size} bytes), {per(size)} per sample",
        "",
    ]
    rows = [("field", "kind", "settings", "stored", "per sample")]
    for name, field in ds.fields.items():
        rows.append((name, field.kind, _settings(field), human(stored[name]), per(stored[name])))
    rows.append(("(all)", "", "", human(sum(stored.values())), per(sum(stored.values()))))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    out += ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    codec_names = {code: codec for codec, code in meta.get("codecs", {}).items()}
    for name, acc in images.items():
        codes = np.concatenate(acc["codes"]) if acc["codes"] else np.zeros(0, np.int8)
        if not len(codes):
            out.append(f"image field {name!r}: no samples")
            continue
        values, counts = np.unique(codes, return_counts=True)
        mix = ", ".join(f"{codec_names.get(int(v), f'code {int(v)}')} {c} ({100 * c / len(codes):.1f}%)" for v, c in zip(values, counts))
        heights, widths_ = np.concatenate(acc["heights"]), np.concatenate(acc["widths"])
        out.append("")
        out.append(f"image field {name!r}: codecs {mix}")
        out.append(
            f"  mean height {heights.mean():.1f}, mean width {widths_.mean():.1f} "
            f"(height {heights.min()}..{heights.max()}, width {widths_.min()}..{widths_.max()})"
        )
    if validate:
        out.append("")
        out.append(f"checksums ok ({ds.num_pages} page{'' if ds.num_pages == 1 else 's'})")
    print("\n".join(out))
    return 0
