"""``ss.DataLoader``: batches (exact length, ranks, seeded epochs, any worker count), collation and the
container protocol, samplers and batch samplers, the resumable state, prefetch and out-of-order delivery,
user errors and timeouts, argument checks (their order and exception types) and ``workers="auto"``."""

import dataclasses
import json
import threading

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream.loading.options import Options


class Plain:
    """A plain container whose samples draw from sample_rng() and carry a string."""

    def __init__(self, n=37):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": np.full(3, i, np.int32), "noise": ss.sample_rng().random(), "name": f"s{i}"}


def slow_first_batch(release):
    """A Plain subclass whose samples 0 and 1 wait for ``release`` (at most 10 s)."""

    class SlowFirst(Plain):
        def __getitem__(self, i):
            if i < 2 and threading.current_thread() is not threading.main_thread():  # not the buffer-shaping read
                release.wait(timeout=10)
            return super().__getitem__(i)

    return SlowFirst


def epoch_indices(loader):
    return [int(v) for b in loader for v in np.asarray(b["x"])[:, 0]]


@given(st.integers(0, 60), st.integers(1, 9), st.booleans(), st.booleans())
@settings(deadline=None, max_examples=40)
def test_len_is_the_exact_number_of_batches_and_each_index_comes_once(n, batch_size, shuffle, drop_last):
    loader = ss.DataLoader(Plain(n), batch_size, shuffle=shuffle, drop_last=drop_last, seed=1)
    batches = list(loader)
    assert len(batches) == len(loader)
    seen = [int(v) for b in batches for v in b["x"][:, 0]]
    assert len(seen) == len(set(seen))
    assert len(seen) == ((n // batch_size) * batch_size if drop_last else n)
    if not shuffle:
        assert seen == list(range(len(seen)))


@given(st.integers(0, 50), st.integers(1, 7), st.integers(1, 5), st.booleans())
@settings(deadline=None, max_examples=40)
def test_ranks_get_the_same_number_of_batches_and_together_the_whole_dataset(n, batch_size, world, drop_last):
    loaders = [ss.DataLoader(np.arange(n), batch_size, shuffle=True, seed=3, rank=r, world_size=world, drop_last=drop_last) for r in range(world)]
    per_rank = [list(loader) for loader in loaders]
    assert len({len(b) for b in per_rank}) == 1
    assert all(len(b) == len(loader) for b, loader in zip(per_rank, loaders))
    seen = [int(v) for batches in per_rank for b in batches for v in b]
    if not drop_last:
        assert set(seen) == set(range(n))
        assert len(seen) - n == (-n) % world  # duplicates only from padding
    else:
        assert len(seen) == len(set(seen))


def test_each_epoch_is_a_new_permutation_and_the_same_seed_repeats_it():
    a = ss.DataLoader(Plain(), 5, shuffle=True, seed=11)
    b = ss.DataLoader(Plain(), 5, shuffle=True, seed=11)
    first, second = epoch_indices(a), epoch_indices(a)
    assert sorted(first) == sorted(second) == list(range(37))
    assert first != second
    assert epoch_indices(b) == first and epoch_indices(b) == second


@pytest.mark.parametrize("workers", [1, 8])
def test_the_same_seed_gives_the_same_batches_with_any_number_of_workers(workers):
    single = ss.DataLoader(Plain(), 4, shuffle=True, seed=5)
    reference = [snapshot(b) for _ in range(2) for b in single]
    loader = ss.DataLoader(Plain(), 4, shuffle=True, seed=5, workers=workers, prefetch=3)
    got = [snapshot(b) for _ in range(2) for b in loader]
    assert len(got) == len(reference)
    for k, (x, y) in enumerate(zip(got, reference)):
        assert_same(x, y, f"batch {k}")


def test_a_new_epoch_gives_new_sample_randomness():
    loader = ss.DataLoader(Plain(), 37, seed=5)
    first, second = next(iter(loader))["noise"].copy(), next(iter(loader))["noise"].copy()
    assert not np.array_equal(first, second)


def test_two_iterators_at_once_are_independent_epochs():
    loader = ss.DataLoader(Plain(), 6, shuffle=True, seed=2, workers=2)
    reference = ss.DataLoader(Plain(), 6, shuffle=True, seed=2)
    want0, want1 = [snapshot(b) for b in reference], [snapshot(b) for b in reference]
    it0, it1 = iter(loader), iter(loader)
    got0, got1 = [], []
    for b0, b1 in zip(it0, it1):
        got0.append(snapshot(b0))
        got1.append(snapshot(b1))
    for got, want in ((got0, want0), (got1, want1)):
        assert len(got) == len(want)
        for x, y in zip(got, want):
            assert_same(x, y)


@pytest.mark.parametrize("workers", [0, 3])
def test_batches_the_user_keeps_are_never_overwritten(workers):
    x = np.arange(200, dtype=np.int64).reshape(100, 2)
    loader = ss.DataLoader(x, 8, shuffle=True, seed=0, workers=workers, prefetch=2)
    kept = list(loader)  # every batch kept
    order = np.concatenate([b[:, 0] // 2 for b in kept])
    np.testing.assert_array_equal(np.concatenate(kept), x[order])
    view = None
    for k, batch in enumerate(loader):  # keep only a view of batch 0 while the loader runs on
        if k == 0:
            view, expected = batch[1:3], batch[1:3].copy()
    np.testing.assert_array_equal(view, expected)


@pytest.mark.parametrize("data", [np.zeros((64, 4), np.float32), Plain(64)], ids=["array", "container"])
def test_steady_state_iteration_reuses_a_few_buffers(data):
    loader = ss.DataLoader(data, 4, shuffle=True, seed=0, workers=2, prefetch=2)
    addresses = set()
    for _ in range(3):
        for batch in loader:
            arr = batch if isinstance(batch, np.ndarray) else batch["x"]
            addresses.add(arr.__array_interface__["data"][0])
            del batch, arr
    # 48 batches went through; with prefetch 2 only a handful of buffers cycle
    assert len(addresses) <= loader.prefetch + 4


def test_default_collate_stacks_arrays_and_numbers_and_lists_strings():
    batch = next(iter(ss.DataLoader(Plain(), 4)))
    assert batch["x"].shape == (4, 3) and batch["x"].dtype == np.int32
    assert batch["noise"].dtype == np.float64
    assert batch["name"] == ["s0", "s1", "s2", "s3"]


def test_a_custom_collate_receives_the_list_of_samples():
    loader = ss.DataLoader(Plain(10), 4, collate=lambda samples: [s["name"] for s in samples], workers=2)
    assert list(loader) == [["s0", "s1", "s2", "s3"], ["s4", "s5", "s6", "s7"], ["s8", "s9"]]


def test_arrays_and_groups_of_arrays_are_read_in_batches_through_views():
    x, y = np.arange(40).reshape(20, 2), np.arange(20) * 10
    view = ss.obsview((x, y), np.arange(19, -1, -1))
    batches = list(ss.DataLoader(view, 6, workers=2))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y[::-1])
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x[::-1])


def test_the_loader_uses_getobs_into_when_the_container_has_it():
    class InPlace:
        calls = 0

        def __len__(self):
            return 9

        def __getitem__(self, i):
            return np.full(2, i)  # the first batch is read this way: its first sample shapes the buffers

        def getobs_into(self, buffer, i):
            InPlace.calls += 1
            buffer[...] = i

    batches = list(ss.DataLoader(InPlace(), 3, workers=0))
    assert [b[:, 0].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert InPlace.calls == 6  # every sample after the first batch was written in place


def test_the_loader_uses_getitems_once_per_batch_when_present():
    class Many:
        calls = []

        def __len__(self):
            return 10

        def __getitem__(self, i):
            raise AssertionError("__getitems__ should be used")

        def __getitems__(self, indices):
            Many.calls.append(list(indices))
            return [np.array([i, ss.sample_rng().integers(1000)]) for i in indices]

    batches = list(ss.DataLoader(Many(), 4, workers=2, seed=0))
    assert Many.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # no extra read: the first batch shapes the buffers
    np.testing.assert_array_equal(batches[2][:, 0], [8, 9])


def test_an_empty_dataset_gives_no_batches_and_a_large_batch_gives_one_short_one():
    assert len(ss.DataLoader([], 4)) == 0 and list(ss.DataLoader([], 4, workers=2)) == []
    loader = ss.DataLoader(np.arange(3), 10)
    assert len(loader) == 1 and [b.tolist() for b in loader] == [[0, 1, 2]]
    loader = ss.DataLoader(np.arange(3), 10, drop_last=True, workers=2)
    assert len(loader) == 0 and list(loader) == []


def test_a_sampler_decides_the_order_and_hears_the_epoch():
    class EvensThenOdds:
        epochs = []

        def __iter__(self):
            return iter([0, 2, 4, 1, 3])

        def __len__(self):
            return 5

        def set_epoch(self, epoch):
            self.epochs.append(epoch)

    sampler = EvensThenOdds()
    loader = ss.DataLoader(np.arange(5) * 10, 2, sampler=sampler)
    assert len(loader) == 3
    assert [b.tolist() for b in loader] == [[0, 20], [40, 10], [30]]
    list(loader)
    assert sampler.epochs == [0, 1]


def test_a_batch_sampler_decides_the_batches_and_is_sharded_over_ranks():
    batches = [[3, 1], [0], [2, 4, 5]]
    loader = ss.DataLoader(np.arange(6), batch_sampler=batches)
    assert len(loader) == 3 and [b.tolist() for b in loader] == batches
    rank1 = ss.DataLoader(np.arange(6), batch_sampler=batches, rank=1, world_size=2)
    assert len(rank1) == 2 and [b.tolist() for b in rank1] == [[0], [3, 1]]


def test_out_of_range_indices_from_a_sampler_raise_index_error():
    with pytest.raises(IndexError, match="the sampler gave sample index 7, out of range for 5 observations"):
        list(ss.DataLoader(np.arange(5), 2, sampler=[0, 7]))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"batch_size": 0}, ValueError, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": 2.5}, TypeError, "batch_size must be an integer"),
        ({"batch_size": True}, TypeError, "batch_size must be an integer"),
        ({"workers": -1}, ValueError, "workers must be an integer >= 0, got -1"),
        ({"prefetch": -2}, ValueError, "prefetch must be an integer >= 1, got -2"),
        ({"prefetch": 0}, ValueError, "prefetch must be an integer >= 1, got 0"),
        ({"rank": 2, "world_size": 2}, ValueError, r"rank must be < world_size \(2\), got 2"),
        ({"world_size": 0}, ValueError, "world_size must be an integer >= 1"),
        ({"rank": -1}, ValueError, "rank must be an integer >= 0"),
        ({"seed": -5}, ValueError, "seed must be an integer >= 0"),
        ({"shuffle": "yes"}, TypeError, "shuffle must be True or False"),
        ({"collate": 3}, TypeError, "collate must be a callable"),
        ({"sampler": [0, 1], "shuffle": True}, ValueError, "sampler and shuffle=True exclude each other"),
        ({"sampler": 5}, TypeError, "sampler must be an iterable"),
        ({"sampler": (i for i in range(4)), "world_size": 2}, ValueError, "without __len__ is read as it goes"),
        ({"batch_sampler": [[0]], "batch_size": 4}, ValueError, "batch_sampler excludes batch_size"),
        ({"batch_sampler": [[0]], "drop_last": True}, ValueError, "batch_sampler excludes"),
    ],
)
def test_bad_arguments_raise_at_construction_saying_what_was_expected(kwargs, error, message):
    with pytest.raises(error, match=message):
        ss.DataLoader(np.arange(10), **kwargs)


