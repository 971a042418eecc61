"""Conversion sources for ``slipstream convert``: existing datasets as samples and fields for ``ss.write``.

``open_source(src)`` recognizes:

* a class-per-folder image tree ``root/<class>/<images>`` (``ss.imagefolder``): fields ``image``
  (``F.Image``, JPEG by default; JPEG files that need no resize are stored unchanged), ``label``
  (``F.Int``, the class index in sorted folder-name order, the names stored as
  ``metadata["class_names"]["label"]``) and ``path`` (``F.Text``, the file's path relative to
  ``root`` with ``/`` separators); an image that fails to encode is named by its file;
* a ``.npy`` file: one field ``data``; a ``.npz`` file: one field per key (equal lengths on
  axis 0). Arrays of 2 or more dimensions become ``F.Array`` of their per-sample shape and dtype;
  1-d arrays become ``F.Int`` / ``F.Float`` / ``F.Bool`` (``F.Text`` / ``F.Bytes`` for string
  dtypes). Arrays are memory-mapped (``.npz`` members too, when stored uncompressed);
* a ``.parquet`` file, read batch by batch (memory stays bounded): one field per column, by its
  Arrow type (integer, floating, bool, string, binary or image bytes, a list of integers as
  ``F.Tokens`` of its integer type, other lists and structs as JSON); a
  folder of ``.parquet`` files (and no sub-folders) is one dataset of their rows, the files in
  sorted name order, all with the same columns;
* a Hugging Face dataset saved with ``save_to_disk`` (a folder with ``dataset_info.json`` and/or
  ``state.json`` and ``data-*.arrow`` Arrow IPC stream files), read with pyarrow alone: the
  ``features`` choose the fields (``Image`` -> ``F.Image``, ``ClassLabel`` -> ``F.Int`` with its
  names stored as ``metadata["class_names"][column]``,
  ``Value`` -> a scalar or ``F.Text``, ``Array2D``..``Array5D`` -> ``F.Array``, ``Sequence`` /
  ``List`` of an integer ``Value`` -> ``F.Tokens``), the Arrow types otherwise.

Packed files hold no nulls: a null value raises ``ConvertError`` naming the column and row.
``convert(src, out, ...)`` opens the source and writes it with ``ss.write``; with the default
``codec="jpeg"``, images that are not JPEG already (PNG, BMP, TIFF, raw pixels...) are re-encoded
as JPEG, which is lossy: ``Source.cautions`` says so (``slipstream convert`` prints it), and
``codec="png"`` keeps them lossless. ``on_error="skip"`` writes every sample that reads and
encodes and lists the others in the metadata (``write.failures``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from ..files import field_kinds as F
from ..images.encoded.codecs import sniff
from ..write.writelock import LOCK
from ..write.writer import write
from .arrays import npy_source, npz_source
from .imagefolder import EXTENSIONS, imagefolder
from .source import SUPPORTED, ConvertError, Source
from .tables import huggingface_source, parquet_source

__all__ = ["SUPPORTED", "ConvertError", "Source", "convert", "open_source"]

# -- detection -------------------------------------------------------------------------------------
def open_source(src: str | os.PathLike, image: F.Image | None = None, folder_channels: int | None = 3) -> Source:
    """The samples and fields of ``src`` (see the module doc). ``image`` is the field used for image
    columns (default ``F.Image(codec="jpeg")``); each image column gets its own copy. An image
    folder's images are stored with ``folder_channels`` (RGB by default, as torchvision's
    ImageFolder gives them) instead of ``image.channels``."""
    path = Path(src)
    image = F.Image(codec="jpeg") if image is None else image
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            splits = sorted(e.name for e in os.scandir(path) if e.is_dir() and not e.name.startswith("."))
            raise ConvertError(
                f"{path}: a Hugging Face DatasetDict (splits {splits}); convert one split at a time, "
                f"e.g. {path / (splits[0] if splits else 'train')}"
            )
        if (path / "dataset_info.json").is_file() or (path / "state.json").is_file() or any(path.glob("data-*.arrow")):
            return huggingface_source(path, image)
        has_subfolders = any(e.is_dir() and not e.name.startswith(".") for e in os.scandir(path))
        parquets = sorted(f for f in path.iterdir() if f.suffix.lower() in (".parquet", ".pq") and f.is_file() and not f.name.startswith("."))
        if parquets and not has_subfolders:
            return parquet_source(path, image, parquets)
        if not has_subfolders:
            raise ConvertError(f"{path}: a folder with no class sub-folders and no Hugging Face dataset files; can convert {SUPPORTED}")
        folder_image = copy.deepcopy(image)
        folder_image.channels = folder_channels
        return _imagefolder(path, folder_image)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return npy_source(path)
    if suffix == ".npz":
        return npz_source(path)
    if suffix in (".parquet", ".pq"):
        return parquet_source(path, image)
    raise ConvertError(f"{path}: cannot convert a {suffix or 'suffix-less'} file; can convert {SUPPORTED}")


def convert(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    codec: str = "jpeg",
    quality: int = 90,
    max_side: int | None = None,
    min_side: int | None = None,
    policy: str | None = None,
    channels: int | str | None = "auto",
    workers: int | None = None,
    progress: bool | None = None,
    page_size: int = 8 << 20,
    force: bool = False,
    metadata: dict[str, Any] | None = None,
    shard_size: int | str | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    on_error: str = "raise",
) -> tuple[Path, Source]:
    """Convert ``src`` into the packed file ``out``; the image settings apply to every image field.
    Returns the written path and the source.

    ``channels``: 3 stores every image as RGB, 1 as grayscale, None as each image is (batching mixed
    ones then needs ``ops.ToRGB()``). The default, "auto", is 3 for an image folder (as torchvision's
    ImageFolder converts: ImageNet's few grayscale and CMYK files would otherwise fail a batch
    partway) and None for datasets whose images are typed already (Parquet, Hugging Face: MNIST
    stays grayscale).

    ``out`` is checked before anything is encoded: it must not be a folder or the source, its folder
    must exist, and an existing file there is replaced only with ``force`` (``FileExistsError``
    otherwise). The file stores the source's class names (an image folder's classes, Hugging Face
    ``ClassLabel`` names) as ``metadata["class_names"] = {field: [names]}``, updated with
    ``metadata`` (your own JSON dict); read them back as ``ss.open(out).metadata``. An error while
    encoding names the sample's file when the source has one.

    ``shard_size`` (bytes or a string such as ``"1GB"``) writes ``out`` as a sharded folder
    (``ss.write(..., shard_size=...)``); it must not exist yet, or be an empty folder (``force``
    never deletes a folder). ``engine`` ("processes" or "ray", with ``shard_size``) writes the
    shards in local processes or Ray tasks, ``workers`` then being the processes (tasks in
    flight); ``ray_address`` names a Ray cluster (see ``ss.write``). The shards are the same,
    byte for byte, whatever the engine.

    ``on_error="skip"`` leaves out the samples that fail to read or encode (a damaged image) and
    writes the others, in order; ``ss.open(out).metadata["skipped"]`` lists each one left out
    (``{"sample", "origin", "field", "error"}``; ``[]`` when none), and a ``SkippedSamplesWarning``
    says how many. The default, "raise", stops at the first, naming its file.
    """
    out = _check_target(Path(src), Path(out), force) if shard_size is None else _check_folder_target(Path(src), Path(out))
    if channels not in ("auto", None, 1, 3) or isinstance(channels, bool):
        raise ValueError(f"channels must be 'auto', None, 1 or 3, got {channels!r}")
    typed = None if channels == "auto" else channels
    image = F.Image(codec=codec, quality=quality, max_side=max_side, min_side=min_side, policy=policy, channels=typed)
    source = open_source(src, image, folder_channels=3 if channels == "auto" else typed)
    source.cautions.extend(_lossy(source, codec, quality))
    stored = {**source.metadata, **(metadata or {})}
    path = write(
        out, source.data, source.fields, workers=workers, progress=progress, page_size=page_size, metadata=stored, shard_size=shard_size,
        engine=engine, ray_address=ray_address, on_error=on_error,
    )  # fmt: skip
    return path, source


def _lossy(source: Source, codec: str, quality: int) -> list[str]:
    """What the JPEG codec does to images that are not JPEG already: an image folder's files by
    their names, a table's image columns by their first image."""
    if codec != "jpeg" or not any(isinstance(f, F.Image) for f in source.fields.values()):
        return []
    how = f"stored as JPEG (quality {quality}), which is lossy: --codec png (codec='png') keeps them lossless"
    if isinstance(source.data, _FolderSamples):
        others = [path for path, _ in source.data.folder.samples if not path.lower().endswith((".jpg", ".jpeg"))]
        if not others:
            return []
        kinds = sorted({Path(path).suffix.lower().lstrip(".").upper() or "?" for path in others})
        return [f"{len(others)} of {len(source.data.folder)} images are not JPEG files ({', '.join(kinds)}): {how}"]
    notes = []
    for column in getattr(source.data, "columns", []):
        if isinstance(column.field, F.Image):
            kind = _first_kind(source.data, column)
            if kind != "jpeg":
                notes.append(f"image column {column.name!r} holds {kind.upper() if kind else 'non-JPEG'} images (its first row): {how}")
    return notes


