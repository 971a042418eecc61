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



class _Cache:
    """What a ``CacheWindow`` reads of a cache: its folder and limit; and which pages were retired."""

    def __init__(self, limit):
        self.folder, self.limit, self.retired = "/nowhere", limit, []

    def retire(self, key):
        self.retired.append(key)


class _Pages(_Paged):
    """Paged remote data whose hints go through the shared cache's window as ``RemotePages`` sends them."""

    def __init__(self, n, cache, length):
        super().__init__(n)
        self.cache, self.length, self.fetched, self.yielded = cache, length, [], 0

    def prefetch(self, indices):
        from slipstream.remote import pages

        window = pages._WINDOW.get()
        for p in sorted({int(i) // 7 for i in indices}):
            if window.admit(self.cache, f"page{p}", self.length):
                self.fetched.append((p, window.batch, self.yielded))
                assert window.used(self.cache) <= self.cache.limit  # what is read ahead fits beside what is being read


@given(n=st.integers(0, 60), size=st.integers(1, 9), held=st.integers(0, 12), lead=st.integers(0, 3), depth=st.integers(1, 12))
def test_read_ahead_for_other_processes_keeps_within_the_cache_and_behind_the_batches_the_workers_get_next(n, size, held, lead, depth):
    from slipstream.loading.readahead import SharedHint
    from slipstream.remote.cachedir import TAG

    cache = _Cache(held * (100 + TAG))
    data = _Pages(n, cache, 100)
    handed: set[int] = set()
    hint = hint_of(data, elsewhere=True, handed_out=handed.__contains__, lead=lead)
    assert isinstance(hint, SharedHint)
    batches = [np.arange(a, min(a + size, n)) for a in range(0, n, size)]
    out = []
    for k, indices in read_ahead(enumerate(batches), hint, depth):
        out.append(k)
        data.yielded += 1
        if k >= lead:  # the consumer got the batch given ``lead`` batches ago (as many are read at once)
            handed.add(k - lead)
    assert out == list(range(len(batches)))
    pages = [p for p, _, _ in data.fetched]
    assert len(pages) == len(set(pages))  # no page fetched twice (pages here are read by consecutive batches only)
    assert all(batch >= yielded + lead for _, batch, yielded in data.fetched)  # never among the next ``lead`` batches
    if held == 0:
        assert pages == []
    if held * 7 >= n + 7 and depth >= lead:  # room for every page: as plain read-ahead, every batch after the first ``lead``
        assert set(pages) == {int(i) // 7 for b in batches[lead:] for i in b} - {int(i) // 7 for b in batches[:lead] for i in b}
    assert set(cache.retired) <= {f"page{p}" for p in range(n // 7 + 1)}
