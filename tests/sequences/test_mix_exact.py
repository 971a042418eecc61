"""ss.mix: proportions within 1 item of the weights as given, not only as they are run: weights
whose common denominator is large (tiny weights, integers such as token counts, floats that do not
rationalize) and long linear ramps, at every prefix; and the edges of the arguments and of the state.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from helpers import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from mixcounts import running_counts, sequence, sources

import slipstream as ss
from slipstream.sequences import interleave
from slipstream.sequences.weights import normalized


def deviation_from_given(m, weights, n):
    """max over prefixes 1..n and sources of |count - k * w| for the given (normalized) weights."""
    exact = np.array([float(x) for x in normalized(weights, m.names)])
    counts = running_counts(sequence(m, n)[0], len(m.names))
    return float(np.abs(counts - np.arange(1, n + 1)[:, None] * exact).max())


def test_a_tiny_weight_is_run_as_given_not_rounded_up():
    weights = {"rare": 1e-9, "web": 1.0}
    m = ss.mix(sources([3, 3], ["rare", "web"]), weights, length=10**9)
    k = 3 * 2**22  # 2**-24 (the weight rounded) would have read it by here; 1e-9 reads it at k = 5e8
    assert m.counts(k)["rare"] == 0
    assert m.weights_at(0)["rare"] == pytest.approx(1e-9 / (1 + 1e-9), rel=1e-12)


def test_a_tiny_weight_sets_the_all_exhausted_length_as_given():
    total = 3 * 2**23  # past 2**24: the rare weight, 2/3 of 2**-24, was rounded to 2**-24
    m = ss.mix(sources([2, 3], ["rare", "web"]), {"rare": 1, "web": total - 1}, stop="all_exhausted")
    # the rare source's 2nd item is read where its target reaches 2 - 1/2: 1.5 * total positions, not 1.5 * 2**24
    assert abs(len(m) - 3 * total // 2) <= 1


def test_integer_weights_with_a_large_total_are_run_exactly():
    weights = {"web": 3_000_000_019, "code": 1_234_567_891, "math": 98_765_431}
    m = ss.mix(sources([5, 5, 5], list(weights)), weights, length=10**6)
    assert m._first.pieces.total == sum(weights.values())
    assert deviation_from_given(m, weights, 10**6) <= 0.75


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(1e-12, 1e6, allow_nan=False), min_size=2, max_size=9), st.integers(1, 60000))
def test_float_weights_are_within_the_bound_of_the_given_weights_at_every_prefix(values, n):
    names = [f"s{i}" for i in range(len(values))]
    weights = dict(zip(names, values))
    m = ss.mix(sources([4] * len(values), names), weights, length=n)
    bound = 1 - 1 / (2 * len(values) - 2)
    assert deviation_from_given(m, weights, n) <= bound + 1e-6


@pytest.mark.parametrize("span", [10**5, 10**6, 4 * 10**6])
def test_a_long_ramp_is_within_one_item_of_its_linear_integral_at_every_prefix(span):
    m = ss.mix(sources([5, 5], ["a", "b"]), [(0, {"a": 1, "b": 0}), (span, {"a": 0, "b": 1})], ramp=True, length=span + 10)
    counts = running_counts(sequence(m)[0], 2)[:, 1]
    u = np.arange(len(m), dtype=np.float64)
    linear = np.where(u < span, u * (u + 1) / (2 * span), (span - 1) / 2 + (u - span + 1))  # b's weight is u / span
    assert np.abs(counts - linear).max() <= 0.75 + 1e-6  # 1 - 1/(2n-2) = 1/2, plus at most 1/4 for the steps


def test_a_ramp_among_many_sources_is_within_one_item_of_its_linear_integral():
    names = [f"s{i}" for i in range(9)]
    start = {name: (9 if i == 0 else 1) for i, name in enumerate(names)}
    end = {name: (0 if i == 0 else 1) for i, name in enumerate(names)}
    span = 300_000
    m = ss.mix(sources([3] * 9, names), [(0, start), (span, end)], ramp=True, length=span)
    counts = running_counts(sequence(m)[0], 9)
    u = np.arange(span, dtype=np.float64)
    w0 = np.array([float(x) for x in normalized(start, names)])
    w1 = np.array([float(x) for x in normalized(end, names)])
    linear = (u + 1)[:, None] * w0 + (u * (u + 1) / (2 * span))[:, None] * (w1 - w0)
    assert np.abs(counts - linear).max() < 1


def test_constant_weights_with_a_small_common_denominator_still_repeat_with_their_period():
    m = ss.mix(sources([3, 3], ["a", "b"]), {"a": 0.7, "b": 0.3}, length=10**12)
    assert m._first.period == 10
    assert m.counts(10**12) == {"a": 7 * 10**11, "b": 3 * 10**11}


def test_an_out_of_range_negative_position_is_named_as_given():
    m = ss.mix(sources([3, 3], ["a", "b"]), {"a": 1, "b": 1}, length=10)
    with pytest.raises(IndexError, match="position -11 is out of range for a mixture of 10 items"):
        m[-11]


def test_a_state_whose_change_weights_are_not_a_mapping_is_refused():
    m = ss.mix(sources([3, 3], ["a", "b"]), {"a": 1, "b": 1}, length=10)
    state = m.state_dict()
    before = m.state_dict()
    with pytest.raises(ValueError, match="pending change must be a mapping"):
        m.load_state_dict({**state, "pending": [[0, {"a": 1, "b": 0}]]})
    with pytest.raises(ValueError, match="change 0 must be a mapping"):
        m.load_state_dict({**state, "changes": [[4, [[0, {"a": 1, "b": 0}]]]]})
    assert m.state_dict() == before


@pytest.mark.skipif(interleave._kernel is None, reason="the compiled kernel is not built")
def test_the_locate_kernel_refuses_empty_weights():
    ck = np.zeros((1, 2), np.int64)
    with pytest.raises(ValueError, match="w must hold"):
        interleave._kernel.locate(np.empty(0, np.int64), np.zeros(1, np.int64), 8, 2, 512, ck, ck, np.array([3], np.int64),
                                  np.empty(1, np.int32), np.empty(1, np.int64))


def test_fraction_weights_are_exact():
    m = ss.mix(sources([3, 3], ["a", "b"]), {"a": Fraction(1, 7), "b": Fraction(6, 7)}, length=70)
    assert m.counts(70) == {"a": 10, "b": 60}


def test_positions_past_2_61_are_refused_naming_the_bound():
    data = sources([3, 3], ["a", "b"])
    with pytest.raises(ValueError, match=r"position must be an int 0\.\.2\*\*61"):
        ss.mix(data, [(0, {"a": 1, "b": 1}), (2**63, {"a": 0, "b": 1})])
    m = ss.mix(data, {"a": 1, "b": 1}, length=10)
    m.set_weights({"a": 0, "b": 1})
    with pytest.raises(ValueError, match=r"a position 0\.\.2\*\*61"):
        m.settle_changes(2**64)
    assert m.state_dict()["pending"] == {"a": 0, "b": 1}
    with pytest.raises(ValueError, match=r"expected an int 0\.\.2\*\*61"):
        m.load_state_dict({**m.state_dict(), "changes": [[2**64, {"a": 0, "b": 1}]]})


def test_a_stop_rule_length_past_2_61_is_refused():
    class Huge:
        def __len__(self):
            return 2**62

        def __getitem__(self, i):
            return i

    with pytest.raises(ValueError, match=r"stop rule.*past 2\*\*61.*give length="):
        ss.mix({"a": Huge(), "b": Huge()}, {"a": 1, "b": 1}, stop="all_exhausted")


@pytest.mark.skipif(interleave._kernel is None, reason="the compiled kernel is not built")
def test_the_simulate_kernel_refuses_checkpoint_buffers_too_small_for_a_huge_run():
    # (u1 - u0) // every * n wraps past 2**63: the check must not, or the run writes past the buffers
    code = """
        import numpy as np
        from slipstream.sequences import _mixing as K
        w, lam, cnt, ck = np.full((1, 8), 2, np.int64), np.zeros(8, np.int64), np.zeros(8, np.int64), np.zeros(8, np.int64)
        try:
            K.simulate(w, np.zeros(1, np.int64), 16, 2, 0, 2**61, lam, cnt, np.empty(0, np.int32), np.empty(0, np.int64), 1, ck, ck.copy())
        except ValueError as exc:
            print("refused:", exc)
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and "refused: simulate: src and idx must be empty" in result.stdout, (result.returncode, result.stderr[-2000:])
