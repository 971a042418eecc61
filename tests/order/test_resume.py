"""Elastic resume: a state saved by the ranks of an N-rank job, loaded by M ranks (``order.resume``)."""

import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss


class Paged:
    """Samples are their own index; pages of 5 (for "quasi_random")."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.int64(i)

    def page_starts(self):
        return np.arange(0, self.n, 5)


class EpochSampler:
    """A sized sampler whose global order is a pure function of its epoch (not sharded by rank)."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(np.random.default_rng(self.epoch).permutation(self.n).tolist())


ORDERS = ["sequential", "random", "quasi_random", "sampler"]


def loader(n, batch_size, rank, world, drop_last, order, **kwargs):
    if order == "sampler":
        kwargs["sampler"] = EpochSampler(n)
    else:
        kwargs["order"] = order
    return ss.DataLoader(Paged(n), batch_size, drop_last=drop_last, rank=rank, world_size=world, seed=3, **kwargs)


def take(it, count):
    return [next(it).tolist() for _ in range(count)]


@st.composite
def jobs(draw):
    n = draw(st.integers(0, 90))
    return dict(
        n=n, order=draw(st.sampled_from(ORDERS)),
        old=(draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.booleans())),  # world, batch size, drop_last
        new=(draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.booleans())),
        stop=draw(st.floats(0, 1)), saver=draw(st.integers(0, 4)),
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(jobs())
def test_an_epoch_resumed_on_other_ranks_loses_nothing_and_repeats_only_padding(job):
    n, order, (w1, b1, d1), (w2, b2, d2) = job["n"], job["order"], job["old"], job["new"]
    old = [loader(n, b1, r, w1, d1, order) for r in range(w1)]
    total = len(old[0])
    stop = min(int(job["stop"] * total), max(total - 1, 0))
    iters = [iter(x) for x in old]
    before = [take(it, stop) for it in iters]
    state = json.loads(json.dumps(old[job["saver"] % w1].state_dict()))  # any one rank's state
    new = [loader(n, b2, r, w2, d2, order) for r in range(w2)]
    for x in new:
        x.load_state_dict(state)
    after = [[b.tolist() for b in x] for x in new]
    assert len({len(a) for a in after}) == 1  # equal batch counts on every new rank
    assert all(len(batch) == b2 for a in after for batch in a[:-1])
    if d2:
        assert all(len(batch) == b2 for a in after for batch in a)
    seen = Counter(i for part in (before, after) for rank in part for batch in rank for i in batch)
    left = n - sum(len(batch) for rank in before for batch in rank)
    if not total:  # an empty epoch (drop_last, too few samples) is over at once: the next is a fresh one
        assert state["epoch"] == 1
        assert after == [[b.tolist() for b in _epoch(loader(n, b2, r, w2, d2, order), 1)] for r in range(w2)]
        return
    if d2:
        assert all(c == 1 for c in seen.values())  # nothing twice
        assert n - len(seen) == left % (w2 * b2)  # dropped: less than one global batch of the rest
    else:
        assert set(seen) == set(range(n))  # nothing lost
        assert sum(seen.values()) - n == math.ceil(left / w2) * w2 - left  # twice: only the new padding
    # the following epoch is the one a fresh M-rank run gives
    for r, x in enumerate(new):
        assert [b.tolist() for b in x] == [b.tolist() for b in _epoch(loader(n, b2, r, w2, d2, order), 1)]


def _epoch(x, epoch):
    x.load_state_dict({**x.state_dict(), "epoch": epoch})
    return list(x)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.sampled_from(ORDERS), st.integers(1, 4), st.integers(1, 5), st.booleans(), st.data())
def test_the_same_ranks_continue_exactly_from_any_ranks_state(n, order, world, batch_size, drop_last, data):
    ranks = [loader(n, batch_size, r, world, drop_last, order) for r in range(world)]
    full = [[b.tolist() for b in x] for x in ranks]
    stop = data.draw(st.integers(0, len(full[0])))
    saver = loader(n, batch_size, data.draw(st.integers(0, world - 1)), world, drop_last, order)
    take(iter(saver), stop)
    state = saver.state_dict()
    for r in range(world):
        again = loader(n, batch_size, r, world, drop_last, order)
        again.load_state_dict(state)
        if stop < len(full[r]):
            assert [b.tolist() for b in again] == full[r][stop:]
        else:  # the epoch was over: the next one
            assert [b.tolist() for b in again] == [b.tolist() for b in _epoch(loader(n, batch_size, r, world, drop_last, order), 1)]


