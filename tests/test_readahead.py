"""loading.readahead: remote data hears of each batch's indices before the batch is planned."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import slipstream as ss
from slipstream.loading.readahead import hint_of, read_ahead


@given(n=st.integers(0, 30), depth=st.integers(0, 10))
def test_batches_pass_unchanged_and_each_is_hinted_depth_ahead(n, depth):
    heard: list[int] = []
    out = []
    pairs = ((k, k) for k in range(n))
    for k, b in read_ahead(pairs, heard.append, depth):
        out.append((k, b))
        assert heard == (list(range(min(n, k + 1 + depth))) if depth >= 1 else [])  # batch k + depth heard of by now
    assert out == [(k, k) for k in range(n)]
    assert heard == (list(range(n)) if depth >= 1 else [])


class _Remote:
    remote = True

    def __init__(self, n):
        self.n, self.hinted, self.read = n, [], []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read.append(i)
        return {"v": np.int64(i)}

    def prefetch(self, indices):
        self.hinted.append([int(i) for i in indices])


def test_the_loader_hints_remote_data_with_every_batch_and_local_data_never():
    data = _Remote(40)
    loader = ss.DataLoader(data, batch_size=4, shuffle=True, seed=3)
    batches = [b["v"].tolist() for b in loader]
    assert data.hinted == batches  # every batch hinted, in order, with the indices it then read
    assert hint_of(list(range(5))) is None
    assert hint_of(type("Local", (), {"prefetch": lambda self, i: None, "remote": False})()) is None


class _Paged(_Remote):
    """Remote data in pages of 7 observations (the last one short)."""

    def page_starts(self):
        return np.arange(0, self.n, 7, dtype=np.int64)


def _flat(hints):
    return [i for hint in hints for i in hint]


def test_views_pass_read_ahead_on_to_the_data_in_its_own_indices():
    for make, expect in [
        (lambda d: ss.splitobs(d, 0.5)[1], lambda v: [20 + i for i in v]),
        (lambda d: ss.obsview(d, np.arange(39, -1, -1)), lambda v: [39 - i for i in v]),
        (lambda d: ss.splitobs(d, 0.5, shuffle=True, seed=4)[0], None),
        (lambda d: ss.mapobs(lambda s: s, d), lambda v: list(v)),
        (lambda d: ss.obsview(ss.mapobs(lambda s: s, d), np.arange(10, 40)), lambda v: [10 + i for i in v]),
    ]:
        data = _Paged(40)
        view = make(data)
        assert view.remote and hint_of(view) is not None
        with ss.DataLoader(view, batch_size=4, shuffle=True, seed=3) as loader:
            for _ in loader:
                pass
        assert sorted(_flat(data.hinted)) == sorted(data.read)  # each sample it read, hinted first, as the data's own index
        if expect is not None:
            positions = np.random.default_rng(0).permutation(len(view))[:5]
            data.hinted.clear()
            view.prefetch(positions)
            assert _flat(data.hinted) == expect(positions.tolist())


def test_joinobs_and_batchview_pass_read_ahead_on_to_the_parts_they_read():
    a, b, local = _Paged(10), _Paged(12), list(range(5))
    joined = ss.joinobs(a, local, b)
    assert joined.remote
    joined.prefetch([0, 9, 10, 14, 15, 26, 99, -1])  # out of range: dropped; local data: nothing to hint
    assert a.hinted == [[0, 9]] and b.hinted == [[0, 11]]
    batches = ss.batchview(a, 4)
    assert batches.remote
    batches.prefetch([0, 2])
    assert a.hinted[-1] == [0, 1, 2, 3, 8, 9]  # batch 2 is the short last one
    assert not ss.obsview(list(range(5)), [1]).remote and hint_of(ss.mapobs(abs, [1, 2])) is None


def test_quasi_random_reads_a_view_page_by_page():
    data = _Paged(40)
    part = ss.splitobs(data, 0.55)[1]  # observations 22..39: the data's pages, cut at the view's start
    assert part.page_starts().tolist() == [0, 6, 13]
    with ss.DataLoader(part, batch_size=3, order="quasi_random", seed=5) as loader:
        order = [int(v) for batch in loader for v in batch["v"]]
    assert sorted(order) == list(range(22, 40))
    assert ss.mapobs(lambda s: s, data).page_starts().tolist() == data.page_starts().tolist()
    assert ss.joinobs(data, _Paged(9)).page_starts().tolist() == [0, 7, 14, 21, 28, 35, 40, 47]
    shuffled = ss.splitobs(data, 0.5, shuffle=True, seed=1)[0]
    runs = shuffled.page_starts()
    pages = np.asarray(shuffled.indices) // 7
    assert runs[0] == 0 and all(len(set(pages[a:b])) == 1 for a, b in zip(runs, [*runs[1:], len(shuffled)]))
    assert not hasattr(ss.obsview(list(range(5)), [1, 2]), "page_starts")  # no pages under it: none in the view
    assert not hasattr(ss.joinobs(data, list(range(3))), "page_starts")


def test_hints_for_other_processes_are_given_for_the_shared_cache_only():
    from slipstream.remote import pages

    seen = []

    class Watching(_Remote):
        def prefetch(self, indices):
            seen.append(pages._SHARED_ONLY.get())

    data = Watching(4)
    hint_of(data)([0])
    hint_of(data, elsewhere=True)([1])
    hint_of(data)([2])
    assert seen == [False, True, False]
