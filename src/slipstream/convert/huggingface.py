"""``ss.to_huggingface``: a packed file (or a sharded folder) as a Hugging Face ``datasets.Dataset``, in one call, memory-mapped.

Each page of the file (of every shard, in order) becomes one chunk of an Arrow table whose columns point into the file's memory
map (only small offset buffers are made), wrapped in a ``datasets.Dataset`` with features declared from the file's field specs:
images as ``Image``, labels as ``ClassLabel`` when class names are known, JSON as ``Json`` (checked to decode to the stored value:
``datasets`` decodes it with pandas' ujson, which rounds floats, drops lone surrogates and refuses integers beyond 64 bits), arrays
as fixed lists or ``ArrayND``, token documents as ``List``; text, bytes, JSON and token offsets are checked first (``datasets`` trusts
them). ``datasets`` is imported only when called.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import CorruptFileError
from ..core.optional import require
from ..files.field import Field, checked_binary
from ..files.field import pyarrow_module as _pa
from ..files.field_tokens import checked_list
from ..files.folder import open_folder
from ..files.packed import PackedDataset
from ..files.shards import ShardedDataset
from ..images.encoded import codecs as _imaging
from .hfjson import check_json

__all__ = ["to_huggingface"]

_HF_ARRAYS = {2: "Array2D", 3: "Array3D", 4: "Array4D", 5: "Array5D"}
_VALUES = {"float": "float64", "bool": "bool", "text": "large_string", "bytes": "large_binary"}  # fields stored as a datasets Value

def _datasets() -> Any:
    return require("datasets", extra="hf", purpose="ss.to_huggingface needs Hugging Face datasets")


class _Converter:
    """How one field's column becomes a ``datasets`` column: ``array(page_array)`` per page, then ``feature()``."""

    def __init__(self, path: Path, name: str, field: Field, hf: Any, encode_raw: bool, names: Sequence[str] | None, json_as_text: bool = False):
        self.path, self.name, self.field, self.hf, self.encode_raw, self.names = path, name, field, hf, encode_raw, names
        self.json_as_text = json_as_text or not hasattr(hf, "Json")  # older datasets: the JSON text itself
        self.trailing: tuple[int, ...] | None = None  # ragged arrays: the dimensions after the first, when all agree

    def where(self) -> str:
        return f"{self.path}: field {self.name!r}"

    def array(self, array: Any, first: int) -> Any:
        method = getattr(self, f"_array_{self.field.kind}", None)
        if method is None:
            raise ValueError(f"{self.where()} is a {self.field!r} field, which ss.to_huggingface cannot express: leave it out with fields=[...]")
        return method(array, first)

    def feature(self) -> Any:
        kind = self.field.kind
        return self.hf.Value(_VALUES[kind]) if kind in _VALUES else getattr(self, f"_feature_{kind}")()

    # -- scalars, text, bytes, JSON ----------------------------------------------------------
    def _array_int(self, array: Any, first: int) -> Any:
        if self.names is not None and len(array):
            import pyarrow.compute as pc

            low, high = pc.min_max(array).values()
            if low.as_py() < -1 or high.as_py() >= len(self.names):  # -1: datasets' "no label"
                bad = low.as_py() if low.as_py() < -1 else high.as_py()
                raise ValueError(f"{self.where()} holds label {bad}, but class_names gives {len(self.names)} names (labels 0..{len(self.names) - 1}, or -1)")
        return array

    def _feature_int(self) -> Any:
        return self.hf.ClassLabel(names=list(self.names)) if self.names is not None else self.hf.Value("int64")

    def _array_float(self, array: Any, first: int) -> Any:
        return array

    _array_bool = _array_float

    def _array_text(self, array: Any, first: int) -> Any:  # as it is, once its offsets are checked (datasets trusts them)
        return checked_binary(array, self.path, f"field {self.name!r}, samples {first}..{first + len(array) - 1}")

    _array_bytes = _array_text

    def _array_tokens(self, array: Any, first: int) -> Any:  # list<int> as it is, once its offsets are checked (datasets trusts them)
        return checked_list(array, self.field.storage_dtype(), self.path, f"field {self.name!r}, samples {first}..{first + len(array) - 1}")  # type: ignore[attr-defined]

    def _array_json(self, array: Any, first: int) -> Any:
        pa, array = _pa(), self._array_text(array, first)
        if self.json_as_text:
            return array
        check_json(array, self.hf.Json().decode_example, lambda row: f"{self.where()}, sample {first + row}")
        return pa.ExtensionArray.from_storage(pa.json_(), array.cast(pa.string()))  # new offsets only; the text is shared

    def _feature_tokens(self) -> Any:
        return (self.hf.LargeList if self.field.large else self.hf.Sequence)(self.hf.Value(self.field.storage_dtype().name))  # type: ignore[attr-defined]

    def _feature_json(self) -> Any:
        return self.hf.Value("large_string") if self.json_as_text else self.hf.Json()

    # -- images --------------------------------------------------------------------------------
    def _array_image(self, array: Any, first: int) -> Any:
        pa = _pa()
        codes = array.field("codec").to_numpy(zero_copy_only=False)
        known = np.isin(codes, list(_imaging.CODECS.values()))
        if not known.all():
            row = int(np.argmin(known))
            raise CorruptFileError(self.path, f"sample {first + row}, field {self.name!r}: unknown image codec code {int(codes[row])}")
        data = array.field("data")
        raw = codes == _imaging.CODECS["raw"]
        if raw.any():
            if not self.encode_raw:
                row = int(np.argmax(raw))
                raise ValueError(
                    f"{self.where()} holds raw-pixel images (sample {first + row} is the first), which datasets' Image feature "
                    "cannot decode: pass encode_raw=True to encode them as PNG in memory as the dataset is built "
                    "(pages without raw images stay memory-mapped), or write the file with F.Image(codec='png' or 'jpeg')"
                )
            data = self._raw_as_png(array, raw)
        return pa.StructArray.from_arrays([data.cast(pa.binary()), pa.nulls(len(array), pa.string())], names=["bytes", "path"])

    def _raw_as_png(self, array: Any, raw: np.ndarray) -> Any:
        pa = _pa()
        column = self.field.column(array)
        values = [
            _imaging.encode("png", column.get(row), 0) if raw[row] else column.encoded(row).tobytes() for row in range(len(array))
        ]
        return pa.array(values, type=pa.large_binary())

    def _feature_image(self) -> Any:
        mode = {1: "L", 3: "RGB"}.get(getattr(self.field, "channels", None))  # F.Image(channels=...): what slipstream decodes to
        return self.hf.Image(mode=mode)

    # -- arrays --------------------------------------------------------------------------------
    def _dtype(self) -> str:
        dtype = np.dtype(self.field.dtype)  # type: ignore[attr-defined]
        if dtype.kind == "c":
            raise ValueError(f"{self.where()} holds {dtype} arrays; datasets has no complex type: leave it out with fields=[...]")
        return "bool" if dtype.kind == "b" else dtype.name

    def _values(self, flat: Any) -> Any:
        """Stored values as an Arrow array of the field's dtype (bools are stored as bytes: those are copied into bits)."""
        pa = _pa()
        if self._dtype() == "bool":
            return pa.array(flat.to_numpy(zero_copy_only=False).view(np.bool_))
        return flat

    def _array_array(self, array: Any, first: int) -> Any:
        pa = _pa()
        shape = self.field.shape  # type: ignore[attr-defined]
        if shape is None:
            return self._ragged(array, first)
        if len(shape) > 5:
            raise ValueError(f"{self.where()} holds {len(shape)}-d arrays; datasets' arrays have at most 5 dimensions")
        values = self._values(array.flatten())
        if len(shape) == 0:
            return values
        if len(shape) == 1:
            return pa.FixedSizeListArray.from_arrays(values, shape[0])
        return _nested(values, len(array), shape)

    def _ragged(self, array: Any, first: int) -> Any:
        pa = _pa()
        ndim = self.field.ndim  # type: ignore[attr-defined]
        dtype = np.dtype(self.field.dtype)  # type: ignore[attr-defined]
        self._dtype()
        if not 1 <= ndim <= 5:
            raise ValueError(f"{self.where()} holds ragged {ndim}-d arrays; datasets expresses ragged arrays of 1 to 5 dimensions")
        shapes = array.field("shape").flatten().to_numpy(zero_copy_only=False).reshape(len(array), ndim)
        if len(array):
            if self.trailing is None:
                self.trailing = tuple(int(s) for s in shapes[0, 1:])
            differs = (shapes[:, 1:] != np.asarray(self.trailing, np.int64)).any(axis=1)
            if differs.any():
                row = int(np.argmax(differs))
                raise ValueError(
                    f"{self.where()}: ragged arrays vary in more than their first dimension (sample {first + row} has shape "
                    f"{tuple(int(s) for s in shapes[row])}, an earlier one (n, {', '.join(map(str, self.trailing))})), "
                    "which datasets cannot express: leave it out with fields=[...]"
                )
        data = array.field("data")
        offsets = np.frombuffer(data.buffers()[1], np.int64)[data.offset : data.offset + len(data) + 1]
        if (np.diff(offsets) != shapes.prod(axis=1) * dtype.itemsize).any():
            raise CorruptFileError(self.path, f"field {self.name!r}: stored bytes do not match the stored shapes in samples {first}..{first + len(array) - 1}")
        start, stop = int(offsets[0]), int(offsets[-1])
        base = data.buffers()[2]
        storage = pa.uint8() if dtype.kind == "b" else pa.from_numpy_dtype(dtype)
        flat = pa.Array.from_buffers(storage, (stop - start) // dtype.itemsize, [None, base.slice(start, stop - start) if base is not None else pa.py_buffer(b"")])
        values = self._values(flat)
        firsts = np.zeros(len(array) + 1, np.int32)
        np.cumsum(shapes[:, 0], out=firsts[1:])
        inner = _nested(values, int(firsts[-1]), self.trailing or ())
        return pa.ListArray.from_arrays(pa.array(firsts), inner)

    def _feature_array(self) -> Any:
        shape = self.field.shape  # type: ignore[attr-defined]
        dtype = self._dtype()
        if shape is None:
            if self.field.ndim == 1:  # type: ignore[attr-defined]
                return self.hf.Sequence(self.hf.Value(dtype))
            return getattr(self.hf, _HF_ARRAYS[self.field.ndim])(shape=(None, *(self.trailing or (0,) * (self.field.ndim - 1))), dtype=dtype)  # type: ignore[attr-defined]
        if len(shape) == 0:
            return self.hf.Value(dtype)
        if len(shape) == 1:
            return self.hf.Sequence(self.hf.Value(dtype), length=shape[0])
        return getattr(self.hf, _HF_ARRAYS[len(shape)])(shape=tuple(shape), dtype=dtype)


def _nested(values: Any, count: int, shape: Sequence[int]) -> Any:
    """``count`` arrays of ``shape`` (C order) over the flat ``values`` as nested variable-size lists
    (the storage of datasets' ``ArrayND``), sharing ``values``: only offsets are made."""
    pa = _pa()
    nested = values
    for level in reversed(range(len(shape))):
        lists = count * math.prod(shape[:level])
        nested = pa.ListArray.from_arrays(pa.array(np.arange(lists + 1, dtype=np.int32) * shape[level]), nested)
    return nested


def _class_names(packed: Any, where: str, given: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """Class names per ``F.Int`` field: those the file records (``metadata["class_names"]``, as
    ``slipstream convert`` and ``ss.write(metadata=...)`` store them; entries that are not a list of
    str for an ``F.Int`` field read are ignored), overridden by ``given`` (checked: ``ValueError``)."""
    recorded = packed.metadata.get("class_names")
    names = {}
    for field, labels in (recorded if isinstance(recorded, dict) else {}).items():
        if field in packed.fields and packed.fields[field].kind == "int" and isinstance(labels, list) and all(isinstance(x, str) for x in labels):
            names[field] = list(labels)
    for field, labels in (given or {}).items():
        if field not in packed.fields:
            raise ValueError(f"{where}: class_names names field {field!r}, which is not read (fields: {list(packed.fields)})")
        if packed.fields[field].kind != "int":
            raise ValueError(f"{where}: class_names names field {field!r}, a {packed.fields[field]!r} field; class labels are F.Int fields")
        if isinstance(labels, str) or not all(isinstance(label, str) for label in labels):
            raise TypeError(f"class_names[{field!r}] must be a sequence of str, got {labels!r}")
        names[field] = list(labels)
    return names


class _Reopen:
    """Pickles a ``to_huggingface`` table as how to rebuild it (its files, fields and options), never as its data."""

    def __init__(self, paths: list[str], fields: list[str], names: dict[str, list[str]], raw: bool, stamps: list[Any], text: bool = False):
        self.args = (list(paths), fields, names, raw, [list(stamp) for stamp in stamps], text)

    def table(self) -> Any:
        paths, fields, class_names, encode_raw, stamps, json_as_text = self.args
        shards = [PackedDataset(path, fields=fields) for path in paths]
        for shard, path, stamp in zip(shards, paths, stamps):
            if list(shard.identity) != stamp:
                raise RuntimeError(f"{path}: the packed file changed since ss.to_huggingface opened it; open it again")
        return _build(shards, class_names, encode_raw, json_as_text)[0]


def _build(shards: list[PackedDataset], class_names: dict[str, list[str]], encode_raw: bool, json_as_text: bool = False) -> tuple[Any, Any]:
    """(Arrow table over the memory-mapped pages of every shard, in order, datasets Features) for the fields of ``shards``."""
    pa = _pa()
    hf = _datasets()
    first_shard = shards[0]
    converters = {
        name: _Converter(first_shard.path, name, field, hf, encode_raw, class_names.get(name), json_as_text) for name, field in first_shard.fields.items()
    }
    chunks: list[list[Any]] = [[] for _ in converters]
    offset = 0
    for shard in shards:
        reader = pa.ipc.open_file(pa.memory_map(str(shard.path)))
        columns = [reader.schema.get_field_index(name) for name in converters]
        starts = shard.page_starts()
        for converter in converters.values():
            converter.path = shard.path  # errors name the shard that holds the sample
        for p in range(reader.num_record_batches):
            batch = reader.get_batch(p)
            for k, (converter, column) in enumerate(zip(converters.values(), columns)):
                chunks[k].append(converter.array(batch.column(column), offset + int(starts[p])))
        offset += len(shard)
    features = hf.Features({name: converter.feature() for name, converter in converters.items()})
    schema = features.arrow_schema
    arrays = []
    for chunk_list, name in zip(chunks, converters):
        typ = schema.field(name).type
        if isinstance(typ, pa.ExtensionType):  # ArrayND: the nested lists are its storage
            chunk_list = [c if c.type == typ else pa.ExtensionArray.from_storage(typ, c) for c in chunk_list]
        arrays.append(pa.chunked_array(chunk_list, type=typ))
    return pa.Table.from_arrays(arrays, schema=schema), features


def _opened(source: Any, fields: Sequence[str] | None) -> tuple[Any, list[PackedDataset], str]:
    """(the dataset, its local shards in order, how errors name it) for ``to_huggingface``'s ``source``."""
    wanted = list(fields) if fields is not None else None
    if isinstance(source, (PackedDataset, ShardedDataset)):
        _check_local(source.shards if isinstance(source, ShardedDataset) else [source])
        if wanted is not None:  # the same files, those fields
            source = PackedDataset(source.path, fields=wanted) if isinstance(source, PackedDataset) else ShardedDataset([s.path for s in source.shards], fields=wanted)
        dataset = source
    elif isinstance(source, (str, os.PathLike)):
        if Path(source).is_dir():
            dataset = open_folder(Path(source), fields=wanted)  # each shard checked against index.json
        else:
            dataset = PackedDataset(source, fields=wanted)
    else:
        raise TypeError(f"ss.to_huggingface takes a packed file's path, a sharded dataset's folder or an ss.open dataset, got {type(source).__name__}")
    shards = dataset.shards if isinstance(dataset, ShardedDataset) else [dataset]
    where = str(shards[0].path) if isinstance(dataset, PackedDataset) else f"{shards[0].path.parent} ({len(shards)} shards)"
    return dataset, shards, where


def _check_local(shards: list[PackedDataset]) -> None:
    remote = [shard.path for shard in shards if shard.remote]
    if remote:
        raise ValueError(
            f"{remote[0]}: ss.to_huggingface memory-maps local packed files; this one is read from object storage: copy "
            "the file (or the folder) to a local disk and pass its path"
        )


def to_huggingface(
    source: str | os.PathLike | PackedDataset | ShardedDataset,
    *,
    fields: Sequence[str] | None = None,
    class_names: Mapping[str, Sequence[str]] | None = None,
    encode_raw: bool = False,
    json_as_text: bool = False,
) -> Any:
    """Open a packed file as a Hugging Face ``datasets.Dataset`` (needs ``pip install 'slipstream[hf]'``).

    ``source``: a path, a sharded dataset's folder (``ss.write(..., shard_size=...)``: its shards
    in order, each checked against ``index.json``), or an ``ss.open`` dataset of local files (its
    paths and fields). The dataset's columns are
    views of the file's memory map, one chunk per page: nothing is copied but offsets (raw images
    with ``encode_raw=True`` and bool arrays excepted), and pickling it (``map(num_proc=...)``,
    spawned workers) sends the path, not the data. Features, by field kind:

    * ``F.Image``: ``Image`` (``{"bytes", "path": None}`` of the stored JPEG/PNG/QOI bytes, decoded
      by Pillow; ``Image(mode="RGB")`` or ``"L"`` when the field was written with ``channels=``).
      Raw-pixel images raise ``ValueError`` unless ``encode_raw=True``, which encodes them to
      lossless PNG in memory while the dataset is built.
    * ``F.Int``: ``ClassLabel`` with ``class_names[field]``, else with the names the file records
      (``ss.open(path).metadata["class_names"][field]``, as ``slipstream convert`` stores them),
      else ``Value("int64")``; labels outside the names raise ``ValueError``. ``F.Float``, ``F.Bool``, ``F.Text``, ``F.Bytes``: ``Value`` of the
      column's type; ``F.JSON``: ``Json``, decoded to the value ``ss.open`` gives: ``datasets``
      decodes it with pandas' ujson, which rounds many floats (0.13436424411240122 reads as
      0.134364244112401), drops lone surrogates and refuses integers beyond 64 bits, so rows that
      hold those are decoded both ways as the dataset is built and one that differs raises
      ``ValueError`` naming it. ``json_as_text=True`` gives the JSON text instead
      (``Value("large_string")``: ``json.loads`` reads the exact value), as with a ``datasets``
      that has no ``Json`` feature.
    * ``F.Array``: ``Value`` (shape ``()``), ``Sequence(length=n)`` (1-d), ``Array2D``..``Array5D``; ragged arrays as
      ``Sequence`` (1-d) or ``ArrayND`` with a free first dimension when the other dimensions agree; others (and complex
      dtypes) raise ``ValueError`` naming the field: leave such fields out with ``fields=[...]``.
    * ``F.Tokens``: ``List(Value(dtype))`` (``LargeList`` when large).

    Bad files raise ``ss.open``'s errors (``ss.PackedFileError`` subclasses naming the path), damaged token offsets included.
    """
    dataset, shards, where = _opened(source, fields)
    hf = _datasets()
    names = _class_names(dataset, where, class_names)
    table, features = _build(shards, names, encode_raw, json_as_text)
    reopen = _Reopen([str(shard.path.resolve()) for shard in shards], list(dataset.fields), names, encode_raw, [shard.identity for shard in shards], json_as_text)
    fingerprint = _fingerprint(reopen)
    info = hf.DatasetInfo(description=f"slipstream packed file {where}", features=features)
    return hf.Dataset(_packed_table(table, reopen), info=info, fingerprint=fingerprint)


def _fingerprint(reopen: _Reopen) -> str:
    return hashlib.sha256(json.dumps(reopen.args, sort_keys=True).encode()).hexdigest()[:16]


_PACKED_TABLE: type | None = None


def _packed_table(table: Any, reopen: _Reopen) -> Any:
    """A ``datasets`` ``InMemoryTable`` whose buffers are the packed file's memory map, pickled as how
    to reopen it (a plain ``InMemoryTable`` pickles every byte). Tables that ``datasets`` derives from
    it (``cast``, ``rename_columns``...) are plain ones again."""
    global _PACKED_TABLE
    if _PACKED_TABLE is None:
        from datasets.table import InMemoryTable

        class PackedTable(InMemoryTable):
            def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
                return _reopened, (self.reopen, self.table.schema.metadata)

            def replace_schema_metadata(self, *args: Any, **kwargs: Any) -> Any:  # datasets stores its features there
                return _packed_table(self.table.replace_schema_metadata(*args, **kwargs), self.reopen)

        _PACKED_TABLE = PackedTable
    wrapped = _PACKED_TABLE(table)
    wrapped.reopen = reopen
    return wrapped


def _reopened(reopen: _Reopen, metadata: dict[bytes, bytes] | None) -> Any:
    return _packed_table(reopen.table().replace_schema_metadata(metadata), reopen)
