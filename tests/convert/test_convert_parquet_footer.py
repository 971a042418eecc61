"""Converting a Parquet file whose footer is damaged: every single-byte flip of a footer gives a
``ConvertError`` (or ``CorruptFileError``) naming the file, or a packed file of the same values,
never a crashed interpreter; a footer whose column claims another physical type than its schema
(pyarrow's statistics accessor aborts the interpreter on it) is named with its row group. Each
runs in a child interpreter with a timeout, so a crash or a hang fails one test only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import run_python

TIMEOUT = 300  # a child interpreter's limit (the flips take about half a minute)
LEAVES = "from leafvalues import values\n"  # (the child finds the support folder)


def _source(path: Path) -> Path:
    table = pa.table({
        "label": pa.array([0, 1, 2, 0], pa.int64()),
        "text": ["a", "bé", "", "c"],
        "tokens": pa.array([[1], [], [2, 3], [4]], pa.list_(pa.int32())),
    })  # fmt: skip
    pq.write_table(table, path, row_group_size=2, write_page_checksum=True, store_schema=False)  # (statistics on every column)
    return path


def test_every_flipped_footer_byte_is_refused_naming_the_file_or_converts_the_same_values(tmp_path: Path) -> None:
    source = _source(tmp_path / "source.parquet")
    code = (
        """
import sys
from pathlib import Path
import slipstream as ss
from slipstream.convert.sources import convert
from slipstream.core.errors import ConvertError, CorruptFileError
"""
        + LEAVES
        + """
source, target, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
data = source.read_bytes()
start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
want = values(convert(source, out, force=True, progress=False)[0])
outcomes = {"refused": 0, "same": 0}
for pos in range(start, len(data)):
    flipped = bytearray(data)
    flipped[pos] ^= 0xFF
    target.write_bytes(flipped)
    try:
        written, _ = convert(target, out, force=True, progress=False)
    except (ConvertError, CorruptFileError) as exc:
        assert str(exc).startswith(f"{target}: "), (pos - start, repr(exc))
        outcomes["refused"] += 1
        continue
    got = values(written)
    assert got == want, (pos - start, got, want)
    outcomes["same"] += 1
print(outcomes)
"""
    )
    result = run_python(code, timeout=TIMEOUT, argv=[str(source), str(tmp_path / "flipped.parquet"), str(tmp_path / "out.arrow")])
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = eval(result.stdout.strip().splitlines()[-1])  # (a dict of two counts, printed by the child)
    footer = int.from_bytes(source.read_bytes()[-8:-4], "little") + 8
    assert outcomes["refused"] + outcomes["same"] == footer and outcomes["refused"] > 0 and outcomes["same"] > 0, outcomes


def test_a_column_of_another_physical_type_than_its_schema_is_named_with_its_row_group(tmp_path: Path) -> None:
    source = _source(tmp_path / "source.parquet")
    data = bytearray(source.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    # ColumnChunk's meta_data (field 3, a struct) opening with its type (field 1, an i32): INT64 (2,
    # zigzag 0x04), the label column's, made INT32 (0x02); the schema still says INT64
    at = data.index(b"\x1c\x15\x04", footer)
    data[at + 2] = 0x02
    forged = tmp_path / "forged.parquet"
    forged.write_bytes(bytes(data))
    code = """
        import json, sys
        from slipstream.convert.sources import convert
        from slipstream.core.errors import ConvertError, CorruptFileError
        try:
            convert(sys.argv[1], sys.argv[2], progress=False)
            print(json.dumps("converted"))
        except (ConvertError, CorruptFileError) as exc:
            print(json.dumps(str(exc)))
    """
    result = run_python(code, timeout=TIMEOUT, argv=[str(forged), str(tmp_path / "out.arrow")])
    assert result.returncode == 0, result.stderr[-3000:]  # (pyarrow's column statistics abort the interpreter here)
    message = json.loads(result.stdout)
    assert message.startswith(f"{forged}: row group 0 cannot be read") and "physical type" in message, message
