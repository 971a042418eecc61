"""slipstream.jax.device_prefetch: batches onto JAX devices, a bounded number in flight, never hanging."""

from __future__ import annotations

import collections
import gc
import sys
import threading
import time
import weakref

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from gpudata import assert_finish_threads_end, image_sets
from gpudata import snap as _snap
from helpers import run_python

import slipstream as ss
from slipstream import ops
from slipstream.jax import DevicePrefetch, device_prefetch

Pair = collections.namedtuple("Pair", "x y")


def batches(n: int = 5, rows: int = 4):
    """Batches of every shape the loader yields: dicts, tuples, namedtuples, lists, strings, scalars."""
    for k in range(n):
        base = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + 100 * k
        yield {
            "image": base,
            "label": np.arange(rows, dtype=np.int32) + k,
            "pair": Pair(base[:, 0].copy(), (np.full(rows, k, np.uint8), [np.ones(2, np.float64) * k])),
            "names": [f"s{k}-{i}" for i in range(rows)],
            "raw": np.array([b"ab", b"cd"]),
            "objects": np.array([{"a": 1}, None], dtype=object),
            "k": k,
        }


def assert_moved(host, dev, device=None) -> None:
    """``dev`` is ``host`` with numeric arrays as jax Arrays (on ``device``) and everything else unchanged."""
    if isinstance(host, np.ndarray) and host.dtype.kind in "biufc":
        assert isinstance(dev, jax.Array), type(dev)
        np.testing.assert_array_equal(np.asarray(dev), host)
        if device is not None:
            assert dev.devices() == {device}
    elif isinstance(host, dict):
        assert type(dev) is type(host) and dev.keys() == host.keys()
        for key in host:
            assert_moved(host[key], dev[key], device)
    elif isinstance(host, (tuple, list)):
        assert type(dev) is type(host) and len(dev) == len(host)
        for a, b in zip(host, dev):
            assert_moved(a, b, device)
    elif isinstance(host, np.ndarray):  # strings, bytes, objects: left on the host
        assert type(dev) is np.ndarray and dev.dtype == host.dtype
        np.testing.assert_array_equal(dev, host)
    else:
        assert type(dev) is type(host) and dev == host


# -- values and structure -------------------------------------------------------------------
def test_values_and_structure_are_kept_and_arrays_land_on_the_device():
    got = list(device_prefetch(batches()))
    assert len(got) == 5
    for want, batch in zip(batches(), got):
        assert_moved(want, batch, jax.devices()[0])


def test_parts_without_arrays_pass_through_as_the_same_objects():
    names = ["a", "b"]
    raw = np.array(["x", "y"])
    source = [{"names": names, "raw": raw, "x": np.zeros(2, np.float32), "none": None}]
    (batch,) = device_prefetch(source)
    assert batch["names"] is names and batch["raw"] is raw and batch["none"] is None
    assert isinstance(batch["x"], jax.Array)
    only_strings = [["a", "b"], ("c",)]
    assert next(iter(device_prefetch(only_strings))) is only_strings[0]


def test_bare_arrays_scalars_and_container_subclasses():
    ordered = collections.OrderedDict(b=np.ones(2, np.float32), a=np.zeros(2, np.float32))
    default = collections.defaultdict(list, x=np.ones(1, np.int32))
    got = list(device_prefetch([np.arange(3), np.float32(2.5), ordered, default]))
    assert isinstance(got[0], jax.Array) and np.asarray(got[0]).tolist() == [0, 1, 2]
    assert isinstance(got[1], jax.Array) and float(got[1]) == 2.5
    assert type(got[2]) is collections.OrderedDict and list(got[2]) == ["b", "a"]
    assert type(got[3]) is collections.defaultdict and got[3].default_factory is list
    assert isinstance(got[3]["x"], jax.Array)


def test_an_explicit_device_and_a_single_device_sharding():
    device = jax.devices()[-1]
    for target in (device, jax.sharding.SingleDeviceSharding(device)):
        for want, batch in zip(batches(2), device_prefetch(batches(2), device=target)):
            assert_moved(want, batch, device)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="iterable"):
        device_prefetch(3)
    with pytest.raises(ValueError, match="size"):
        device_prefetch([], size=0)
    with pytest.raises(TypeError, match="device"):
        device_prefetch([], device="gpu")


