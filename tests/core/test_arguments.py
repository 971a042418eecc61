"""core/arguments.py: one wording for each argument mistake."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.core.arguments import check_callable, check_flag, check_int, check_timeout


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