def test_data_that_is_not_a_container_raises_type_error():
    with pytest.raises(TypeError, match="expected a data container"):
        ss.DataLoader(object())


@pytest.mark.parametrize(
    "config",
    [
        {"shuffle": True},
        {"shuffle": True, "workers": 3, "prefetch": 1},
        {"shuffle": True, "drop_last": True, "rank": 1, "world_size": 3},
        {"sampler": [5, 3, 1, 0, 2, 4, 6, 9, 8, 7]},
        {"batch_sampler": [[1, 2], [0], [9, 8, 7], [3, 4, 5, 6]]},
        {"collate": lambda samples: [s["name"] for s in samples], "workers": 2},
    ],
    ids=["shuffle", "threads", "sharded", "sampler", "batch_sampler", "collate"],
)
def test_a_restored_loader_yields_exactly_the_rest_of_the_run(config):
    batch_size = 1 if "batch_sampler" in config else 3
    points = assert_resumes_exactly(lambda: ss.DataLoader(Plain(10), batch_size, seed=9, **config), epochs=2)
    assert points >= 4


def test_the_state_is_small_json_and_survives_a_round_trip_mid_epoch():
    loader = ss.DataLoader(Plain(), 4, shuffle=True)  # seed drawn at random, kept in the state
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["batch"] == 2
    assert len(json.dumps(state)) < 300
    restored = ss.DataLoader(Plain(), 4, shuffle=True)
    restored.load_state_dict(json.loads(json.dumps(state)))
    assert_same(snapshot(next(iter(restored))), snapshot(next(it)))


