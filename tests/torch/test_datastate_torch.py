"""order.datastate through the torch drop-in: a stateful dataset's state is in ``state_dict()`` at
every point, also before the first epoch (when slipstream's own loader does not exist yet).

``Dial`` (tests/support/statedata.py): item ``i`` is ``[i, value]``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from statedata import Dial

torch = pytest.importorskip("torch")
from slipstream.torch import DataLoader as TorchLoader  # noqa: E402

BS = 4


def values(loader):
    return [b[:, 1].tolist() for b in loader]


def test_a_change_pending_before_the_first_epoch_is_in_the_state_and_resumes():
    data = Dial(24)
    loader = TorchLoader(data, batch_size=BS)
    data.set(5)  # settles at the first epoch's start
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = Dial(24)
    resumed = TorchLoader(fresh, batch_size=BS)
    resumed.load_state_dict(state)
    assert fresh.pending == 5 and resumed.state_dict() == state
    assert values(resumed) == values(loader) == [[5] * BS] * 6


def test_a_state_with_data_before_the_first_epoch_is_refused_by_a_dataset_without_state():
    state = TorchLoader(Dial(24), batch_size=BS).state_dict()
    plain = TorchLoader(np.zeros((24, 2)), batch_size=BS)
    with pytest.raises(ValueError, match="no state_dict/load_state_dict"):
        plain.load_state_dict(state)
    refused = {**state, "data": {**state["data"], "n": 25}}
    target = Dial(24)
    with pytest.raises(ValueError, match="Dial of 25 items"):
        TorchLoader(target, batch_size=BS).load_state_dict(refused)
    assert target.loads == 0


class _Core:
    """slipstream's loader as the drop-in's epoch record sees it: a state that moves on."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return json.loads(json.dumps(self.state))


def test_with_the_cuda_prefetcher_the_checkpoint_has_the_position_of_the_batch_handed_out_and_the_live_data_state():
    from slipstream.torch._record import EpochRecord

    record = EpochRecord(0, counts_pulls=False, begun=True)
    core = _Core({"batch": 1, "data": {"pending": None}})
    record.took(core)  # the batch the user gets next
    record.handed = 1
    core.state = {"batch": 2, "data": {"pending": None}}
    record.took(core)  # the prefetcher takes one batch ahead
    core.state = {"batch": 2, "data": {"pending": 7}}  # the user changes the data after that pull
    assert record.core_state(core) == {"batch": 1, "data": {"pending": 7}}
