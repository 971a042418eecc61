"""The flat public namespace (``slipstream.__all__``): sorted, every name exported, documented and
type-hinted, and the names of the contract all there."""

import inspect

import slipstream as ss


def test_all_is_sorted_and_every_name_is_exported():
    assert ss.__all__ == sorted(ss.__all__)
    for name in ss.__all__:
        assert hasattr(ss, name), name


def test_public_names_have_docstrings_and_type_hints():
    for name in ss.__all__:
        obj = getattr(ss, name)
        assert inspect.getdoc(obj), f"{name} has no docstring"
        if inspect.isfunction(obj):
            hints = inspect.signature(obj).parameters
            assert all(p.annotation is not inspect.Parameter.empty for p in hints.values()), f"{name} lacks type hints"


def test_the_contract_names_are_all_there():
    expected = {"numobs", "getobs", "getobs_into", "obsview", "batchview", "mapobs", "shuffleobs", "splitobs",
                "joinobs", "DataLoader", "loadparallel", "sample_rng"}
    assert expected <= set(ss.__all__)