def test_a_state_from_different_data_is_refused():
    state = ss.DataLoader(np.arange(10), 2).state_dict()
    with pytest.raises(ValueError, match="num_observations=10 but this loader has num_observations=12"):
        ss.DataLoader(np.arange(12), 2).load_state_dict(state)
    with pytest.raises(ValueError, match="state lacks"):
        ss.DataLoader(np.arange(10), 2).load_state_dict({"epoch": 0})


def test_workers_load_ahead_while_the_consumer_holds_a_batch():
    loaded = threading.Event()

    class Watch(Plain):
        def __getitem__(self, i):
            if i == 7:  # last sample of batch 1
                loaded.set()
            return super().__getitem__(i)

    it = iter(ss.DataLoader(Watch(40), 4, workers=2, prefetch=2))
    next(it)
    assert loaded.wait(timeout=30), "batch 1 was not loaded ahead while the consumer held batch 0"
    it.close()


def test_at_most_prefetch_batches_are_started_ahead_of_the_consumer():
    consumed = [0]
    violations = []
    prefetch, batch_size = 2, 4

    class Watch(Plain):
        def __getitem__(self, i):
            if i // batch_size > consumed[0] + prefetch:
                violations.append((i, consumed[0]))
            return super().__getitem__(i)

    for _ in ss.DataLoader(Watch(80), batch_size, workers=4, prefetch=prefetch):
        consumed[0] += 1
    assert consumed[0] == 20 and violations == []