# -- len, passes ------------------------------------------------------------------------------
def test_len_passes_through_and_each_iter_is_a_fresh_pass():
    data = [np.full(2, k) for k in range(4)]
    wrapped = device_prefetch(data)
    assert isinstance(wrapped, DevicePrefetch) and len(wrapped) == 4
    assert [int(b[0]) for b in wrapped] == [0, 1, 2, 3] == [int(b[0]) for b in wrapped]
    with pytest.raises(TypeError):
        len(device_prefetch(b for b in data))
    once = device_prefetch(b for b in data)
    assert len(list(once)) == 4 and list(once) == []


def test_each_iter_is_the_next_epoch_of_a_loader():
    loader = ss.DataLoader(np.arange(40), batch_size=8, shuffle=True, seed=3)
    wrapped = device_prefetch(loader)
    assert len(wrapped) == 5
    epochs = [np.concatenate([np.asarray(b) for b in wrapped]) for _ in range(2)]
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(40))
    assert epochs[0].tolist() != epochs[1].tolist()


def test_the_iterator_counts_the_batches_left_when_the_source_does():
    loader = ss.DataLoader(np.arange(10), batch_size=2, workers=2)
    it = iter(device_prefetch(loader, size=3))
    assert len(it) == 5
    next(it)
    assert len(it) == 4
    it.close()


# -- how far ahead ----------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_the_source_is_read_exactly_size_minus_one_batches_ahead(size):
    n = 9
    pulled = [0]

    def source():
        for k in range(n):
            pulled[0] += 1
            yield np.full(2, k, np.int32)

    it = iter(device_prefetch(source(), size=size))
    assert pulled[0] == 0  # nothing happens before the first next()
    for k in range(n):
        batch = next(it)
        assert int(batch[0]) == k
        assert pulled[0] == min(n, k + size), f"holding batch {k}, {pulled[0]} pulled"
    with pytest.raises(StopIteration):
        next(it)


# -- host buffers -----------------------------------------------------------------------------
class FakeArray:
    """Stands in for a device array whose copy is still running until ``ready`` is set."""

    def __init__(self):
        self.ready, self.waited = False, False

    def is_ready(self):
        return self.ready

    def block_until_ready(self):
        self.waited = self.ready = True
        return self


def test_the_host_batch_is_held_until_its_copy_is_done(monkeypatch):
    fakes = []

    def fake_put(arrays, device=None):
        fakes.append([FakeArray() for _ in arrays])
        return fakes[-1]

    monkeypatch.setattr(jax, "device_put", fake_put)
    hosts = []

    def host(k):
        x = np.full(3, k)
        hosts.append(weakref.ref(x))
        return x

    def source():  # holds no reference to a batch it yielded
        for k in range(4):
            yield {"x": host(k), "names": ["a"]}

    it = iter(device_prefetch(source(), size=2))
    first = next(it)  # batch 0 was not ready: the adapter waited for it before handing it out
    assert fakes[0][0].waited and first["x"] is fakes[0][0]
    gc.collect()
    assert hosts[0]() is None  # ...and let go of its host arrays
    assert hosts[1]() is not None and not fakes[1][0].waited  # batch 1's copy runs: its host batch is held
    fakes[1][0].ready = True
    second = next(it)  # batch 2 queued; batch 1 was found ready without waiting
    assert second["x"] is fakes[1][0] and not fakes[1][0].waited
    gc.collect()
    assert hosts[1]() is None and hosts[2]() is not None
    it.close()  # closing waits for the copies still running, then drops their host batches
    gc.collect()
    assert fakes[2][0].waited and hosts[2]() is None


def test_a_close_from_another_thread_while_a_copy_is_queued_lets_go_of_every_host_batch(monkeypatch):
    """close() from another thread lands while the consumer's finish walks the batches in flight
    (it drops batches 1 and 2 from them), just before batch 3 is queued: no batch is left in flight,
    holding its host batch, and every copy still reading host memory was waited for."""
    fakes: list = []
    hosts: list = []
    it = None

    class ClosingArray(FakeArray):
        def is_ready(self):  # batch 1's readiness, asked by batch 3's finish: the other thread closes now
            if len(fakes) == 4 and self is fakes[1][0]:
                closer = threading.Thread(target=it.close)
                closer.start()
                closer.join(10)
                assert not closer.is_alive()
            return super().is_ready()

    def fake_put(arrays, device=None):
        fakes.append([ClosingArray() for _ in arrays])
        return fakes[-1]

    monkeypatch.setattr(jax, "device_put", fake_put)

    def source():  # holds no reference to a batch it yielded
        for k in range(6):
            x = np.full(3, k)
            hosts.append(weakref.ref(x))
            yield {"x": x}

    it = iter(device_prefetch(source(), size=3))
    assert next(it)["x"] is fakes[0][0]
    with pytest.raises(StopIteration):
        next(it)  # batch 3 was finished, then found the pass closed
    assert len(fakes) == 4
    gc.collect()
    assert [h() is None for h in hosts] == [True] * 4, "a host batch is still held by a batch in flight"
    assert all(f[0].waited for f in fakes[1:])