def _first_kind(rows: Any, column: Any) -> str | None:
    """The codec of a table's first image in ``column`` (None when it cannot say)."""
    try:
        for part in rows.parts[:1]:
            for batch in part.batches():
                if batch.num_rows:
                    value = column.values(batch.column(column.name).slice(0, 1), 0)[0]
                    return sniff(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
    except Exception:  # noqa: BLE001 - a caution must not stop the conversion: reading it fails it clearly
        return None
    return None


def _check_folder_target(src: Path, out: Path) -> Path:
    """``out`` when a sharded folder may be written there (new, or an empty folder), else why not."""
    if src.exists() and out.exists() and (out.resolve() == src.resolve() or src.resolve() in out.resolve().parents):
        raise ConvertError(f"{out}: the output would be inside or over the source")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out}: the output's folder {out.parent} does not exist; create it first")
    if out.exists() and (not out.is_dir() or any(entry.name != LOCK for entry in out.iterdir())):  # (a killed writer's lock: empty)
        raise FileExistsError(f"{out}: exists and is not an empty folder; a sharded output needs a new or empty folder (remove it to rewrite)")
    return out


def _check_target(src: Path, out: Path, force: bool) -> Path:
    """``out`` when a packed file may be written there, else the error saying why (before any work)."""
    if out.is_dir():
        raise IsADirectoryError(f"{out}: the output is a folder; give a file path such as {out / 'data.arrow'}")
    if src.exists() and out.exists() and out.resolve() == src.resolve():
        raise ConvertError(f"{out}: the output would overwrite the source")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"{out}: the output's folder {out.parent} does not exist; create it first")
    if out.exists() and not force:
        raise FileExistsError(f"{out}: the output exists; pass --force (force=True) to replace it, or choose another path")
    return out


# -- image folders ---------------------------------------------------------------------------------
class _FolderSamples:
    """``ss.imagefolder`` samples with the path made relative to the root (portable, and it names the class)."""

    def __init__(self, folder: Any):
        self.folder = folder

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = self.folder[index]
        sample["path"] = Path(sample["path"]).relative_to(self.folder.root).as_posix()
        return sample

    def sample_origin(self, index: int) -> str:
        return self.folder.sample_origin(index)


def _imagefolder(path: Path, image: F.Image) -> Source:
    folder = imagefolder(path.absolute())  # its files found from any working directory (a Ray worker's); paths stored relative to it
    if len(folder) == 0:
        raise ConvertError(f"{path}: class folders {folder.classes} hold no image files (looked for {', '.join(EXTENSIONS)})")
    fields = {"image": image, "label": F.Int(), "path": F.Text()}
    note = f"{len(folder)} images in {len(folder.classes)} classes"
    metadata = {"class_names": {"label": list(folder.classes)}}
    return Source("image folder", path, _FolderSamples(folder), fields, [note], metadata)
