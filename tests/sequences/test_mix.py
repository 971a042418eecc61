"""ss.mix: exact proportions at every prefix, per-pass permutations, the compiled kernels against
their references, items and their sources, state, pickling and bad input.

The bound checked everywhere is the interleave's: over positions 0..k-1 each source's count is
within 1 - 1/(2n - 2) of the sum of its weights (1/2 for two sources), exactly as the weights are run
(``mix.weights_at``); weights given as short decimals or integers are run exactly.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mixcounts import running_counts, sequence, sources, worst_deviation

import slipstream as ss
from slipstream.sequences import interleave, permute
from slipstream.sequences.weights import canonical_schedule, normalized, pieces_of

NAMES3 = ("web", "code", "math")


weights_strategy = st.lists(
    st.one_of(st.integers(0, 1000), st.floats(0, 1, allow_nan=False), st.sampled_from([0.0, 1e-4, 0.3, 1 / 3])),
    min_size=2, max_size=8,
).filter(lambda w: sum(w) > 0)


@settings(max_examples=60, deadline=None)
@given(weights_strategy, st.integers(1, 2500))
def test_counts_are_within_the_bound_of_the_weights_at_every_prefix(weights, n):
    names = [f"s{i}" for i in range(len(weights))]
    m = ss.mix(sources([5] * len(weights), names), dict(zip(names, weights)), length=n)
    worst, bound = worst_deviation(m, n)
    assert worst <= bound <= 1 - 1 / (2 * len(weights) - 2) + 1e-12
    for i, w in enumerate(weights):  # a weight of 0 is never chosen
        if w == 0:
            assert m.counts(n)[names[i]] == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(lambda w: sum(w) > 0), st.integers(1, 3000))
def test_three_decimal_weights_are_run_exactly_and_every_prefix_is_within_one_item(digits, n):
    weights = dict(zip(NAMES3, [d / 10 for d in digits]))
    m = ss.mix(sources([7, 7, 7], NAMES3), weights, length=n)
    total = sum(Fraction(d, 10) for d in digits)
    src, _ = sequence(m)
    counts = running_counts(src, 3)
    k = np.arange(1, n + 1)[:, None]
    exact = np.array([float(Fraction(d, 10) / total) for d in digits])
    assert np.abs(counts - k * exact).max() < 0.75 + 1e-9  # 1 - 1/(2*3 - 2)
    assert m.weights_at(n - 1) == pytest.approx({name: float(Fraction(d, 10) / total) for name, d in zip(NAMES3, digits)})


def test_weights_that_need_rounding_are_within_the_bound_of_the_rounded_weights_and_near_the_given_ones():
    weights = {"web": 0.7071067811865476, "code": 0.5772156649015329, "math": 0.6931471805599453}  # a total past 2**54
    m = ss.mix(sources([3, 3, 3], NAMES3), weights, length=20000)
    assert m._first.pieces.total == 2**54  # the largest power of two with 4 * total <= 2**56
    worst, bound = worst_deviation(m, 20000)
    assert worst <= bound
    src, _ = sequence(m)
    exact = np.array([float(w) for w in normalized(weights, NAMES3)])
    assert np.abs(running_counts(src, 3) - np.arange(1, 20001)[:, None] * exact).max() <= bound + 1e-9


def test_constant_weights_repeat_with_their_period_and_far_positions_match_a_straight_run():
    m = ss.mix(sources([10, 10, 10], NAMES3), {"web": 0.5, "code": 0.3, "math": 0.2}, length=10**12)
    src, _count = m._locate(np.array([10**11 + 7, 10**11 + 8], np.int64))
    near, _ = m._locate(np.array([7, 8], np.int64))
    assert (src == near).all()  # period 10
    assert m.counts(10**11) == {"web": 5 * 10**10, "code": 3 * 10**10, "math": 2 * 10**10}


# -- the permutations ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 2**64 - 1))
def test_a_permutation_is_a_bijection_and_the_kernel_equals_the_reference(n, key):
    x = np.arange(n)
    ref = permute.permute_reference(x, n, key)
    assert sorted(ref.tolist()) == list(range(n))
    assert (permute.permute(x, n, key) == ref).all()


def test_large_domains_and_the_kernel_equals_the_reference():
    n = np.array([2**62 + 12345, 2**40 - 1, 2**33 + 1, 5, 1], np.int64)
    x = np.array([2**62, 2**40 - 2, 2**33, 4, 0], np.int64)
    keys = np.arange(5, dtype=np.uint64) * np.uint64(977)
    ref = permute.permute_reference(x, n, keys)
    assert (ref < n).all() and (ref >= 0).all()
    assert (permute.permute(x, n, keys) == ref).all()
    with pytest.raises(ValueError, match="not in"):
        permute.permute(np.array([5]), 5, 0)


def test_each_pass_over_a_source_is_a_permutation_and_passes_differ():
    m = ss.mix({"small": list(range(37)), "big": list(range(10000))}, {"small": 0.5, "big": 0.5}, length=37 * 2 * 6)
    items = [m[k] for k in range(len(m))]
    small = [item for k, item in enumerate(items) if m.source_of(k) == 0]
    passes = [small[i:i + 37] for i in range(0, len(small), 37)]
    assert len(passes) == 6
    for p in passes:
        assert sorted(p) == list(range(37))
    assert len({tuple(p) for p in passes}) == 6
    assert passes[0] != list(range(37))


def test_items_kernel_equals_the_reference():
    rng = np.random.default_rng(0)
    src = rng.integers(0, 3, 5000).astype(np.int32)
    count = rng.integers(0, 10**9, 5000)
    lengths = np.array([1, 17, 10**6], np.int64)
    keys = permute.source_keys(3, 3)
    assert (permute.items(src, count, lengths, keys) == permute.items_reference(src, count, lengths, keys)).all()


# -- the interleave kernel ----------------------------------------------------------------------


@pytest.mark.skipif(interleave._kernel is None, reason="the compiled kernel is not built")
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.lists(st.integers(0, 50), min_size=3, max_size=3)), min_size=1, max_size=4),
       st.booleans(), st.integers(0, 1500))
def test_simulate_kernel_equals_the_reference_and_a_restart_from_any_checkpoint(points, ramp, split):
    names = ["a", "b", "c"]
    schedule, position = [], 0
    for gap, w in points:
        schedule.append((position, dict(zip(names, w if sum(w) else [1, 0, 0]))))
        position += gap
    seg = interleave.Segment(0, [0, 0, 0], pieces_of(canonical_schedule(schedule, names), names, ramp))
    n = 2000
    outs = []
    for run in (interleave.simulate_reference, interleave._kernel.simulate):
        lam, cnt = np.zeros(3, np.int64), np.zeros(3, np.int64)
        src, idx = np.empty(n, np.int32), np.empty(n, np.int64)
        ck_lam, ck_cnt = np.zeros((n // 100, 3), np.int64), np.zeros((n // 100, 3), np.int64)
        run(seg.w, seg.starts, seg.T, seg.S, 0, n, lam, cnt, src, idx, 100, ck_lam, ck_cnt)
        outs.append((src, idx, lam, cnt, ck_lam, ck_cnt))
    for a, b in zip(*outs):
        assert (a == b).all()
    src, idx, _, _, ck_lam, ck_cnt = outs[0]
    b = split // 100
    lam, cnt = (ck_lam[b - 1].copy(), ck_cnt[b - 1].copy()) if b else (np.zeros(3, np.int64), np.zeros(3, np.int64))
    rest_src, rest_idx = np.empty(n - b * 100, np.int32), np.empty(n - b * 100, np.int64)
    interleave.simulate(seg.w, seg.starts, seg.T, seg.S, b * 100, n, lam, cnt, rest_src, rest_idx)
    assert (rest_src == src[b * 100:]).all() and (rest_idx == idx[b * 100:]).all()


@pytest.mark.skipif(interleave._kernel is None, reason="the compiled kernel is not built")
def test_scattered_positions_read_as_a_straight_run_and_the_locate_kernel_equals_its_reference():
    weights = {"web": 0.712345678, "code": 0.2, "math": 0.087654322}  # rounded: a period of 2**24 positions
    m = ss.mix(sources([3, 3, 3], NAMES3), weights, length=300000)
    seg = m._first
    straight = (np.empty(300000, np.int32), np.empty(300000, np.int64))
    interleave.simulate(seg.w, seg.starts, seg.T, seg.S, 0, 300000, np.zeros(3, np.int64), np.zeros(3, np.int64), *straight)
    rng = np.random.default_rng(1)
    far = rng.integers(0, 300000, 500)
    src, count = m._locate(far)  # touches many blocks: each position simulated from its checkpoint
    assert (src == straight[0][far]).all() and (count == straight[1][far]).all()
    r = np.sort(far)
    rows = seg._ck_size
    outs = []
    for run in (interleave.locate_reference, interleave._kernel.locate):
        s, c = np.empty(len(r), np.int32), np.empty(len(r), np.int64)
        run(seg.w, seg.starts, seg.T, seg.S, seg.block_size, seg._ck_lam[:rows], seg._ck_cnt[:rows], r, s, c)
        outs.append((s, c))
    assert (outs[0][0] == outs[1][0]).all() and (outs[0][1] == outs[1][1]).all()
    with pytest.raises(ValueError, match="out of order"):
        interleave._kernel.locate(seg.w, seg.starts, seg.T, seg.S, seg.block_size, seg._ck_lam[:rows], seg._ck_cnt[:rows],
                                  r[::-1].copy(), s, c)


def test_array_sources_read_a_batch_as_one_gather_each_and_the_loader_batch_equals_the_items():
    data = {"web": np.arange(500).reshape(250, 2), "code": -np.arange(60).reshape(30, 2)}
    m = ss.mix(data, {"web": 0.8, "code": 0.2}, seed=3)
    assert type(m).__name__ == "ArrayMixture"
    batches = list(ss.DataLoader(m, batch_size=16))
    assert (np.concatenate(batches) == np.stack([m[k] for k in range(len(m))])).all()
    assert type(ss.mix({"a": np.arange(3), "b": np.arange(3.0)}, {"a": 1, "b": 1})).__name__ == "Mixture"  # dtypes differ


@pytest.mark.skipif(interleave._kernel is None, reason="the compiled kernel is not built")
def test_the_kernel_refuses_bad_arguments():
    seg = interleave.Segment(0, [0, 0], pieces_of(canonical_schedule({"a": 1, "b": 1}, ["a", "b"]), ["a", "b"], False))
    run = interleave._kernel.simulate
    lam, cnt = np.zeros(2, np.int64), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="sum to"):
        run(seg.w + 1, seg.starts, seg.T, seg.S, 0, 10, lam, cnt, interleave._EMPTY32, interleave._EMPTY, 0, interleave._EMPTY, interleave._EMPTY)
    with pytest.raises(ValueError, match="u1-u0"):
        run(seg.w, seg.starts, seg.T, seg.S, 0, 10, lam, cnt, np.empty(5, np.int32), interleave._EMPTY, 0, interleave._EMPTY, interleave._EMPTY)
    with pytest.raises(ValueError, match="lags must sum"):
        run(seg.w, seg.starts, seg.T, seg.S, 0, 10, np.array([1, 0]), cnt, interleave._EMPTY32, interleave._EMPTY, 0, interleave._EMPTY, interleave._EMPTY)
    with pytest.raises(TypeError, match="4-byte"):
        run(seg.w, seg.starts, seg.T, seg.S, 0, 10, lam, cnt, np.empty(10, np.int64), interleave._EMPTY, 0, interleave._EMPTY, interleave._EMPTY)


def test_without_the_compiled_kernels_the_mixture_is_the_same():
    code = (
        "import json, numpy as np, slipstream as ss\n"
        "from slipstream.sequences import interleave\n"
        "assert interleave._kernel is None\n"
        "m = ss.mix({'a': list(range(50)), 'b': list(range(7)), 'c': list(range(300))}, "
        "[(0, {'a': 0.5, 'b': 0.25, 'c': 0.25}), (100, {'a': 0.1, 'b': 0.8, 'c': 0.1})], ramp=True, seed=5, jitter=4, length=900)\n"
        "print(json.dumps([m[k] for k in range(len(m))]))\n"
    )
    env = dict(os.environ, SLIPSTREAM_NO_SEQCORE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    m = ss.mix({"a": list(range(50)), "b": list(range(7)), "c": list(range(300))},
               [(0, {"a": 0.5, "b": 0.25, "c": 0.25}), (100, {"a": 0.1, "b": 0.8, "c": 0.1})], ramp=True, seed=5, jitter=4, length=900)
    assert json.loads(out.stdout) == [m[k] for k in range(len(m))]


# -- items, purity, state, pickling ---------------------------------------------------------------


def test_items_name_their_source_and_two_instances_are_the_same_sequence():
    data = {"web": [{"x": i} for i in range(30)], "code": np.arange(20) + 100}
    a = ss.mix(data, {"web": 2, "code": 1}, seed=4)
    b = ss.mix(data, {"web": 2, "code": 1}, seed=4)
    items = [a[k] for k in range(len(a))]
    assert items == [b[k] for k in range(len(b))]
    for k, item in enumerate(items):
        s = a.source_of(k)
        if s == 0:
            assert item["source"] == 0 and 0 <= item["x"] < 30
        else:
            assert 100 <= int(item) < 120
    assert a.__getitems__(list(range(len(a)))) == items
    assert a[-1] == a[len(a) - 1]
    with pytest.raises(IndexError, match="out of range"):
        a[len(a)]
    other = ss.mix(data, {"web": 2, "code": 1}, seed=5)
    assert [other.source_of(k) for k in range(len(a))] == [a.source_of(k) for k in range(len(a))]  # the seed orders the items
    assert [other[k] for k in range(len(a))] != items


def test_pickled_mixture_reads_the_same_with_its_changes_and_pending_change():
    m = ss.mix(sources([40, 25, 9], NAMES3), {"web": 0.6, "code": 0.3, "math": 0.1}, seed=2, length=300)
    m.set_weights({"web": 0, "code": 1, "math": 1})
    m.settle_changes(77)
    m.set_weights({"web": 1, "code": 1, "math": 1})
    copy = pickle.loads(pickle.dumps(m))
    assert [copy[k] for k in range(len(m))] == [m[k] for k in range(len(m))]
    assert copy.state_dict() == m.state_dict()


def test_the_state_round_trips_through_json_and_restores_every_position():
    make = lambda: ss.mix(sources([40, 25, 9], NAMES3), {"web": 0.6, "code": 0.3, "math": 0.1}, seed=2, length=500)
    m = make()
    before = [m[k] for k in range(len(m))]
    m.set_weights({"web": 0, "code": 1, "math": 1})
    assert m.settle_changes(100) is True and m.settle_changes(200) is False
    m.set_weights({"web": 1, "code": 0, "math": 0})
    m.settle_changes(250)
    m.set_weights({"web": 2, "code": 2, "math": 1})  # pending
    after = [m[k] for k in range(len(m))]
    assert after[:100] == before[:100] and after[100:] != before[100:]
    state = json.loads(json.dumps(m.state_dict()))
    assert state["changes"] == [[100, {"web": 0, "code": 1, "math": 1}], [250, {"web": 1, "code": 0, "math": 0}]]
    assert state["pending"] == {"web": 2, "code": 2, "math": 1}
    fresh = make()
    fresh.load_state_dict(state)
    assert [fresh[k] for k in range(len(fresh))] == after
    assert fresh.state_dict() == m.state_dict()
    fresh.settle_changes(300)
    m.settle_changes(300)
    assert [fresh[k] for k in range(len(fresh))] == [m[k] for k in range(len(m))]
    assert m.counts(250)["web"] == m.counts(100)["web"]  # web had weight 0 from 100 to 250


@pytest.mark.parametrize("change,named", [
    ({"seed": 3}, "seed"), ({"lengths": [40, 26, 9]}, "source lengths"), ({"weights": {"web": 0.5, "code": 0.4, "math": 0.1}}, "weights"),
    ({"names": ("web", "code", "maths")}, "source names"), ({"length": 499}, "length"),
])
def test_a_state_of_another_mixture_is_refused_naming_what_differs_and_changes_nothing(change, named):
    def make(seed=2, lengths=(40, 25, 9), weights=None, names=NAMES3, length=500):
        weights = weights or {"web": 0.6, "code": 0.3, "math": 0.1}
        return ss.mix(sources(lengths, list(names)), dict(zip(names, weights.values())), seed=seed, length=length)
    m = make()
    m.set_weights({"web": 0, "code": 1, "math": 1})
    m.settle_changes(10)
    other = make(**change)
    before = other.state_dict()
    with pytest.raises(ValueError, match=f"another mixture: .*its {named}"):
        other.load_state_dict(m.state_dict())
    assert other.state_dict() == before
    with pytest.raises(ValueError, match="not a mixture's state"):
        other.load_state_dict({"tag": "dial"})


# -- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights,error,match", [
    ({"a": -1, "b": 1}, ValueError, "weight of 'a' must be a finite number >= 0, got -1"),
    ({"a": float("nan"), "b": 1}, ValueError, "weight of 'a' must be a finite number >= 0, got nan"),
    ({"a": float("inf"), "b": 1}, ValueError, "weight of 'a'"),
    ({"a": 0, "b": 0.0}, ValueError, "every weight is 0"),
    ({"a": 1, "b": 1, "c": 1}, ValueError, r"unknown sources \['c'\]"),
    ({"a": 1}, ValueError, r"no weight for sources \['b'\]"),
    ({"a": "1", "b": 1}, TypeError, "weight of 'a' must be a number"),
    ([(5, {"a": 1, "b": 1})], ValueError, "must start at position 0"),
    ([(0, {"a": 1, "b": 1}), (0, {"a": 1, "b": 2})], ValueError, "positions must increase"),
    ([(0, {"a": 1, "b": 1}), (10, {"a": -2, "b": 2})], ValueError, "at position 10: the weight of 'a'"),
    ("ab", TypeError, "expected a mapping"),
])
def test_bad_weights_are_refused_naming_the_source(weights, error, match):
    with pytest.raises(error, match=match):
        ss.mix({"a": [1, 2], "b": [3]}, weights)


def test_bad_sources_and_options_are_refused():
    with pytest.raises(ValueError, match="source 'b' is empty"):
        ss.mix({"a": [1, 2], "b": []}, {"a": 1, "b": 1})
    with pytest.raises(TypeError, match="source 'b' must be a container"):
        ss.mix({"a": [1, 2], "b": 5}, {"a": 1, "b": 1})
    with pytest.raises(TypeError, match="non-empty mapping"):
        ss.mix({}, {})
    with pytest.raises(ValueError, match="stop must be one of"):
        ss.mix({"a": [1]}, {"a": 1}, stop="never")
    with pytest.raises(ValueError, match="jitter"):
        ss.mix({"a": [1]}, {"a": 1}, jitter=1)
    with pytest.raises(ValueError, match="length"):
        ss.mix({"a": [1]}, {"a": 1}, length=-1)
    m = ss.mix({"a": [1, 2], "b": [3]}, {"a": 1, "b": 1})
    with pytest.raises(ValueError, match=r"unknown sources \['z'\]"):
        m.set_weights({"a": 1, "b": 1, "z": 1})
    with pytest.raises(ValueError, match="every weight is 0"):
        m.set_weights({"a": 0, "b": 0})
    with pytest.raises(ValueError, match=r"position 0\.\.2\*\*61"):
        m.settle_changes(-1)
