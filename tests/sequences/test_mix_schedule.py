"""ss.mix with weights that change: schedules (pieces and ramps) within the bound of their integral,
runtime changes (targets restarting at the change, earlier positions untouched, safe beside
readers in other threads), jitter, the stop rules, and batched reads from sources that have them.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from mixcounts import running_counts, sequence, sources, worst_deviation

import slipstream as ss

NAMES = ["a", "b", "c"]
weight_lists = st.lists(st.integers(0, 20), min_size=3, max_size=3).filter(lambda w: sum(w) > 0)


def schedule_of(points):
    schedule, position = [], 0
    for gap, w in points:
        schedule.append((position, dict(zip(NAMES, w))))
        position += gap
    return schedule


def linear_target(schedule, ramp, n):
    """The exact target counts (n, 3) of the given schedule: per position, the weights normalized,
    linear between points when ``ramp``."""
    w = np.zeros((n, len(NAMES)))
    points = [(p, np.array([m[name] for name in NAMES], float) / sum(m.values())) for p, m in schedule]
    for j, (p, weights) in enumerate(points):
        end = points[j + 1][0] if j + 1 < len(points) else n
        if p >= n:
            break
        u = np.arange(p, min(end, n))
        if ramp and j + 1 < len(points):
            w[u] = weights + (points[j + 1][1] - weights) * ((u - p) / (end - p))[:, None]
        else:
            w[u] = weights
    return np.cumsum(w, axis=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1500), weight_lists), min_size=1, max_size=5), st.booleans())
def test_a_schedule_is_within_the_bound_of_its_integral_at_every_prefix(points, ramp):
    schedule = schedule_of(points)
    n = sum(gap for gap, _ in points) + 200
    m = ss.mix(sources([9, 9, 9], NAMES), schedule, ramp=ramp, length=n)
    worst, bound = worst_deviation(m, n)
    assert worst <= bound == 0.75
    # against the exact (linear) integral of the given weights: the ramp's steps hold the mean of
    # each step's linear weights, so the integrals meet at every step's end and drift little between
    counts = running_counts(sequence(m)[0], 3)
    assert np.abs(counts - linear_target(schedule, ramp, n)).max() <= 0.75 + (0.02 if ramp else 1e-9)


def test_a_ramp_moves_the_weights_linearly_and_holds_the_last_point_after_it():
    m = ss.mix(sources([5, 5, 5], NAMES), [(0, {"a": 1, "b": 0, "c": 0}), (1000, {"a": 0, "b": 1, "c": 3})], ramp=True, length=4000)
    assert m.weights_at(0)["a"] == pytest.approx(1, abs=0.01)
    assert m.weights_at(500) == pytest.approx({"a": 0.5, "b": 0.125, "c": 0.375}, abs=0.01)
    assert m.weights_at(3000) == {"a": 0.0, "b": 0.25, "c": 0.75}
    counts = m.counts(1000)
    assert counts["a"] == pytest.approx(500, abs=1) and counts["b"] == pytest.approx(125, abs=1)
    piecewise = ss.mix(sources([5, 5, 5], NAMES), [(0, {"a": 1, "b": 0, "c": 0}), (1000, {"a": 0, "b": 1, "c": 3})], length=4000)
    assert piecewise.counts(1000) == {"a": 1000, "b": 0, "c": 0}
    assert piecewise.counts(2000) == {"a": 1000, "b": 250, "c": 750}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), weight_lists), min_size=1, max_size=4), st.sampled_from([0, 8]))
def test_runtime_changes_restart_the_targets_and_never_touch_earlier_positions(changes, jitter):
    n = 2500
    m = ss.mix(sources([13, 40, 7], NAMES), {"a": 0.5, "b": 0.3, "c": 0.2}, length=n, jitter=jitter)
    for p, w in changes:
        before = m.__getitems__(np.arange(n))
        m.set_weights(dict(zip(NAMES, w)))
        assert m.settle_changes(p) is True
        start = m._changes[-1][0]
        assert start == (-(-p // jitter) * jitter if jitter else p)
        assert m.__getitems__(np.arange(min(start, n))) == before[:start]
        assert m.weights_at(min(start, n - 1)) == pytest.approx({k: v / sum(w) for k, v in zip(NAMES, w)}) or start >= n
    if not jitter:
        worst, bound = worst_deviation(m, n)  # counts since each change within the bound of the weights since it
        assert worst <= bound
    # counts stay consistent with the items: each source's items are read in order of their counts
    src, count = sequence(m)
    for s in range(3):
        assert (np.diff(count[src == s]) == 1).all() and (count[src == s][:1] == 0).all()


def test_a_change_at_position_0_replaces_the_schedule_and_a_later_change_replaces_those_after_it():
    m = ss.mix(sources([10, 10, 10], NAMES), {"a": 1, "b": 1, "c": 1}, length=300)
    m.set_weights({"a": 0, "b": 1, "c": 0})
    m.settle_changes(100)
    m.set_weights({"a": 0, "b": 0, "c": 1})
    m.settle_changes(50)  # a new epoch's reads start again before the earlier change
    assert [c[0] for c in m._changes] == [50]
    assert m.counts(300)["b"] == m.counts(50)["b"]
    m.set_weights({"a": 1, "b": 0, "c": 0})
    m.settle_changes(0)
    assert m.counts(300) == {"a": 300, "b": 0, "c": 0}


def test_readers_in_other_threads_see_positions_before_a_change_unchanged_while_it_settles():
    m = ss.mix(sources([500, 300, 200], NAMES), {"a": 0.5, "b": 0.3, "c": 0.2}, length=200000, seed=3)
    expected = [m[k] for k in range(3000)]
    errors, stop = [], threading.Event()

    def read():
        rounds = 0
        while not stop.is_set() or rounds < 3:
            for k in range(0, 3000, 7):
                if m[k] != expected[k]:
                    errors.append((k, m[k], expected[k]))
            got = m.__getitems__(list(range(0, 3000, 11)))
            if got != expected[::11]:
                errors.append("batch")
            rounds += 1

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for j in range(40):
        m.set_weights({"a": j % 3, "b": 1, "c": (j + 1) % 2})
        m.settle_changes(3000 + 997 * j)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


# -- jitter ------------------------------------------------------------------------------------------


def test_jitter_shuffles_inside_blocks_keeping_the_counts_at_block_boundaries():
    data = sources([50, 30, 20], NAMES)
    plain = ss.mix(data, {"a": 0.5, "b": 0.3, "c": 0.2}, length=1000)
    jittered = ss.mix(data, {"a": 0.5, "b": 0.3, "c": 0.2}, length=1000, jitter=16, seed=1)
    again = ss.mix(data, {"a": 0.5, "b": 0.3, "c": 0.2}, length=1000, jitter=16, seed=1)
    p_src, p_count = sequence(plain)
    j_src, j_count = sequence(jittered)
    assert (j_src != p_src).any()
    assert (sequence(again)[0] == j_src).all()
    for b in range(0, 1000 - 16, 16):  # whole blocks (the last one reaches past the end)
        assert jittered.counts(b) == plain.counts(b)
        assert sorted(zip(j_src[b:b + 16].tolist(), j_count[b:b + 16].tolist())) == sorted(zip(p_src[b:b + 16].tolist(), p_count[b:b + 16].tolist()))
    for s in range(3):  # a source's items keep their order
        assert (np.diff(j_count[j_src == s]) == 1).all()
    assert [jittered.counts(k) for k in (5, 17, 999)] == [
        {name: int((j_src[:k] == i).sum()) for i, name in enumerate(NAMES)} for k in (5, 17, 999)
    ]



@pytest.mark.parametrize("jitter", [5, 16, 300])
def test_jitter_read_in_order_is_the_same_as_read_scattered_and_follows_a_change_in_a_group_already_read(jitter):
    data = sources([50, 30, 20], NAMES)
    n = 2000
    m = ss.mix(data, {"a": 0.5, "b": 0.3, "c": 0.2}, length=n, jitter=jitter, seed=3)
    scattered = [m._where(np.array([k], np.int64)) for k in range(n)]  # one at a time, groups apart
    want = np.array([s[0] for s, _ in scattered]), np.array([i[0] for _, i in scattered])
    for size in (1, 7, 32, 256):  # in order, batch by batch
        got = [m._where(np.arange(a, min(a + size, n), dtype=np.int64)) for a in range(0, n, size)]
        assert (np.concatenate([s for s, _ in got]) == want[0]).all() and (np.concatenate([i for _, i in got]) == want[1]).all()
    m._where(np.arange(600, 640, dtype=np.int64))  # the group of the change is read before it settles
    m.set_weights({"a": 0, "b": 0, "c": 1})
    m.settle_changes(610)
    fresh = ss.mix(data, {"a": 0.5, "b": 0.3, "c": 0.2}, length=n, jitter=jitter, seed=3)
    fresh.set_weights({"a": 0, "b": 0, "c": 1})
    fresh.settle_changes(610)
    positions = np.arange(0, n, dtype=np.int64)
    assert all((x == y).all() for x, y in zip(m._where(positions[560:720]), fresh._where(positions[560:720])))
    start = -(-610 // jitter) * jitter
    assert (m._locate(positions[start:start + 60])[0] == 2).all()

# -- stop rules ----------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=3, max_size=3), weight_lists, st.sampled_from([0, 4]), st.booleans())
def test_the_stop_rules_end_where_they_say(lengths, weights, jitter, scheduled):
    weights = dict(zip(NAMES, weights))
    spec = [(0, weights), (37, {"a": 1, "b": 1, "c": 1})] if scheduled else weights
    active = [i for i, name in enumerate(NAMES) if weights[name] > 0 or scheduled]
    first = ss.mix(sources(lengths, NAMES), spec, jitter=jitter)
    longer = ss.mix(sources(lengths, NAMES), spec, jitter=jitter, length=len(first) + 1)
    counts = first.counts(len(first))
    assert all(counts[name] <= lengths[i] for i, name in enumerate(NAMES))
    s = longer.source_of(len(first))  # the next position would start a second pass
    assert counts[NAMES[s]] == lengths[s]
    whole = ss.mix(sources(lengths, NAMES), spec, jitter=jitter, stop="all_exhausted")
    counts = whole.counts(len(whole))
    assert all(counts[NAMES[i]] >= lengths[i] for i in active)
    last = whole.source_of(len(whole) - 1)
    assert whole.counts(len(whole) - 1)[NAMES[last]] == lengths[last] - 1


def test_all_exhausted_refuses_a_source_whose_weight_ends_before_it_is_read_whole():
    with pytest.raises(ValueError, match="source 'a' is not read whole"):
        ss.mix(sources([100, 5, 5], NAMES), [(0, {"a": 1, "b": 1, "c": 1}), (30, {"a": 0, "b": 1, "c": 1})], stop="all_exhausted")
    m = ss.mix(sources([100, 5, 5], NAMES), [(0, {"a": 1, "b": 1, "c": 1}), (30, {"a": 0, "b": 1, "c": 1})])
    assert m.counts(len(m))["a"] <= 11



@pytest.mark.parametrize("spec", [
    {"rare": 1e-9, "web": 1},  # exact: no short period, as a schedule
    [(0, {"rare": 1e-6, "web": 1}), (1000, {"rare": 1e-6, "web": 2})],
])
def test_first_exhausted_finds_the_first_source_to_run_out_without_running_a_rare_one_out(spec):
    # the rare source (listed first) would run out near position 10**10: the stop is where web does
    code = f"""
        import slipstream as ss
        m = ss.mix({{"rare": list(range(10**4)), "web": list(range(500))}}, {spec!r})
        c = m.counts(len(m))
        assert c["web"] == 500 and c["rare"] == 0 and 250 < len(m) < 1000, (len(m), c)
        print("ok")
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]

