"""order.datastate: worker processes that start after a state was sent read the data as it is when
they start, not the older state the loader had sent to the workers before them.

``Dial`` (tests/support/statedata.py): item ``i`` is ``[i, value]``. Loaders run with ``timeout=`` so a hang
fails the test instead of holding the suite.
"""

from __future__ import annotations

import numpy as np
import pytest
from statedata import Dial

import slipstream as ss

BS = 4


def values(loader):
    return {int(v) for b in loader for v in np.asarray(b)[:, 1]}


@pytest.mark.parametrize("backend", ["process", "helper"])
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_fresh_workers_read_the_data_as_it_is_not_the_state_sent_to_the_workers_before(backend, context):
    data = Dial(40)
    loader = ss.DataLoader(data, batch_size=BS, workers=2, backend=backend, mp_context=context, seed=1, timeout=60)
    with loader:
        it = iter(loader)
        next(it)
        data.set(3)
        assert values(it) <= {0, 3}  # settled mid-epoch: the loader sent that state to its workers
        other = Dial(40)
        other.set(6)
        other.settle_changes(0)
        data.load_state_dict(other.state_dict())  # directly, not through the loader: running workers do not see it
        loader.restart_workers()  # ... fresh ones do, as they get the data as it is now
        assert values(loader) == {6}