def test_in_order_false_lets_a_ready_batch_overtake_a_slow_one():
    release = threading.Event()
    SlowFirst = slow_first_batch(release)

    it = iter(ss.DataLoader(SlowFirst(4), 2, workers=4, in_order=False))
    first = next(it)
    release.set()
    second = next(it)
    assert first["x"][:, 0].tolist() == [2, 3]
    assert second["x"][:, 0].tolist() == [0, 1]


def test_a_state_saved_after_an_overtaking_batch_resumes_without_repeating_it():
    release = threading.Event()
    SlowFirst = slow_first_batch(release)

    loader = ss.DataLoader(SlowFirst(8), 2, workers=4, in_order=False, seed=1)
    it = iter(loader)
    first = next(it)
    state = loader.state_dict()
    release.set()
    it.close()
    assert first["x"][:, 0].tolist() == [2, 3]
    assert (state["batch"], state["done_ahead"]) == (0, [1])
    restored = ss.DataLoader(Plain(8), 2, seed=1)
    restored.load_state_dict(state)
    it = iter(restored)
    assert len(it) == 3
    assert [b["x"][:, 0].tolist() for b in it] == [[0, 1], [4, 5], [6, 7]]


def test_workers_share_the_first_batch_instead_of_one_worker_reading_it_all():
    workers, batch_size = 4, 32
    meeting = threading.Barrier(workers, timeout=10)
    step = batch_size // (4 * workers)  # samples per task (see DataLoader._chunk)

    class Meet(Plain):
        def __getitem__(self, i):
            in_worker = threading.current_thread() is not threading.main_thread()  # not the buffer-shaping read
            if in_worker and i < workers * step and i % step == 0:
                meeting.wait()  # passes only if `workers` threads work on batch 0 at once
            return super().__getitem__(i)

    first = next(iter(ss.DataLoader(Meet(64), batch_size, workers=workers)))
    assert first["x"][:, 0].tolist() == list(range(batch_size))


def test_the_state_after_leaving_the_loop_early_resumes_the_rest_of_that_epoch():
    loader = ss.DataLoader(Plain(20), 2, shuffle=True, seed=3, workers=2)
    seen = []
    for k, batch in enumerate(loader):
        seen.append(snapshot(batch))
        if k == 2:
            break
    del batch
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 3)
    reference = [snapshot(b) for b in ss.DataLoader(Plain(20), 2, shuffle=True, seed=3)]
    restored = ss.DataLoader(Plain(20), 2, shuffle=True, seed=3)
    restored.load_state_dict(state)
    rest = [snapshot(b) for b in restored]
    assert len(rest) == 7
    for got, want in zip(seen + rest, reference):
        assert_same(got, want)


def test_a_failed_iter_leaves_the_resume_point_unchanged():
    class Flaky:
        fail = True

        def __iter__(self):
            return iter(range(10))

        def __len__(self):
            return 10

        def set_epoch(self, epoch):
            if Flaky.fail:
                Flaky.fail = False
                raise OSError("index temporarily unavailable")

    loader = ss.DataLoader(np.arange(10), 2, sampler=Flaky())
    loader.load_state_dict({"version": 1, "seed": 0, "epoch": 3, "batch": 2})
    with pytest.raises(OSError):
        iter(loader)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (3, 2)
    assert next(iter(loader)).tolist() == [4, 5]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stopiteration_raised_by_user_code_is_an_error_not_the_end_of_the_epoch(workers):
    class Leaky(Plain):
        def __getitem__(self, i):
            if i == 7:
                raise StopIteration("leaked from an inner iterator")
            return super().__getitem__(i)

    with pytest.raises(RuntimeError, match="StopIteration") as info:
        list(ss.DataLoader(Leaky(20), 4, workers=workers))
    assert isinstance(info.value.__cause__, StopIteration)