def test_a_resumed_epoch_can_move_again():
    """8 ranks -> 3 ranks -> 5 ranks, with other batch sizes, mid-epoch each time: one epoch."""
    n, seen = 200, Counter()
    first = [loader(n, 4, r, 8, False, "random") for r in range(8)]
    for x in first:
        seen.update(i for batch in take(iter(x), 2) for i in batch)
    state = first[5].state_dict()
    second = [loader(n, 6, r, 3, False, "random") for r in range(3)]
    for x in second:
        x.load_state_dict(state)
        seen.update(i for batch in take(iter(x), 3) for i in batch)
    state = json.loads(json.dumps(second[0].state_dict()))
    assert state["deal"]["consumed"] == 64 and state["world_size"] == 3
    third = [loader(n, 5, r, 5, False, "random") for r in range(5)]
    for x in third:
        x.load_state_dict(state)
        seen.update(i for batch in x for i in batch.tolist())
    assert set(seen) == set(range(n))  # nothing lost
    assert sum(seen.values()) == n + 3  # 200 - 64 - 54 = 82 left for 5 ranks: 3 padded, nothing else twice


def test_out_of_order_ranks_resume_elsewhere_from_all_their_states():
    n, world = 120, 3
    old = [loader(n, 4, r, world, False, "random", workers=2, in_order=False, prefetch=4) for r in range(world)]
    seen = Counter()
    for x in old:
        it = iter(x)
        seen.update(i for batch in take(it, 3) for i in batch)
        it.close()
    states = [x.state_dict() for x in old]
    new = [loader(n, 5, r, 2, False, "random") for r in range(2)]
    ahead = {**states[0], "done_ahead": [states[0]["batch"] + 1]}  # one rank's overtaking batch: its own
    with pytest.raises(ValueError, match="pass the states of all ranks"):
        new[0].load_state_dict(ahead)
    for x in new:
        x.load_state_dict(states)
        seen.update(i for batch in x for i in batch.tolist())
    assert set(seen) == set(range(n))
    assert sum(seen.values()) - n < 2  # padding of the new deal only


def test_states_that_do_not_belong_together_are_refused():
    a = loader(40, 4, 0, 2, False, "random")
    b = loader(40, 4, 1, 2, False, "random")
    take(iter(a), 2), take(iter(b), 2)
    state_a, state_b = a.state_dict(), b.state_dict()
    target = loader(40, 4, 0, 3, False, "random")
    with pytest.raises(ValueError, match="one per rank"):
        target.load_state_dict([state_a, state_a])
    with pytest.raises(ValueError, match="disagree on seed"):
        target.load_state_dict([state_a, {**state_b, "seed": 4}])
    with pytest.raises(ValueError, match="order='random' but this loader has order='sequential'"):
        loader(40, 4, 0, 3, False, "sequential").load_state_dict(state_a)
    with pytest.raises(ValueError, match="num_observations=40"):
        loader(41, 4, 0, 3, False, "random").load_state_dict(state_a)
    target.load_state_dict([state_b, state_a])  # in any order
    assert len(list(target)) == math.ceil((40 - 16) / 3 / 4)