def test_buffers_reused_by_the_loader_never_change_what_reached_the_device():
    n, bs = 400, 8
    data = {"x": np.arange(n * 16, dtype=np.float32).reshape(n, 16), "y": np.arange(n, dtype=np.int64)}
    loader = ss.DataLoader(data, batch_size=bs, shuffle=True, seed=7, workers=2)
    order = [b["y"].copy() for b in loader]  # epoch 0, on the host, to know each batch's rows
    loader.load_state_dict({**loader.state_dict(), "epoch": 0})
    kept = list(device_prefetch(loader, size=3))  # every device batch kept; host buffers dropped as we go
    assert len(kept) == len(order) == n // bs
    for rows, batch in zip(order, kept):
        np.testing.assert_array_equal(np.asarray(batch["y"]), rows)
        np.testing.assert_array_equal(np.asarray(batch["x"]), data["x"][rows])
    # the loader did reuse its buffers (else this test would prove nothing)
    assert loader._buffers.pool is not None and loader._buffers.pool.allocations < len(kept) // 2


def test_batches_of_worker_processes_in_shared_memory_reach_the_device_intact():
    import inspect

    if "backend" not in inspect.signature(ss.DataLoader).parameters:
        pytest.skip("this DataLoader has no process backend")
    n, bs = 200, 8
    data = {"x": np.arange(n * 4, dtype=np.float32).reshape(n, 4), "y": np.arange(n, dtype=np.int32)}
    # spawn: forking a process in which JAX runs threads may deadlock (JAX warns)
    with ss.DataLoader(data, batch_size=bs, shuffle=True, seed=2, workers=2, backend="process", mp_context="spawn") as loader:
        order = [b["y"].copy() for b in loader]
        loader.load_state_dict({**loader.state_dict(), "epoch": 0})
        kept = list(device_prefetch(loader, size=3))
    assert len(kept) == len(order) == n // bs
    for rows, batch in zip(order, kept):  # read after the workers and their shared memory are gone
        np.testing.assert_array_equal(np.asarray(batch["y"]), rows)
        np.testing.assert_array_equal(np.asarray(batch["x"]), data["x"][rows])


def test_a_per_sample_container_with_strings_through_the_loader():
    class Texts:
        def __len__(self):
            return 30

        def __getitem__(self, i):
            return {"tokens": np.full(5, i, np.int32), "text": f"sample {i}"}

    loader = ss.DataLoader(Texts(), batch_size=4, workers=2)
    got = list(device_prefetch(loader))
    assert [len(b["text"]) for b in got] == [4] * 7 + [2]
    flat = np.concatenate([np.asarray(b["tokens"])[:, 0] for b in got])
    assert flat.tolist() == list(range(30))
    assert got[1]["text"] == [f"sample {i}" for i in range(4, 8)]


# -- stopping -----------------------------------------------------------------------------------
def closing_source(log, n=100):
    try:
        for k in range(n):
            log.append(k)
            yield np.full(2, k)
    finally:
        log.append("closed")


def test_breaking_out_closes_the_source():
    log = []
    for batch in device_prefetch(closing_source(log), size=3):
        if int(batch[0]) == 4:
            break
    gc.collect()
    assert log == [0, 1, 2, 3, 4, 5, 6, "closed"]


def test_close_and_with_stop_the_pass():
    log = []
    it = iter(device_prefetch(closing_source(log)))
    next(it)
    it.close()
    assert log[-1] == "closed"
    with pytest.raises(StopIteration):
        next(it)
    it.close()  # twice is fine
    log2 = []
    with iter(device_prefetch(closing_source(log2))) as it2:
        next(it2)
    assert log2[-1] == "closed"


def test_dropping_the_iterator_closes_the_source():
    log = []
    it = iter(device_prefetch(closing_source(log)))
    next(it)
    del it
    gc.collect()
    assert log[-1] == "closed"


