"""core.sizes: byte sizes written as people write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.core.sizes import parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1GB", 10**9), ("20 gb", 20 * 10**9), ("512MiB", 512 * 2**20), ("1.5kB", 1500), ("7", 7), ("3b", 3), ("2TiB", 2 * 2**40)],
)
def test_units(text, expected):
    assert parse_size(text) == expected


@given(st.integers(0, 2**62))
def test_integers_are_bytes(n):
    assert parse_size(n) == parse_size(str(n)) == n


@pytest.mark.parametrize("bad", ["", "GB", "1 parsec", "-1GB", "1e9"])
def test_what_is_not_a_size_names_the_setting(bad):
    with pytest.raises(ValueError, match="cache_limit must be"):
        parse_size(bad, "cache_limit")


def test_wrong_types_and_negative_numbers():
    assert parse_size(20e9) == 20 * 10**9
    with pytest.raises(ValueError, match="shard_size must be a whole number"):
        parse_size(1.5, "shard_size")
    with pytest.raises(TypeError, match="shard_size"):
        parse_size([1], "shard_size")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        parse_size(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        parse_size(-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1G", 10**9), ("1g", 10**9), ("8M", 8 * 10**6), ("3k", 3000), ("2T", 2 * 10**12), ("1Gi", 2**30), ("8Mi", 8 << 20), ("3ki", 3 << 10)],
)
def test_a_bare_unit_letter_means_its_unit_in_bytes(text, expected):
    """``G`` is ``GB`` (10**9) and ``Gi`` is ``GiB`` (2**30): the same letter never means two sizes."""
    assert parse_size(text) == expected


def test_the_command_line_reads_sizes_as_the_api_does():
    import argparse

    from slipstream.cli.main import _size

    for text in ("1G", "1GB", "512MiB", "8M", "3k", "3KiB", "1000"):
        assert _size(text) == parse_size(text), text
    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive byte count"):
        _size("0")
    with pytest.raises(argparse.ArgumentTypeError, match="such as"):
        _size("lots")