@pytest.mark.parametrize("workers", [0, 4])
def test_batch_buffers_are_shaped_by_sample_zero_whatever_finishes_first(workers):
    class Mixed:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return np.float16(i) if i >= 4 else np.float64(i) + 0.5  # sample 0 decides: float64

    batches = list(ss.DataLoader(Mixed(), 4, workers=workers))
    assert [b.dtype for b in batches] == [np.float64] * 4


def test_a_returned_array_from_getobs_into_is_copied_into_the_batch():
    class Returns:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.full(2, i)

        def getobs_into(self, buffer, i):
            return np.full(2, i)  # ignores the buffer, returns a new array

    assert [b[:, 0].tolist() for b in ss.DataLoader(Returns(), 3)] == [[0, 1, 2], [3, 4, 5]]


def test_sampler_indices_must_be_integers():
    for bad in ([0.5, 1.5], [True, False], ["1", "2"], [[0, 1], [2, 3]]):
        with pytest.raises(TypeError, match="must give integer sample indices"):
            iter(ss.DataLoader(np.arange(5), 2, sampler=bad))
    with pytest.raises(TypeError, match="batch_sampler must give integer sample indices"):
        iter(ss.DataLoader(np.arange(5), batch_sampler=[[0.0, 1.0]]))


class _Unsized:
    """A sampler without __len__ (finite, or endless), re-iterable, optionally with set_epoch."""

    def __init__(self, n, endless=False):
        self.n, self.endless, self.epochs = n, endless, []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __iter__(self):
        k = 0
        while self.endless or k < self.n:
            yield (7 * k + len(self.epochs)) % self.n
            k += 1


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_sampler_without_len_is_read_as_the_batches_are_loaded(workers, drop_last):
    data = np.arange(23) * 10
    sampler = _Unsized(23)
    dl = ss.DataLoader(data, 4, sampler=sampler, workers=workers, drop_last=drop_last)
    with pytest.raises(TypeError, match="len\\(\\) is unknown"):
        len(dl)
    for epoch in range(2):
        want = [(7 * k + epoch + 1) % 23 * 10 for k in range(23)]  # set_epoch was called before reading
        cut = len(want) - len(want) % 4 if drop_last else len(want)
        got = [int(v) for b in dl for v in b]
        assert got == want[:cut]
    assert sampler.epochs == [0, 1]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_endless_sampler_streams_batches_until_the_loop_stops(workers):
    dl = ss.DataLoader(np.arange(10), 3, sampler=_Unsized(10, endless=True), workers=workers)
    it = iter(dl)
    got = [next(it).tolist() for _ in range(50)]  # far more than one pass over the data
    assert got[0] == [1, 8, 5] and len(got) == 50
    with pytest.raises(TypeError):
        len(it)
    it.close()


def test_a_streamed_epoch_resumes_exactly_from_its_state():
    def make():
        return ss.DataLoader(np.arange(30), batch_sampler=_UnsizedBatches(), workers=2)

    assert assert_resumes_exactly(make, epochs=2) > 10


class _UnsizedBatches:
    def __iter__(self):
        return iter([[k, k + 1] for k in range(0, 28, 3)])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_failed_loader_frees_its_batch_buffers_when_its_error_is_dropped_without_a_gc_pass(workers):
    """An error handed to the consumer forms no reference cycle with its job, so the batch buffers
    go as soon as the exception does (a retry with a smaller batch needs that memory)."""
    import gc
    import tracemalloc

    class FailsAt5:
        def __len__(self):
            return 16

        def __getitem__(self, i):
            if i == 5:
                raise KeyError(i)
            return np.ones(1 << 17)  # 1 MiB

    def train():
        for _ in ss.DataLoader(FailsAt5(), 2, workers=workers):
            pass

    gc.disable()
    tracemalloc.start()
    try:
        try:
            train()
        except KeyError:
            pass
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < 1 << 20, f"{held / 2**20:.1f} MiB still held after the error was dropped"


def test_len_follows_a_container_that_changes_size():
    data = list(range(10))
    dl = ss.DataLoader(data, 4)
    assert len(dl) == 3
    data.extend(range(10, 30))
    assert len(dl) == 8 == len(list(dl))
    del data[5:]
    assert len(dl) == 2 == len(list(dl))


