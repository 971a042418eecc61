"""What the drop-in reads of torch's DataLoader (``_compat``) and what an epoch keeps of its loader.

The helpers of ``slipstream.torch`` read a ``LoaderContext`` built by the loader rather than the
loader itself; the torch attributes behind it are read by ``_compat``, whose values are checked here
against torch's own meaning, and an epoch's iterator still keeps its loader alive.
"""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from slipstream.torch import DataLoader, _compat


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(6))

    def __len__(self) -> int:
        return 6


def test_compat_reads_torchs_batching_and_index_sampler():
    unbatched = DataLoader(list(range(10)), batch_size=None)
    assert not _compat.is_iterable(unbatched) and not _compat.auto_collation(unbatched)
    assert _compat.index_sampler(unbatched) is unbatched.sampler
    batched = DataLoader(list(range(10)), batch_size=3)
    assert _compat.auto_collation(batched)
    assert _compat.index_sampler(batched) is batched.batch_sampler
    assert len(batched) == len(_compat.index_sampler(batched)) == 4


def test_compat_reads_the_length_reported_for_an_iterable_dataset():
    loader = DataLoader(_Stream(), batch_size=2)
    assert _compat.is_iterable(loader)
    assert _compat.reported_length(loader) is None
    assert len(loader) == 3
    assert _compat.reported_length(loader) == 6  # torch keeps len(dataset), the warning's bound


def test_an_epoch_of_a_dropped_loader_goes_on_with_its_persistent_workers():
    """Collecting a loader stops its persistent worker processes: its epoch's iterator keeps it."""
    epoch = iter(DataLoader(_Stream(), batch_size=2, num_workers=1, persistent_workers=True))
    gc.collect()
    assert [batch.tolist() for batch in epoch] == [[0, 1], [2, 3], [4, 5]]
