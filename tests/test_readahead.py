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