def test_breaking_out_of_a_threaded_loader_stops_its_workers():
    loader = ss.DataLoader(np.arange(10_000), batch_size=10, workers=2)
    before = {t for t in threading.enumerate() if t.name.startswith("slipstream")}
    for k, _ in enumerate(device_prefetch(loader)):
        if k == 3:
            break
    gc.collect()
    deadline = time.monotonic() + 10
    while {t for t in threading.enumerate() if t.name.startswith("slipstream")} - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not {t for t in threading.enumerate() if t.name.startswith("slipstream")} - before


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 4])
def test_an_error_from_the_source_arrives_at_its_position(size):
    def source():
        for k in range(6):
            if k == 3:
                raise ZeroDivisionError("batch three")
            yield np.full(2, k)

    got = []
    it = iter(device_prefetch(source(), size=size))
    with pytest.raises(ZeroDivisionError, match="batch three") as info:
        for batch in it:
            got.append(int(batch[0]))
    assert got == [0, 1, 2]
    assert any("batch 3" in note for note in getattr(info.value, "__notes__", []))
    assert any(frame.name == "source" for frame in info.traceback)  # the original traceback is kept
    with pytest.raises(StopIteration):
        next(it)


def test_an_error_from_a_loader_sample_arrives_at_its_batch():
    class Faulty:
        def __len__(self):
            return 40

        def __getitem__(self, i):
            if i == 21:
                raise KeyError("sample 21")
            return np.full(3, i, np.int32)

    got = []
    with pytest.raises(KeyError, match="sample 21"):
        for batch in device_prefetch(ss.DataLoader(Faulty(), batch_size=4, workers=2), size=3):
            got.append(int(np.asarray(batch)[0, 0]))
    assert got == [0, 4, 8, 12, 16]


def test_an_array_jax_cannot_hold_raises_at_its_batch():
    source = [np.ones(2, np.float32), np.ones(2, np.float32), np.ones(2, np.longdouble), np.ones(2, np.float32)]
    it = iter(device_prefetch(source, size=3))
    assert len([next(it), next(it)]) == 2
    with pytest.raises(TypeError) as info:
        next(it)
    assert any("jax.device_put for batch 2" in note for note in info.value.__notes__)
    with pytest.raises(StopIteration):
        next(it)


def test_keyboard_interrupt_is_not_deferred():
    def source():
        yield np.ones(1)
        raise KeyboardInterrupt

    it = iter(device_prefetch(source(), size=1))
    next(it)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


