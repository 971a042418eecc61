"""ss.pack at its edges: token ids that do not fit the output dtype are refused by name (never
wrapped into other, valid-looking ids), ids at the dtype's limits pass through, row indices need
not be contiguous, and the compiled gather refuses a row length whose buffer size overflows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import slipstream as ss
from slipstream.sequences.packplan import kernels

kernel, why = kernels()
needs_kernel = pytest.mark.skipif(kernel is None, reason=f"slipstream.sequences._packing: {why}")
PATHS = ["compiled", "reference"]


def packed_on(path: str, *args, **kwargs) -> ss.Packing:
    packed = ss.pack(*args, **kwargs)
    if path == "reference":
        packed._kernel, packed._gather = None, None
    elif kernel is None:
        pytest.skip(f"slipstream.sequences._packing: {why}")
    return packed


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["concat", "best_fit", "first_fit"])
@pytest.mark.parametrize(
    "stored, dtype, bad",
    [
        (np.uint32, "int32", 2**31),
        (np.uint32, "int32", 2**32 - 1),
        (np.int64, "int32", 2**32 + 5),  # would wrap to 5: a valid id
        (np.int64, "int32", -(2**31) - 1),
        (np.uint64, "int32", 2**31),
        (np.uint64, "int64", 2**63),
    ],
)
def test_a_token_id_that_does_not_fit_the_output_dtype_is_refused_naming_its_document(path, method, stored, dtype, bad):
    docs = [np.arange(5, dtype=stored), np.asarray([1, 2, bad, 3], stored), np.arange(3, dtype=stored)]
    packed = packed_on(path, docs, 16, method=method, seed=None, dtype=dtype)
    message = rf"document 1: token 2 is {bad}, which does not fit dtype {dtype}"
    with pytest.raises(ValueError, match=message):
        packed.getobs_batch_into({}, np.arange(len(packed)))
    with pytest.raises(ValueError, match=message):
        packed[0]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "stored, dtype",
    [(np.uint32, "int32"), (np.int64, "int32"), (np.uint64, "int32"), (np.uint64, "int64"), (np.int64, "int64")],
)
def test_token_ids_at_the_limits_of_the_output_dtype_pass_through(path, stored, dtype):
    info, kind = np.iinfo(dtype), np.iinfo(stored)
    edges = [max(info.min, kind.min), 0, 1, info.max - 1, min(info.max, kind.max)]
    docs = [np.asarray(edges, stored), np.asarray(edges[::-1], stored)]
    packed = packed_on(path, docs, 16, method="best_fit", seed=None, dtype=dtype)
    row = packed[0]
    assert row["tokens"][:10].tolist() == edges + edges[::-1]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["concat", "best_fit"])
def test_row_indices_need_not_be_contiguous(path, method):
    docs = [np.arange(n) for n in [5, 3, 9, 1, 0, 7, 12, 4]]
    packed = packed_on(path, docs, 8, method=method)
    everything = np.arange(len(packed), dtype=np.int64)
    strided, reverse = everything[::2], everything[::-1]
    assert not strided.flags.c_contiguous and not reverse.flags.c_contiguous
    for rows in (strided, reverse):
        got = packed.getobs_batch_into({}, rows)
        want = packed.getobs_batch_into({}, rows.copy())
        for name in packed.names:
            np.testing.assert_array_equal(got[name], want[name])


@needs_kernel
def test_the_compiled_gather_refuses_a_length_whose_buffers_would_overflow():
    script = textwrap.dedent(
        """
        import numpy as np
        from slipstream.sequences.packplan import kernels
        k, _ = kernels()
        values, offsets = np.arange(10, dtype=np.int64), np.asarray([0, 10], np.int64)
        table = (np.asarray([0, 1], np.int64), np.asarray([offsets.ctypes.data], np.uint64),
                 np.asarray([values.ctypes.data], np.uint64), np.asarray([10], np.int64))
        out = [np.zeros(0, np.int64) for _ in range(3)]  # 1 row * 2**61 * 8 bytes wraps to 0
        try:
            k.rows_concat(np.asarray([0], np.int64), *table, *out, np.zeros(4, np.int64),
                          np.asarray([0, 10], np.int64), np.zeros(0, np.int64), 2**61, 0, 5, 1, 1)
        except ValueError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"crashed ({done.returncode}): {done.stderr[-2000:]}"
    assert "refused:" in done.stdout and "too long" in done.stdout


@pytest.mark.parametrize("method", ["concat", "best_fit"])
@pytest.mark.parametrize("shards", [1, 2])
def test_a_packed_file_cut_in_place_under_a_packing_is_an_error_not_a_crash(tmp_path, method, shards):
    script = textwrap.dedent(
        f"""
        import numpy as np, slipstream as ss
        from slipstream import fields as F
        rng = np.random.default_rng(0)
        docs = [rng.integers(0, 60000, int(n)).astype(np.uint16) for n in rng.integers(1, 2000, 1500)]
        paths = [{str(tmp_path)!r} + f"/t{{k}}.ss" for k in range({shards})]
        for path in paths:
            ss.write(path, [{{"tokens": d}} for d in docs], fields={{"tokens": F.Tokens()}}, page_size=64 * 1024)
        packed = ss.pack(ss.open(paths if len(paths) > 1 else paths[0]), 256, method={method!r})
        packed.getobs_batch_into({{}}, np.arange(4))  # every page mapped
        with open(paths[-1], "r+b") as f:  # cut in place (not replaced by a rename, as ss.write does)
            f.truncate(f.seek(0, 2) // 4)
        try:
            packed.getobs_batch_into({{}}, np.arange(len(packed)))
        except Exception as exc:
            print("refused:", type(exc).__name__, exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"crashed ({done.returncode}): {done.stderr[-2000:]}"
    assert "refused: CorruptFileError" in done.stdout and "changed under the reader" in done.stdout, done.stdout