def test_an_order_object_resumes_only_with_the_same_batching():
    class Halves:
        source = "halves"

        def batches(self, epoch, n, seed):
            return [np.arange(0, n // 2), np.arange(n // 2, n)]

        def num_batches(self, n):
            return 2

    a = ss.DataLoader(Paged(10), order=Halves())
    take(iter(a), 1)
    b = ss.DataLoader(Paged(10), order=Halves())
    b.load_state_dict(a.state_dict())
    assert [x.tolist() for x in b] == [list(range(5, 10))]
    c = ss.DataLoader(Paged(10), order=Halves(), rank=1, world_size=2)
    with pytest.raises(ValueError, match="only the built-in orders and sized samplers"):
        c.load_state_dict(a.state_dict())


def test_a_batch_sampler_moves_whole_batches():
    batches = [[k, k + 21] for k in range(21)]
    old = [ss.DataLoader(Paged(42), batch_sampler=batches, rank=r, world_size=4) for r in range(4)]
    seen = [b for x in old for b in take(iter(x), 2)]
    new = [ss.DataLoader(Paged(42), batch_sampler=batches, rank=r, world_size=3) for r in range(3)]
    for x in new:
        x.load_state_dict(old[2].state_dict())
        after = [b.tolist() for b in x]
        assert len(after) == 5  # 13 batches left, dealt to 3 ranks: padded with 2
        seen += after
    counts = Counter(map(tuple, seen))
    assert set(counts) == set(map(tuple, batches)) and sum(counts.values()) == 21 + 2


def test_a_version_1_state_still_loads():
    x = loader(20, 2, 0, 1, False, "random")
    x.load_state_dict({"version": 1, "seed": 3, "epoch": 0, "batch": 4, "num_observations": 20, "world_size": 1, "rank": 0, "batch_size": 2})
    assert len(list(x)) == 6


def test_a_one_rank_out_of_order_state_moves_with_its_overtaking_batches():
    """A world_size=1 state with done_ahead resumes on other batching (its overtaking batches are every rank's)."""
    old = loader(40, 4, 0, 1, False, "sequential")
    state = {**old.state_dict(), "batch": 2, "done_ahead": [4]}  # batches 0, 1 and 4 were handed out
    new = [loader(40, 4, r, 2, False, "sequential") for r in range(2)]
    seen = set()
    for x in new:
        x.load_state_dict(state)
        seen |= {i for batch in x for i in batch.tolist()}
    assert seen == set(range(40)) - set(range(8)) - set(range(16, 20))


def test_an_empty_epoch_resumed_elsewhere_keeps_its_number():
    """An empty epoch (n=0) resumed on other batching keeps its epoch number (nothing left is not a finished epoch)."""
    state = {**loader(0, 2, 0, 1, False, "random").state_dict(), "epoch": 1}
    x = loader(0, 3, 0, 2, False, "random")
    x.load_state_dict(state)
    assert x.state_dict()["epoch"] == 1 and iter(x).epoch == 1


def test_bad_lists_and_fields_are_refused():
    """States that do not describe one job at one step are refused, each naming what is wrong."""
    ranks = [loader(40, 4, r, 2, False, "random") for r in range(2)]
    for x in ranks:
        take(iter(x), 2)
    a, b = (x.state_dict() for x in ranks)
    target = loader(40, 4, 0, 3, False, "random")
    cases = [
        ([a], "one per rank"),  # a list is all ranks: one of two is not
        ({**a, "rank": 7}, "not a rank of its world_size 2"),
        ([{**a, "deal": {"consumed": 2, "extra": ""}}, b], "disagree on deal"),
        ([{**a, "epoch": 5, "batch": 0}, b], "more than one epoch apart"),
        ({**a, "deal": {"consumed": 10**6, "extra": ""}}, "the data changed"),
    ]
    for state, message in cases:
        for into in (target, loader(40, 4, 0, 2, False, "random")):  # elastic and same batching alike
            with pytest.raises(ValueError, match=message):
                into.load_state_dict(state)
    with pytest.raises(TypeError, match="drop_last"):
        target.load_state_dict({**a, "drop_last": "no"})


def test_overtaking_batches_past_the_end_do_not_break_len():
    x = loader(20, 4, 0, 1, False, "sequential")
    x.load_state_dict({**x.state_dict(), "batch": 1, "done_ahead": [3, 99]})
    it = iter(x)
    assert len(it) == 3 and [b.tolist()[0] for b in it] == [4, 8, 16]


def test_a_shuffled_order_over_ranks_needs_a_seed():
    with pytest.raises(ValueError, match="needs seed="):
        ss.DataLoader(Paged(10), 2, shuffle=True, rank=0, world_size=2)
    ss.DataLoader(Paged(10), 2, rank=0, world_size=2)  # sequential: the same on every rank anyway


def test_a_state_counting_more_batches_than_the_epoch_has_is_refused():
    x = loader(20, 4, 0, 1, False, "random")
    with pytest.raises(ValueError, match="state\\['batch'\\] is 9, but rank 0's epoch 0 has 5 batches"):
        x.load_state_dict({**x.state_dict(), "batch": 9})


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_packed_file_in_quasi_random_order_moves_from_two_ranks_to_three(tmp_path, backend):
    """The whole path: a packed file (12 pages of 5 samples), quasi_random order, workers on each rank."""
    from slipstream import fields as F

    path = ss.write(tmp_path / "d.arrow", [{"i": i} for i in range(60)], {"i": F.Int()}, page_size=40)
    data = ss.open(path)

    def make(rank, world, batch_size):
        return ss.DataLoader(data, batch_size, order="quasi_random", seed=5, rank=rank, world_size=world, workers=2, backend=backend)

    seen = Counter()
    for rank in range(2):
        with make(rank, 2, 4) as x:
            it = iter(x)
            seen.update(i for _ in range(3) for i in next(it)["i"].tolist())
            state = x.state_dict()
            it.close()
    for rank in range(3):
        with make(rank, 3, 5) as x:
            x.load_state_dict(json.loads(json.dumps(state)))
            seen.update(i for batch in x for i in batch["i"].tolist())
    assert set(seen) == set(range(60)) and sum(seen.values()) == 60  # 36 left for 3 ranks: no padding


# -- what a state is refused for -----------------------------------------------------------------


def _written(tmp_path, name, page_size, n=200, fields=("i",)):
    from slipstream import fields as F

    rows = [{f: i for f in fields} for i in range(n)]
    return ss.write(tmp_path / name, rows, {f: F.Int() for f in fields}, page_size=page_size)


def test_a_quasi_random_state_is_refused_over_the_same_samples_written_with_another_page_size(tmp_path):
    """Before: the state was taken, and 50 of 200 samples came twice, 50 never."""
    small, large = _written(tmp_path, "small.arrow", 80), _written(tmp_path, "large.arrow", 200)
    assert ss.open(small).num_pages != ss.open(large).num_pages

    def make(path, **kwargs):
        return ss.DataLoader(ss.open(path), 10, order="quasi_random", seed=1, **kwargs)

    old = make(small)
    it = iter(old)
    seen = Counter(i for _ in range(10) for i in next(it)["i"].tolist())
    state = json.loads(json.dumps(old.state_dict()))
    assert state["num_pages"] == ss.open(small).num_pages and isinstance(state["page_layout"], str)
    with pytest.raises(ValueError, match="num_pages=.*page_layout=.*this loader's data has num_pages=.*another page size"):
        make(large).load_state_dict(state)
    with pytest.raises(ValueError, match="page_layout"):  # on other ranks (elastic) alike
        make(large, rank=1, world_size=2).load_state_dict(state)
    again = make(_written(tmp_path, "same.arrow", 80))  # the same samples and pages, written again
    again.load_state_dict(state)
    seen.update(i for batch in again for i in batch["i"].tolist())
    assert seen == Counter(range(200))
    # between epochs nothing of the epoch was handed out: any page layout resumes it
    between = {**state, "epoch": 1, "batch": 0}
    fresh = make(large)
    fresh.load_state_dict(between)
    assert sorted(i for batch in fresh for i in batch["i"].tolist()) == list(range(200))
    # a state saved before the layout was recorded is taken as it was (module doc of order.resume)
    older = {k: v for k, v in state.items() if k not in ("num_pages", "page_layout", "fields")}
    make(large).load_state_dict(older)


def test_the_other_orders_do_not_depend_on_the_page_layout(tmp_path):
    small, large = _written(tmp_path, "small.arrow", 80), _written(tmp_path, "large.arrow", 200)
    for order in ("random", "sequential"):
        old = ss.DataLoader(ss.open(small), 10, order=order, seed=1)
        it = iter(old)
        seen = [i for _ in range(5) for i in next(it)["i"].tolist()]
        state = old.state_dict()
        assert "page_layout" not in state
        new = ss.DataLoader(ss.open(large), 10, order=order, seed=1)
        new.load_state_dict(state)
        assert sorted(seen + [i for batch in new for i in batch["i"].tolist()]) == list(range(200))


def test_a_state_over_other_fields_is_refused(tmp_path):
    path = _written(tmp_path, "d.arrow", 80, n=40, fields=("i", "j"))
    old = ss.DataLoader(ss.open(path), 4, shuffle=True, seed=3)
    next(iter(old))
    state = json.loads(json.dumps(old.state_dict()))
    assert state["fields"] == ["i", "j"]
    with pytest.raises(ValueError, match=r"fields=\['i', 'j'\] but this loader has fields=\['i'\].*remove 'fields'"):
        ss.DataLoader(ss.open(path, fields=["i"]), 4, shuffle=True, seed=3).load_state_dict(state)
    other = ss.DataLoader(ss.open(path, fields=["i"]), 4, shuffle=True, seed=3)
    other.load_state_dict({k: v for k, v in state.items() if k != "fields"})  # the documented way to resume anyway
    assert len(list(other)) == 9
    ss.DataLoader(ss.open(path, fields=["j", "i"]), 4, shuffle=True, seed=3).load_state_dict(state)  # names, not their order
    assert "fields" not in loader(10, 2, 0, 1, False, "random").state_dict()  # data that declares none records none


def test_an_explicit_seed_that_conflicts_with_the_state_is_refused_not_replaced():
    """Before: load_state_dict silently replaced seed=2 by the state's 1."""
    old = loader(40, 4, 0, 1, False, "random")  # seed=3
    take(iter(old), 2)
    state = old.state_dict()
    other = ss.DataLoader(Paged(40), 4, order="random", seed=4)
    with pytest.raises(ValueError, match="state was saved with seed=3 but this loader was made with seed=4.*seed=3"):
        other.load_state_dict(state)
    assert other.seed == 4 and other.state_dict()["batch"] == 0  # nothing changed
    with pytest.raises(ValueError, match="seed=3 but this loader was made with seed=4"):  # elastic too
        ss.DataLoader(Paged(40), 5, order="random", seed=4, rank=0, world_size=2).load_state_dict(state)
    drawn = ss.DataLoader(Paged(40), 4, order="random")  # no seed=: the state's is taken
    drawn.load_state_dict(state)
    assert drawn.seed == 3 and [b.tolist() for b in drawn] == [b.tolist() for b in _rest(state)]


def _rest(state):
    x = loader(40, 4, 0, 1, False, "random")
    x.load_state_dict(state)
    return list(x)