# -- optional import, sharding (fresh interpreters) -----------------------------------------------
def test_import_slipstream_does_not_import_jax_and_a_missing_jax_says_how_to_install():
    result = run_python(
        """
        import sys
        import slipstream
        assert "jax" not in sys.modules, "import slipstream imported jax"
        sys.modules["jax"] = None  # as if jax were not installed
        try:
            import slipstream.jax
        except ImportError as exc:
            assert "pip install jax" in str(exc), exc
            print("ok")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_named_sharding_splits_each_batch_across_four_devices():
    result = run_python(
        """
        import numpy as np, jax
        from jax.sharding import NamedSharding, PartitionSpec as P
        import slipstream as ss
        from slipstream.jax import device_prefetch

        assert jax.device_count() == 4, jax.devices()
        mesh = jax.make_mesh((4,), ("data",))
        sharding = NamedSharding(mesh, P("data"))
        data = {"x": np.arange(40 * 3, dtype=np.float32).reshape(40, 3), "y": np.arange(40, dtype=np.int32),
                "names": [f"n{i}" for i in range(40)]}
        loader = ss.DataLoader(data, batch_size=8, drop_last=True, workers=2)
        seen = 0
        for k, batch in enumerate(device_prefetch(loader, device=sharding)):
            for key in ("x", "y"):
                leaf = batch[key]
                assert leaf.sharding == sharding, leaf.sharding
                shards = sorted(leaf.addressable_shards, key=lambda s: s.index[0].start)
                assert len(shards) == 4 and len({s.device for s in shards}) == 4
                assert all(s.data.shape[0] == 2 for s in shards)
                np.testing.assert_array_equal(np.asarray(leaf), data[key][8 * k: 8 * k + 8])
            assert batch["names"] == data["names"][8 * k: 8 * k + 8]
            seen += 1
        assert seen == 5

        # a short last batch cannot be split four ways: the error arrives at that batch
        uneven = ss.DataLoader(np.arange(10, dtype=np.float32), batch_size=4)
        got = []
        try:
            for batch in device_prefetch(uneven, device=sharding):
                got.append(batch.shape)
        except ValueError as exc:
            assert any("batch 2" in note for note in exc.__notes__), exc.__notes__
            print("ok", got)
        """,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok [(4,), (4,)]", result.stdout


def test_module_exports():
    import slipstream.jax as sj

    assert sj.__all__ == ["DevicePrefetch", "device_prefetch"]
    assert sys.modules["slipstream.jax"] is sj
    assert sj.device_prefetch.__doc__ and sj.DevicePrefetch.__doc__


@pytest.mark.parametrize("layout, dtype", [("NHWC", None), ("channels_last", "bfloat16"), ("NCHW", "float32")])
def test_a_device_stages_torch_images_arrive_as_jax_arrays(tmp_path, layout, dtype):
    pytest.importorskip("torch")
    from packed import photo_like

    import slipstream as ss
    from slipstream import fields as F
    from slipstream import ops

    samples = [{"image": photo_like(40 + k, 50, seed=k), "label": k} for k in range(6)]
    path = ss.write(tmp_path / "d.arrow", samples, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    pipe = [ops.CenterCrop(24)] + ([ops.Normalize((0.5,), (0.25,), dtype=dtype)] if dtype else [])
    view = ss.open(path).map(image=pipe, device="cpu", layout=layout)
    expected = [b["image"].float().numpy() for b in ss.DataLoader(view, batch_size=4)]
    got = list(device_prefetch(ss.DataLoader(view, batch_size=4)))
    assert [b["label"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5]]
    for batch, want in zip(got, expected):
        assert isinstance(batch["image"], jax.Array) and batch["image"].shape == want.shape
        assert str(batch["image"].dtype) == (dtype or "uint8")
        np.testing.assert_array_equal(np.asarray(batch["image"].astype("float32")), want)


# -- device views (slipstream.gpu): torch tensors through DLPack, with the loader's finisher

VIEW_OPS = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]


@pytest.mark.parametrize("layout,dtype", [("channels_last", "bfloat16"), ("NHWC", None), ("NCHW", "float16"), ("channels_last", None)])
def test_jax_device_prefetch_of_a_device_view_with_a_sharding_and_closing_midway(tmp_path, layout, dtype):
    pytest.importorskip("torch")

    from slipstream.jax import device_prefetch

    path = image_sets(tmp_path)["jpeg"]
    pipe = VIEW_OPS + ([ops.Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2)), ops.ToCHW()] if dtype else [])
    view = ss.open(path).map(image=pipe, device="cpu", cpu_share=0.5, layout=layout, dtype=dtype)
    want = [b["image"].float().numpy() for b in _snap(ss.DataLoader(view, batch_size=4, seed=2, shuffle=True))]
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    got = []
    for batch in device_prefetch(ss.DataLoader(view, batch_size=4, seed=2, shuffle=True, workers=2), size=3, device=sharding):
        got.append(batch)  # kept: the loader's later batches must not change them
    assert len(got) == len(want)
    for batch, w in zip(got, want):
        assert isinstance(batch["image"], jax.Array) and batch["image"].shape == w.shape
        np.testing.assert_array_equal(np.asarray(batch["image"].astype("float32")), w)
    # closing mid-way: no finish thread is left
    loader = ss.DataLoader(view, batch_size=2, seed=2, workers=2, prefetch=3)
    it = iter(device_prefetch(loader, size=3))
    next(it)
    it.close()
    assert_finish_threads_end()


def test_jax_arrays_taken_through_dlpack_outlive_the_torch_tensors_and_the_finisher(tmp_path):
    torch = pytest.importorskip("torch")
    import gc

    from slipstream.jax import device_prefetch

    path = image_sets(tmp_path)["jpeg"]
    view = ss.open(path).map(image=VIEW_OPS, device="cpu", layout="NHWC")
    want = [b["image"].numpy().copy() for b in ss.DataLoader(view, batch_size=4, seed=1)]
    got = [b["image"] for b in device_prefetch(ss.DataLoader(view, batch_size=4, seed=1, workers=2))]
    gc.collect()
    junk = [torch.full((4, 16, 16, 3), 7, dtype=torch.uint8) for _ in range(200)]  # reuse freed CPU memory
    for _ in ss.DataLoader(view, batch_size=4, seed=2, workers=2):  # the finisher makes new tensors
        pass
    del junk
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
