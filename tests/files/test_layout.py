"""files.layout: page byte ranges and page metadata read from a packed file's own bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream import fields as F
from slipstream.files import layout


def _file(tmp_path, n=50, page_size=2_000):
    samples = [{"label": k, "x": np.full(32, k, np.float32), "t": "t" * (k % 7)} for k in range(n)]
    path = ss.write(tmp_path / "a.arrow", samples, {"label": F.Int(), "x": F.Array("float32", (32,)), "t": F.Text()}, progress=False, page_size=page_size)
    return path.read_bytes()


def _footer(raw: bytes) -> bytes:
    n = layout.footer_length(raw[-layout.TAIL :])
    return raw[-layout.TAIL - n : -layout.TAIL]


def test_blocks_and_headers_match_what_arrow_reads(tmp_path):
    raw = _file(tmp_path)
    reader = pa.ipc.open_file(pa.py_buffer(raw))
    blocks = layout.page_blocks(_footer(raw))
    assert len(blocks) == reader.num_record_batches > 3
    for p, (offset, length, header) in enumerate(blocks):
        batch, meta = reader.get_batch_with_custom_metadata(p)
        parsed = pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(raw[offset : offset + length])), reader.schema)
        assert parsed.equals(batch)
        assert layout.header_metadata(raw[offset : offset + header]) == dict(meta)


def test_an_empty_file_has_no_pages(tmp_path):
    path = ss.write(tmp_path / "e.arrow", [], {"label": F.Int()}, progress=False)
    assert layout.page_blocks(_footer(path.read_bytes())) == []


def test_what_is_not_a_footer_is_a_value_error():
    with pytest.raises(ValueError, match="no Arrow footer"):
        layout.footer_length(b"0123456789")
    with pytest.raises(ValueError, match="not positive"):
        layout.footer_length(b"\x00\x00\x00\x00ARROW1")
    with pytest.raises(ValueError, match="cut short|says"):
        layout.header_metadata(b"\xff\xff\xff\xff\x40\x00\x00\x00abc")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_damaged_footers_raise_value_error_and_never_crash(tmp_path_factory, data):
    raw = _file(tmp_path_factory.mktemp("f"), n=20)
    footer = bytearray(_footer(raw))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(footer) - 1))
        footer[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(footer)))
    try:
        blocks = layout.page_blocks(bytes(footer[:cut]))
    except ValueError:
        return
    assert all(o >= 0 and length > h > 0 for o, length, h in blocks)
