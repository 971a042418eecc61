"""core/arguments.py: one wording for each argument mistake."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.core.arguments import check_callable, check_flag, check_int, check_timeout, check_workers


@given(st.integers(-5, 5), st.integers(0, 2))
def test_check_int_accepts_exactly_the_integers_at_or_above_the_minimum(value, minimum):
    if value >= minimum:
        assert check_int("k", value, minimum) == value and type(check_int("k", np.int64(value), minimum)) is int
    else:
        with pytest.raises(ValueError, match=f"k must be an integer >= {minimum}, got {value}"):
            check_int("k", value, minimum)


@pytest.mark.parametrize("value", [True, 1.0, "1", None])
def test_check_int_refuses_what_is_not_an_integer(value):
    with pytest.raises(TypeError, match="k must be an integer"):
        check_int("k", value, 0)


def test_flags_callables_and_timeouts():
    assert check_flag("f", np.bool_(True)) is True
    with pytest.raises(TypeError, match="f must be True or False, got 1"):
        check_flag("f", 1)
    assert check_callable("fn", None) is None and check_callable("fn", len) is len
    with pytest.raises(TypeError, match="fn must be a callable or None, got int"):
        check_callable("fn", 3)
    assert check_timeout(None) is None and check_timeout(0.5) == 0.5
    for bad in (0, -1, True, "1"):
        with pytest.raises(ValueError, match="timeout must be None or a number of seconds > 0"):
            check_timeout(bad)


def test_check_workers_is_one_rule_whose_arguments_say_what_none_and_auto_mean(monkeypatch):
    monkeypatch.setattr("slipstream.core.arguments.usable_cores", lambda: 6)
    # the loader's and loadparallel's: an integer >= 0 or "auto"
    assert check_workers(0) == 0 and check_workers("auto") == 6 and type(check_workers(np.int64(3))) is int
    with pytest.raises(ValueError, match=r"^workers must be an integer >= 0, got -1$"):
        check_workers(-1)
    with pytest.raises(TypeError, match=r"^workers must be an integer >= 0 or 'auto', got NoneType None$"):
        check_workers(None)
    # the write engines': a positive number, or None for the engine's default; no "auto"
    engine = {"minimum": 1, "auto": False, "default": "every usable core", "unit": "processes"}
    assert check_workers(None, **engine) is None and check_workers(np.int32(2), **engine) == 2
    with pytest.raises(ValueError, match=r"^workers must be a positive number of processes, got 0$"):
        check_workers(0, **engine)
    for bad in ("auto", True, 2.0):
        message = rf"^workers must be a positive number of processes \(or None: every usable core\), got {type(bad).__name__} "
        with pytest.raises(TypeError, match=message):
            check_workers(bad, **engine)
    with pytest.raises(ValueError, match=r"^workers must be an integer >= 0 or 'auto', got 'many'$"):
        check_workers("many")