def test_threads_iterating_one_loader_at_once_get_different_epochs():
    """iter() claims its epoch under a lock. Each thread's set_epoch waits (bounded) for the other to
    reach it too: without the lock both read the same epoch before either moved it on."""
    barrier = threading.Barrier(2)
    seen = []

    class Meeting:
        def __init__(self):
            self.epoch = 0

        def __len__(self):
            return 4

        def __iter__(self):
            return iter(range(4))

        def set_epoch(self, epoch):
            seen.append(epoch)
            try:
                barrier.wait(timeout=0.5)
            except threading.BrokenBarrierError:
                pass

    dl = ss.DataLoader(np.arange(4), 2, sampler=Meeting())
    epochs = []
    threads = [threading.Thread(target=lambda: epochs.append(iter(dl).epoch)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(epochs) == [0, 1] and sorted(seen) == [0, 1]
    assert iter(dl).epoch == 2


def test_torch_argument_names_get_a_hint():
    with pytest.raises(TypeError, match=r"num_workers= is torch's name: use workers=.*slipstream.torch.DataLoader"):
        ss.DataLoader(np.arange(4), 2, num_workers=2)
    with pytest.raises(TypeError, match="unexpected keyword argument.*'colate'"):
        ss.DataLoader(np.arange(4), 2, colate=None)


def test_a_timeout_before_the_next_batch_started_names_it_plainly():
    release = threading.Event()

    def slow_order():
        release.wait(10)  # the sampler itself is slow: no batch has started when the timeout hits
        yield from range(4)

    class Unsized:
        def __iter__(self):
            return slow_order()

    dl = ss.DataLoader(np.arange(4), 2, sampler=Unsized(), workers=1, timeout=0.2)
    try:
        with pytest.raises(TimeoutError) as info:
            next(iter(dl))
    finally:
        release.set()
    assert "slipstream: the next batch of epoch 0 was not ready" in str(info.value)


@pytest.mark.parametrize("how", ["close", "collect"])
def test_closing_a_loader_with_workers_stuck_in_samples_takes_one_short_deadline_not_one_per_worker(how):
    """Four workers stuck on I/O cost one short deadline at close(), break or collection (under 2.5 s), not 5 s each."""
    import time

    stuck = threading.Event()
    entered = threading.Semaphore(0)

    class Stuck:
        def __len__(self):
            return 64

        def __getitem__(self, i):
            entered.release()
            stuck.wait(60)  # I/O that does not come back while the loader closes
            return i

    try:
        it = iter(ss.DataLoader(Stuck(), 16, workers=4, collate=list))
        assert all(entered.acquire(timeout=10) for _ in range(4))  # every worker is inside a sample
        t0 = time.monotonic()
        if how == "close":
            it.close()
        else:
            del it  # what a break out of the loop leaves to the iterator's finalizer
        elapsed = time.monotonic() - t0
    finally:
        stuck.set()
    assert elapsed < 2.5, f"{how} took {elapsed:.1f} s with 4 stuck workers"


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_a_user_collate_names_the_batch(workers):
    def collate(samples):
        if 6 in samples:
            raise ValueError("cannot collate")
        return samples

    with pytest.raises(ValueError, match="cannot collate") as info:
        list(ss.DataLoader(list(range(10)), 3, workers=workers, collate=collate))
    assert "raised by the collate function for batch 2 of epoch 0 (3 samples)" in "\n".join(info.value.__notes__)


def test_a_group_member_whose_dtype_widens_later_is_refused_like_default_collate_not_wrapped():
    """Written in place through ss.getobs_into, int64 1000 landed in the int8 batch as -24."""
    data = (np.arange(8), [np.int8(1)] * 4 + [np.int64(1000)] * 4)
    with pytest.raises(TypeError, match="observation 4 has dtype int64 which cannot be written into a buffer of dtype int8"):
        list(ss.DataLoader(data, 4))
    with pytest.raises(TypeError, match="casting could lose information"):
        ss.default_collate([ss.getobs(data, i) for i in (0, 4)])


@pytest.mark.parametrize("workers", [0, 2])
def test_an_empty_batch_is_refused_with_the_default_collate_whether_or_not_it_comes_first(workers):
    """It was a bare [] as the first batch handed out and a dict of empty arrays later."""
    for batches in ([[], [1, 2]], [[1, 2], []]):
        loader = ss.DataLoader(np.arange(8), batch_sampler=batches, workers=workers)
        with pytest.raises(ValueError, match="is empty .*the batch_sampler gave no indices"):
            list(loader)
    assert [b for b in ss.DataLoader(np.arange(8), batch_sampler=[[], [1]], collate=list)] == [[], [1]]


@pytest.mark.parametrize("workers", [0, 2])
def test_keep_going_passes_an_empty_batch_and_a_first_batch_that_fails_shapes_nothing(workers):
    """An empty batch is that batch's own error (the epoch goes on past it); a first batch whose
    samples do not stack leaves the buffers unshaped, so the next batch handed out shapes them."""

    class FirstIsShort:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return np.full(3 if i == 0 else 4, i)

    def run(data, **kwargs):
        out = []
        iterator = ss.DataLoader(data, workers=workers, **kwargs).__iter__(keep_going=True)
        while True:
            try:
                out.append(np.asarray(next(iterator)).tolist())
            except StopIteration:
                return out
            except ValueError as exc:
                out.append(type(exc).__name__)

    assert run(np.arange(6), batch_sampler=[[0, 1], [], [2, 3]]) == [[0, 1], "ValueError", [2, 3]]
    assert run(FirstIsShort(), batch_size=2) == ["ValueError"] + [[[i] * 4, [i + 1] * 4] for i in (2, 4, 6)]


class Box:
    """A plain container (no batch_spec): the loader shapes its buffers from the first batch."""

    def __init__(self, n: int = 6):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.full(3, i)


# -- a sampler's array is drawn whole (copied) each epoch ------------------------------------------


def test_sampler_array_mutated_during_the_epoch_does_not_change_the_epoch():
    """'A sized [sampler] is drawn whole each epoch': reshuffling the index array in place for the
    next epoch (inside the loop) must not change the epoch being loaded."""
    data = np.arange(12) * 10
    idx = np.arange(12)
    loader = ss.DataLoader(data, 4, sampler=idx)
    got = []
    for batch in loader:
        got.extend(batch.tolist())
        np.random.default_rng(0).shuffle(idx)  # the next epoch's order, prepared in place
    assert got == [i * 10 for i in range(12)]  # a view of the caller's array gave duplicates and missing samples


def test_sampler_array_mutated_out_of_range_is_never_read_silently_clipped():
    """Indices are validated once per epoch, then read with take(mode='clip'): indices that change
    after the check are clipped to the last sample without any error."""
    data = np.arange(12) * 10
    idx = np.arange(12)
    loader = ss.DataLoader(data, 4, sampler=idx)
    got = []
    for batch in loader:
        got.append(batch.tolist())
        idx[:] = 99  # out of range for 12 observations
    assert got == [[0, 10, 20, 30], [40, 50, 60, 70], [80, 90, 100, 110]]  # a view was clipped: [110] * 4


def test_batch_sampler_of_arrays_is_drawn_whole_each_epoch():
    data = np.arange(8) * 10
    batches = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    loader = ss.DataLoader(data, batch_sampler=batches)
    got = []
    for batch in loader:
        got.append(batch.tolist())
        for b in batches:
            b[:] = 7
    assert got == [[0, 10], [20, 30], [40, 50]]


# -- __iter__(keep_going=True) stays ------------------------------------------------------------------


def test_iter_keep_going_keyword_is_still_accepted():
    """Before: ``loader.__iter__(keep_going=True)`` (documented in __iter__'s docstring)."""

    class Bad(Box):
        def __getitem__(self, i):
            if i == 2:
                raise KeyError(i)
            return super().__getitem__(i)

    it = ss.DataLoader(Bad(6), 2).__iter__(keep_going=True)
    out = []
    for _ in range(4):
        try:
            out.append(next(it).tolist())
        except KeyError:
            out.append("KeyError")
        except StopIteration:
            break
    assert out == [[[0] * 3, [1] * 3], "KeyError", [[4] * 3, [5] * 3]]


# -- the argument checks keep their order and exception types -----------------------------------------


def test_sampler_is_checked_before_timeout():
    with pytest.raises(TypeError, match="sampler must be an iterable"):
        ss.DataLoader(np.arange(5), sampler=5, timeout=-1)


def test_order_is_checked_before_worker_init_and_backend():
    with pytest.raises(ValueError, match="order must be one of"):
        ss.DataLoader(np.arange(5), order="bogus", worker_init=3)
    with pytest.raises(ValueError, match="order must be one of"):
        ss.DataLoader(np.arange(5), order="bogus", backend="bogus")


def test_batch_sampler_exclusions_are_checked_before_timeout():
    with pytest.raises(ValueError, match="batch_sampler excludes"):
        ss.DataLoader(np.arange(5), batch_sampler=[[0]], batch_size=2, timeout=0)


def test_quasi_random_needs_page_starts_checked_before_backend():
    with pytest.raises(TypeError, match="page_starts"):
        ss.DataLoader(np.arange(5), order="quasi_random", backend="bogus")


def test_a_non_string_order_is_a_value_error():
    with pytest.raises(ValueError, match=r"order must be one of \['quasi_random', 'random', 'sequential'\], got 5"):
        ss.DataLoader(np.arange(5), order=5)


def test_len_of_an_unsized_batch_sampler_keeps_its_message():
    class Unsized:
        def __iter__(self):
            return iter([[0, 1], [2]])

    with pytest.raises(TypeError, match=r"^len\(\) is unknown: the sampler has no __len__"):
        len(ss.DataLoader(np.arange(5), batch_sampler=Unsized()))


# -- user attributes named like the loader's hooks do not break it -------------------------------------


def test_an_epoch_attribute_on_the_loader_does_not_break_iteration():
    loader = ss.DataLoader(np.arange(6), 2)
    loader.epoch = 0
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


def test_a_shape_attribute_on_the_loader_does_not_break_iteration():
    loader = ss.DataLoader(Box(4), 2)
    loader.shape = (3,)
    assert [b.shape for b in loader] == [(2, 3), (2, 3)]


def test_what_the_loader_is_built_from_is_fixed_once_it_is_made():
    """Setting batch_size (or the sampler, workers, ...) after the fact would leave the batches,
    len() and the state_dict disagreeing: it raises, as torch's DataLoader does."""
    loader = ss.DataLoader(np.arange(12), 4)
    for name, value in (("batch_size", 6), ("sampler", [0]), ("workers", 2), ("worker_init", print)):
        with pytest.raises(AttributeError, match=f"DataLoader.{name} is fixed once the loader is made"):
            setattr(loader, name, value)
    loader.seed = 3  # the seed is not: the next epoch uses it
    assert [b.tolist() for b in loader] == [b.tolist() for b in ss.DataLoader(np.arange(12), 4, seed=3)]


def test_the_checked_arguments_are_one_frozen_options_that_the_attributes_read():
    loader = ss.DataLoader(np.arange(12), np.int64(4), shuffle=True, seed=5, workers=2, prefetch=3)
    options = loader.options
    assert isinstance(options, Options) and dataclasses.is_dataclass(options)
    assert (options.batch_size, options.order, options.finish_ahead, options.workers) == (4, "random", 3, 2)
    assert type(loader.batch_size) is int and loader.order == "random" and loader.shuffle and loader.finish_ahead == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_size = 6
    assert loader._backend.options is options  # the backend reads the same options
    loader.seed = 7  # a new seed makes new options
    assert loader.options.seed == loader.seed == 7 and options.seed == 5


def test_a_seed_set_later_and_a_restart_worker_init_are_checked_as_the_arguments_are():
    loader = ss.DataLoader(np.arange(12), 4, seed=1)
    for bad, error in ((-1, ValueError), ("3", TypeError), (None, TypeError)):
        with pytest.raises(error, match="seed must be an integer >= 0"):
            loader.seed = bad
    assert loader.seed == 1
    with pytest.raises(TypeError, match="worker_init must be a callable or None, got int"):
        loader.restart_workers(3)
    loader.restart_workers(print)
    assert loader.worker_init is print and loader.options.worker_init is print


# -- workers="auto" ------------------------------------------------------------------------------


def test_workers_auto_is_the_cores_this_process_may_use_and_gives_workers_0s_batches(monkeypatch):
    from slipstream.core.cpus import usable_cores

    loader = ss.DataLoader(Plain(), 4, shuffle=True, seed=5, workers="auto")
    assert loader.workers == usable_cores() and isinstance(loader.workers, int)
    single = ss.DataLoader(Plain(), 4, shuffle=True, seed=5)
    reference = [snapshot(b) for _ in range(2) for b in single]
    got = [snapshot(b) for _ in range(2) for b in loader]
    assert len(got) == len(reference)
    for k, (x, y) in enumerate(zip(got, reference)):
        assert_same(x, y, f"batch {k}")
    # resolved through usable_cores (affinity and cgroup quota), not os.cpu_count()
    monkeypatch.setattr("slipstream.core.arguments.usable_cores", lambda: 3)
    assert ss.DataLoader(Plain(), 4, workers="auto").workers == 3


@pytest.mark.parametrize(
    "value, error, message",
    [
        ("all", ValueError, "workers must be an integer >= 0 or 'auto', got 'all'"),
        ("Auto", ValueError, "workers must be an integer >= 0 or 'auto', got 'Auto'"),
        ("4", ValueError, "workers must be an integer >= 0 or 'auto', got '4'"),
        (2.0, TypeError, "workers must be an integer >= 0 or 'auto', got float 2.0"),
        (None, TypeError, "workers must be an integer >= 0 or 'auto', got NoneType None"),
    ],
)
def test_workers_other_than_an_integer_or_auto_are_refused(value, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        ss.DataLoader(Plain(), 4, workers=value)