# -- batched reads ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers,backend", [(0, "thread"), (2, "process")])
def test_packed_sources_read_as_one_batched_read_each_and_the_loader_batch_equals_the_items(workers, backend):
    rng = np.random.default_rng(0)
    web = ss.pack([rng.integers(0, 1000, n) for n in rng.integers(1, 60, 80)], 16)
    code = ss.pack([rng.integers(1000, 2000, n) for n in rng.integers(1, 40, 30)], 16)
    m = ss.mix({"web": web, "code": code}, {"web": 0.75, "code": 0.25}, seed=2)
    assert hasattr(m, "getobs_batch_into") and m.batch_spec() is not None
    extra = {"mp_context": "fork"} if backend == "process" else {}
    loader = ss.DataLoader(m, batch_size=8, drop_last=True, workers=workers, backend=backend, timeout=60, **extra)
    with loader:
        batches = list(loader)
    assert len(batches) == len(m) // 8
    for b, batch in enumerate(batches):
        items = [m[k] for k in range(b * 8, b * 8 + 8)]
        assert batch["source"].tolist() == [item["source"] for item in items]
        for field in ("tokens", "segment_ids", "positions"):
            assert (batch[field] == np.stack([item[field] for item in items])).all()
    plain = ss.mix({"web": list(range(5)), "code": list(range(3))}, {"web": 1, "code": 1})
    assert not hasattr(plain, "getobs_batch_into")
