"""slipstream.torch._todevice: the device argument read by core.devices.device_name, and the in-line
copy run by core.lookahead (errors pass through and the epoch goes on, the source closed once)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from slipstream.torch import _todevice  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_an_int_device_is_a_cuda_index_as_everywhere_else_in_slipstream():
    with pytest.raises(RuntimeError, match=r"device=0 asks for CUDA"):
        _todevice._check_device(0)


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu"), "cpu:0"])
def test_the_cpu_is_no_device(device):
    assert _todevice._check_device(device) is None


@pytest.mark.parametrize("device", ["nonsense", "cuda:-1", True, 1.5, b"cuda"])
def test_what_is_not_a_device_is_a_value_error(device):
    with pytest.raises(ValueError, match="device must be"):
        _todevice._check_device(device)


class Epoch:
    """Batches 0..n-1 as tensors; ``fail`` positions raise (and the epoch goes on, as torch's does)."""

    def __init__(self, n, fail=()):
        self.n, self.fail, self.k, self.closes = n, set(fail), 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        k = self.k
        if k >= self.n:
            raise StopIteration
        self.k += 1
        if k in self.fail:
            raise ValueError(f"batch {k}")
        return {"x": torch.full((2,), k)}

    def close(self):
        self.closes += 1

    @property
    def closed(self):
        return self.closes > 0


def test_copies_in_line_pass_an_error_through_and_go_on():
    epoch = Epoch(5, fail={2})
    moved = _todevice._to_device(epoch, torch.device("cpu"))
    got = []
    while True:
        try:
            got.append(int(next(moved)["x"][0]))
        except ValueError:
            got.append(-1)
            assert epoch.k == 3 and not moved.closed  # in line: nothing taken ahead, and the epoch goes on
        except StopIteration:
            break
    assert got == [0, 1, -1, 3, 4]
    assert epoch.closes == 1 and moved.closed
    moved.close()
    assert epoch.closes == 1
