"""Batch augmentations (``images.batchops``): MixUp, CutMix and MixUpOrCutMix by hand and through the
loaders. torchvision's semantics (roll-by-one pairing, the CutMix box and its area-corrected lambda, the
label mixing) checked as invariants here; bit-for-bit against torchvision itself by
tools/torchvision_v2/tv2_probe_batchops.py (torchvision is not in the test environment). The Beta sampler
against the Beta CDF (numerical integration, no SciPy); determinism over backends and worker counts,
exact resume, the choice frequencies, the errors; the torch path (the device stage's) on CPU tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream.core.draws import Draws
from slipstream.images import batchops
from slipstream.images.batchops import CutMix, MixUp, MixUpOrCutMix, batch_uniforms
from slipstream.images.beta import BETA_DRAWS, GAMMA_DRAWS, beta_from_uniforms
from slipstream.loading.batchfinish import apply_batch_ops

K = 7  # classes


class Images:
    """``n`` samples: an (H, W, 3) uint8 or (3, H, W) float32 image that tells its index, and a label."""

    def __init__(self, n: int = 23, h: int = 6, w: int = 9, chw: bool = False):
        self.n, self.h, self.w, self.chw = n, h, w, chw

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.n:
            raise IndexError(i)
        rng = np.random.default_rng(i)
        if self.chw:
            image = rng.random((3, self.h, self.w), dtype=np.float32)
        else:
            image = rng.integers(0, 256, (self.h, self.w, 3), dtype=np.uint8)
        return {"image": image, "label": np.int64(i % K), "index": np.int64(i)}


def one_hot(labels: np.ndarray, k: int = K) -> np.ndarray:
    return np.eye(k, dtype=np.float32)[labels]


def a_batch(b: int = 5, h: int = 6, w: int = 9, seed: int = 0, dtype=np.uint8, layout: str = "HWC") -> dict:
    rng = np.random.default_rng(seed)
    shape = (b, h, w, 3) if layout == "HWC" else (b, 3, h, w)
    image = rng.integers(0, 256, shape).astype(dtype) if dtype == np.uint8 else rng.random(shape).astype(dtype)
    return {"image": image, "label": rng.integers(0, K, b), "other": np.arange(b)}


# -- the Beta sampler --------------------------------------------------------------------------------


def _partial_integral(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """The integral of s^(a-1) (1-s)^(b-1) from 0 to x, for x in [0, 1/2], by the trapezoid rule after
    substituting s = t^(1/a) (which takes away the singularity at 0: the integrand becomes
    (1 - t^(1/a))^(b-1) / a, smooth on [0, 2^-a])."""
    t = np.linspace(0.0, 0.5**a, 200_001)
    f = (1.0 - t ** (1.0 / a)) ** (b - 1.0) / a
    cumulative = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) * 0.5 * np.diff(t))])
    return np.interp(np.asarray(x) ** a, t, cumulative)


def beta_cdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """The Beta(a, b) CDF by numerical integration (each half from its own end: no singular endpoint)."""
    x = np.asarray(x, np.float64)
    total = _partial_integral(a, b, np.array(0.5)) + _partial_integral(b, a, np.array(0.5))
    low = _partial_integral(a, b, np.minimum(x, 0.5)) / total
    high = 1.0 - _partial_integral(b, a, np.minimum(1.0 - x, 0.5)) / total
    return np.where(x <= 0.5, low, high)


def ks_statistic(samples: np.ndarray, cdf) -> float:
    """sup |ECDF - F|, with ties: below a value the CDF is taken at the float just under it (Beta(0.1,
    0.1) puts 1.3% of its mass within 1e-16 of 1, which float64 rounds to exactly 1.0)."""
    x = np.sort(samples)
    n = len(x)
    at, below = np.searchsorted(x, x, "right") / n, np.searchsorted(x, x, "left") / n
    return float(max(np.max(at - cdf(x)), np.max(cdf(np.nextafter(x, -np.inf)) - below)))


def test_the_beta_cdf_by_integration_is_right_where_it_is_known():
    x = np.linspace(0, 1, 11)
    np.testing.assert_allclose(beta_cdf(x, 1.0, 1.0), x, atol=1e-9)
    np.testing.assert_allclose(beta_cdf(x, 2.0, 1.0), x**2, atol=1e-9)
    np.testing.assert_allclose(beta_cdf(x, 0.5, 0.5), 2 / np.pi * np.arcsin(np.sqrt(x)), atol=1e-6)


@pytest.mark.parametrize("a, b", [(0.1, 0.1), (0.2, 0.2), (0.5, 0.5), (0.8, 0.8), (1.0, 1.0), (2.0, 2.0), (5.0, 5.0), (0.5, 3.0)])
def test_the_beta_sampler_follows_the_beta_distribution(a, b):
    n = 4000
    u = Draws(5, 0, np.arange(n)).uniforms(3, BETA_DRAWS)
    lam = beta_from_uniforms(u, a, b)
    assert np.all((lam >= 0) & (lam <= 1))
    d = ks_statistic(lam, lambda x: beta_cdf(x, a, b))
    assert d < 1.95 / math.sqrt(n), f"Kolmogorov-Smirnov statistic {d:.4f} for Beta({a}, {b})"  # the 0.1% critical value


def test_lambda_through_the_batch_draws_follows_beta_alpha_alpha():
    n = 1500
    op = MixUp(alpha=0.4, num_classes=K)
    lam = np.array([op.params(batch_uniforms(3, 1, k, 0, 0, op.draws), (4,))["lam"] for k in range(n)])
    d = ks_statistic(lam, lambda x: beta_cdf(x, 0.4, 0.4))
    assert d < 1.95 / math.sqrt(n)
    assert np.all(lam == lam.astype(np.float32))  # torchvision's lambda is a float32 value too


def test_every_attempt_rejected_falls_back_to_a_fixed_value():
    u = np.zeros(BETA_DRAWS)  # x = 0 and log(1 - 0) = 0 is not < 0: every attempt rejects
    assert beta_from_uniforms(u, 2.0, 2.0) == 0.5
    assert beta_from_uniforms(u, 0.3, 0.3) == 0.5
    assert np.isfinite(beta_from_uniforms(np.full(BETA_DRAWS, 1 - 2**-53), 0.01, 0.01))


@given(st.floats(0.01, 50.0), st.floats(0.01, 50.0), st.integers(0, 2**32))
@settings(deadline=None, max_examples=60)
def test_beta_variates_are_in_the_unit_interval_and_a_pure_function_of_the_uniforms(a, b, seed):
    u = Draws(seed, 0, np.arange(16)).uniforms(0, BETA_DRAWS)
    lam = beta_from_uniforms(u, a, b)
    assert lam.shape == (16,) and np.all((lam >= 0) & (lam <= 1))
    np.testing.assert_array_equal(lam, beta_from_uniforms(u.copy(), a, b))
    np.testing.assert_array_equal(lam[3], beta_from_uniforms(u[3], a, b))


def test_the_sampler_takes_a_fixed_number_of_uniforms():
    assert BETA_DRAWS == 2 * GAMMA_DRAWS
    with pytest.raises(ValueError, match="uniforms"):
        beta_from_uniforms(np.zeros(BETA_DRAWS - 1), 1.0, 1.0)
    with pytest.raises(ValueError, match="shape"):
        beta_from_uniforms(np.zeros(BETA_DRAWS), 0.0, 1.0)


# -- the ops' semantics -------------------------------------------------------------------------------


@given(
    st.integers(1, 6), st.integers(1, 13), st.integers(1, 13), st.sampled_from(["HWC", "CHW"]),
    st.sampled_from([np.uint8, np.float32]), st.floats(0.05, 5.0), st.integers(0, 2**40), st.floats(0.0, 0.3),
)  # fmt: skip
@settings(deadline=None, max_examples=80)
def test_cutmix_takes_the_box_from_the_previous_sample_and_lambda_is_the_area_left(
    b, h, w, layout, dtype, alpha, seed, smoothing
):
    batch = a_batch(b, h, w, seed % 1000, dtype, layout)
    op = CutMix(alpha, num_classes=K, label_smoothing=smoothing, layout=layout)
    params = op.params(batch_uniforms(seed, 0, 0, 0, 0, op.draws), batch["image"].shape)
    out = op.apply(batch, params)
    x1, y1, x2, y2 = params["box"]
    assert 0 <= x1 <= x2 <= w and 0 <= y1 <= y2 <= h
    assert params["lam"] == 1 - (x2 - x1) * (y2 - y1) / (w * h)
    image, got = batch["image"], out["image"]
    if layout == "CHW":
        image, got = image.transpose(0, 2, 3, 1), got.transpose(0, 2, 3, 1)
    inside = np.zeros((h, w), bool)
    inside[y1:y2, x1:x2] = True
    rolled = np.roll(image, 1, axis=0)
    assert got.dtype == image.dtype
    np.testing.assert_array_equal(got[:, inside], rolled[:, inside])  # sample i's box: sample i-1's pixels
    np.testing.assert_array_equal(got[:, ~inside], image[:, ~inside])
    lam = params["lam"]
    targets = one_hot(batch["label"]) * np.float32(1 - smoothing) + np.float32(smoothing / K)
    np.testing.assert_allclose(out["label"], lam * targets + (1 - lam) * np.roll(targets, 1, axis=0), atol=1e-6)
    np.testing.assert_allclose(out["label"].sum(axis=1), 1.0, atol=1e-6)
    assert out["label"].dtype == np.float32 and out["other"] is batch["other"]


@given(st.integers(1, 6), st.sampled_from([np.uint8, np.float32]), st.floats(0.05, 5.0), st.integers(0, 2**40))
@settings(deadline=None, max_examples=60)
def test_mixup_blends_each_sample_with_the_previous_one(b, dtype, alpha, seed):
    batch = a_batch(b, 4, 5, seed % 1000, dtype)
    before = snapshot(batch)
    op = MixUp(alpha, num_classes=K)
    params = op.params(batch_uniforms(seed, 2, 3, 0, 0, op.draws), batch["image"].shape)
    out = op.apply(batch, params)
    assert_same(batch, before)  # the input is left as it was
    lam = params["lam"]
    x = batch["image"].astype(np.float32)
    want = np.roll(x, 1, axis=0) * np.float32(1 - lam) + x * np.float32(lam)
    if dtype == np.uint8:
        want = np.clip(np.rint(want), 0, 255).astype(np.uint8)  # round half to even
    np.testing.assert_array_equal(out["image"], want)
    assert out["image"].dtype == dtype
    np.testing.assert_allclose(out["label"].sum(axis=1), 1.0, atol=1e-6)
    want_labels = np.roll(one_hot(batch["label"]), 1, axis=0) * np.float32(1 - lam) + one_hot(batch["label"]) * np.float32(lam)
    np.testing.assert_array_equal(out["label"], want_labels)


def test_uint8_mixup_rounds_half_to_even():
    image = np.array([[[[1]]], [[[2]]]], np.uint8)  # (2, 1, 1, 1): 1.5 and 1.5 at lambda 1/2
    out = MixUp(num_classes=2, layout="HWC").apply({"image": image, "label": np.array([0, 1])}, {"kind": "mixup", "lam": 0.5})
    assert out["image"].ravel().tolist() == [2, 2]
    image = np.array([[[[2]]], [[[3]]]], np.uint8)  # 2.5 -> 2
    out = MixUp(num_classes=2).apply({"image": image, "label": np.array([0, 1])}, {"kind": "mixup", "lam": 0.5})
    assert out["image"].ravel().tolist() == [2, 2]


def test_soft_labels_pass_and_tuple_batches_keep_their_type():
    soft = np.array([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]])
    images = np.zeros((3, 4, 4, 3), np.float32)
    out = MixUp().apply((images, soft), {"kind": "mixup", "lam": 0.25})
    assert type(out) is tuple and out[1].dtype == np.float64
    np.testing.assert_allclose(out[1], 0.75 * np.roll(soft, 1, axis=0) + 0.25 * soft)
    out = CutMix().apply([images, soft], {"kind": "cutmix", "lam": 1.0, "box": (0, 0, 0, 0), "layout": "HWC"})
    assert type(out) is list
    np.testing.assert_array_equal(out[1], soft)


def test_label_smoothing_is_timms():
    out = MixUp(num_classes=4, label_smoothing=0.2).apply(
        {"image": np.zeros((2, 3, 3, 3), np.float32), "label": np.array([1, 1])}, {"kind": "mixup", "lam": 0.3}
    )
    np.testing.assert_allclose(out["label"][0], [0.05, 0.85, 0.05, 0.05], rtol=1e-6)  # off = s/K, on = 1 - s + s/K


@pytest.mark.parametrize(
    "layout, shape, hw",
    [
        ("auto", (2, 3, 5, 7), (5, 7)),
        ("auto", (2, 5, 7, 3), (5, 7)),
        ("CHW", (2, 3, 4, 3), (4, 3)),
        ("HWC", (2, 3, 4, 3), (3, 4)),
    ],
)
def test_the_layout_rule(layout, shape, hw):
    h, w, _ = CutMix(layout=layout)._hw(shape)
    assert (h, w) == hw


def test_mixuporcutmix_chooses_with_timms_probabilities():
    op = MixUpOrCutMix(prob=0.7, switch_prob=0.3, num_classes=K)
    n = 4000
    kinds = [op.choice(batch_uniforms(9, 0, k, 0, 0, op.draws)) for k in range(n)]
    for kind, p in (("none", 0.3), ("cutmix", 0.7 * 0.3), ("mixup", 0.7 * 0.7)):
        count = kinds.count(kind)
        assert abs(count - n * p) < 4 * math.sqrt(n * p * (1 - p)), (kind, count)
    assert MixUpOrCutMix(mixup_alpha=0, num_classes=K).choice(np.zeros(2)) == "cutmix"
    assert MixUpOrCutMix(cutmix_alpha=0, num_classes=K).choice(np.zeros(2)) == "mixup"


def test_an_unmixed_batch_keeps_its_images_and_gets_one_hot_labels():
    batch = a_batch(4)
    op = MixUpOrCutMix(prob=0.0, num_classes=K, label_smoothing=0.1)
    out = op(batch, seed=1, index=0)
    assert out["image"] is batch["image"]
    np.testing.assert_allclose(out["label"], one_hot(batch["label"]) * 0.9 + 0.1 / K, rtol=1e-6)


def test_the_draws_are_a_pure_function_of_seed_epoch_index_rank_and_position():
    batch = a_batch(6, 8, 8, dtype=np.float32)
    op = MixUpOrCutMix(num_classes=K)
    same = [op(batch, seed=4, epoch=1, index=2) for _ in range(2)]
    assert_same(same[0], same[1])
    others = [op(batch, seed=5, epoch=1, index=2), op(batch, seed=4, epoch=2, index=2), op(batch, seed=4, epoch=1, index=3)]
    others += [op(batch, seed=4, epoch=1, index=2, rank=1), op(batch, seed=4, epoch=1, index=2, position=1)]
    for other in others:
        assert not np.array_equal(other["label"], same[0]["label"])


# -- errors --------------------------------------------------------------------------------------------


def test_errors_name_what_was_expected():
    batch = a_batch(3)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        MixUp(alpha=0)
    with pytest.raises(ValueError, match="alpha"):
        CutMix(alpha=-1.0)
    with pytest.raises(ValueError, match="both 0"):
        MixUpOrCutMix(mixup_alpha=0, cutmix_alpha=0)
    with pytest.raises(ValueError, match="num_classes"):
        MixUp()(batch, seed=0)
    with pytest.raises(ValueError, match=r"in \[0, num_classes=2\), got values from 0 to [2-6]"):
        MixUp(num_classes=2)({**batch, "label": np.array([0, 1, 6])}, seed=0)
    with pytest.raises(ValueError, match="from -1"):
        MixUp(num_classes=K)({**batch, "label": np.array([0, -1, 1])}, seed=0)
    with pytest.raises(KeyError, match=r"no field\(s\) \['img'\].*'image', 'label', 'other'"):
        MixUp(num_classes=K, image="img")(batch, seed=0)
    with pytest.raises(ValueError, match="cannot tell the layout"):
        CutMix(num_classes=K)({**batch, "image": np.zeros((3, 3, 5, 3), np.uint8)}, seed=0)
    with pytest.raises(ValueError, match="4-D"):
        CutMix(num_classes=K)({**batch, "image": np.zeros((3, 5, 3), np.uint8)}, seed=0)
    with pytest.raises(ValueError, match="batch size"):
        MixUp(num_classes=K)({**batch, "label": np.array([0, 1])}, seed=0)
    with pytest.raises(ValueError, match="num_classes=4 columns"):
        MixUp(num_classes=4)({**batch, "label": np.ones((3, 5)) / 5}, seed=0)
    with pytest.raises(TypeError, match="a dict or a tuple"):
        MixUp(num_classes=K)(np.zeros((3, 2, 2, 3)), seed=0)
    with pytest.raises(TypeError, match="batch_ops must be a list"):
        ss.DataLoader(Images(), 4, batch_ops=MixUp())
    with pytest.raises(TypeError, match="batch_ops must hold batch ops"):
        ss.DataLoader(Images(), 4, batch_ops=[lambda b: b])


def test_a_batch_without_the_fields_fails_at_that_batch_and_keep_going_goes_on():
    loader = ss.DataLoader(Images(9), 3, seed=0, batch_ops=[MixUp(num_classes=K, label="target")])
    iterator = loader.__iter__(keep_going=True)
    for _ in range(3):
        with pytest.raises(KeyError, match="target"):
            next(iterator)
    with pytest.raises(StopIteration):
        next(iterator)


# -- through the loader ---------------------------------------------------------------------------------

OPS = [MixUpOrCutMix(num_classes=K, label_smoothing=0.1), CutMix(alpha=0.5, num_classes=K)]


def _epochs(epochs: int = 2, **kwargs) -> list:
    with ss.DataLoader(Images(), 5, shuffle=True, seed=13, timeout=60, batch_ops=OPS, **kwargs) as loader:
        return [snapshot(b) for _ in range(epochs) for b in loader]


def test_the_loaders_batches_are_the_ops_applied_by_hand_with_the_batch_number():
    plain = ss.DataLoader(Images(), 5, shuffle=True, seed=13)
    mixed = ss.DataLoader(Images(), 5, shuffle=True, seed=13, batch_ops=OPS)
    for epoch in range(2):
        for k, (a, b) in enumerate(zip(plain, mixed)):
            assert_same(snapshot(b), apply_batch_ops(OPS, a, 13, epoch, k), f"epoch {epoch}, batch {k}")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 2},
        {"workers": 2, "in_order": False},
        {"workers": 2, "backend": "process"},
        {"workers": 1, "backend": "helper"},
    ],
)
def test_the_same_seed_gives_the_same_batches_for_any_backend_and_worker_count(kwargs):
    want = _epochs()
    got = _epochs(**kwargs)
    if kwargs.get("in_order") is False:  # (batches may come out of order: compare by their first index)
        got, want = sorted(got, key=lambda b: tuple(b["index"])), sorted(want, key=lambda b: tuple(b["index"]))
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert_same(a, b, f"batch {k}")


def test_float_chw_batches_through_the_loader():
    with ss.DataLoader(Images(chw=True), 4, seed=2, batch_ops=[CutMix(num_classes=K)], workers=2) as loader:
        batches = [snapshot(b) for b in loader]
    assert batches[0]["image"].dtype == np.float32 and batches[0]["image"].shape == (4, 3, 6, 9)
    for b in batches:
        np.testing.assert_allclose(b["label"].sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("kwargs", [{}, {"workers": 2}])
def test_resume_is_exact_with_batch_ops(kwargs):
    count = assert_resumes_exactly(lambda: ss.DataLoader(Images(13), 4, shuffle=True, seed=3, batch_ops=OPS, **kwargs))
    assert count == 10


def test_ranks_draw_differently():
    a, b = (ss.DataLoader(Images(), 4, seed=1, rank=r, world_size=2, batch_ops=[MixUp(num_classes=K)]) for r in (0, 1))
    first_a, first_b = next(iter(a)), next(iter(b))
    lam_a = first_a["label"][first_a["label"] > 0].max()
    lam_b = first_b["label"][first_b["label"] > 0].max()
    assert lam_a != lam_b


# -- torch: the same ops on tensors (the device stage's path) and the drop-in ----------------------------


@pytest.mark.parametrize(
    "dtype", ["uint8", "float32", "float16"]
)  # float16: half products and sums rounded from float32, as torch's
@pytest.mark.parametrize(
    "op",
    [MixUp(alpha=0.7, num_classes=K), CutMix(num_classes=K, layout="CHW"), MixUpOrCutMix(num_classes=K, label_smoothing=0.1)],
)
def test_torch_tensors_get_the_same_images_and_labels_as_numpy(op, dtype):
    torch = pytest.importorskip("torch")
    for index in range(12):
        batch = a_batch(5, 6, 9, index, getattr(np, dtype), "CHW")
        want = op(batch, seed=2, index=index)
        tensors = {"image": torch.from_numpy(batch["image"]), "label": torch.from_numpy(batch["label"]), "other": batch["other"]}
        got = op(tensors, seed=2, index=index)
        assert isinstance(got["image"], torch.Tensor) and isinstance(got["label"], torch.Tensor)
        np.testing.assert_array_equal(got["image"].numpy(), want["image"])
        np.testing.assert_array_equal(got["label"].numpy(), want["label"])
        host_labels = op({**tensors, "label": batch["label"]}, seed=2, index=index)  # a device batch: labels from the host
        np.testing.assert_array_equal(host_labels["label"], want["label"])


def test_the_torch_drop_in_applies_the_ops_before_its_batches_become_torchs():
    torch = pytest.importorskip("torch")
    from slipstream.torch import DataLoader

    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return torch.full((3, 4, 6), float(i)), i % K

    ops = [MixUpOrCutMix(num_classes=K)]

    def collate(samples):
        return torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])

    runs = [
        list(DataLoader(Pairs(), 4, shuffle=True, seed=5, batch_ops=ops, **kwargs))
        for kwargs in ({}, {"num_workers": 2, "backend": "thread"}, {"collate_fn": collate})
    ]
    for batches in runs:
        assert len(batches) == 3
        for k, (images, labels) in enumerate(batches):
            assert isinstance(images, torch.Tensor) and labels.shape == (4, K) and labels.dtype == torch.float32
            np.testing.assert_array_equal(images.numpy(), runs[0][k][0].numpy())
            np.testing.assert_array_equal(labels.numpy(), runs[0][k][1].numpy())

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="map-style"):
        DataLoader(Stream(), 2, batch_ops=ops)


def test_a_device_stage_applies_the_ops_to_its_tensors_with_the_hosts_draws(tmp_path):
    pytest.importorskip("torch")
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops as O

    samples = [{"image": photo_like(20 + 3 * k, 25 + 2 * k, seed=k), "label": k % K} for k in range(10)]
    path = ss.write(tmp_path / "d.arrow", samples, {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    pipe = [O.RandomResizedCrop(16), O.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)), O.ToCHW()]
    ops = [MixUpOrCutMix(num_classes=K, switch_prob=0.5)]
    device = ss.open(path).map(image=pipe, device="cpu")
    plain = [snapshot(b) for b in ss.DataLoader(device, 4, seed=8)]
    mixed = [snapshot(b) for b in ss.DataLoader(ss.open(path).map(image=pipe, device="cpu"), 4, seed=8, batch_ops=ops, workers=2)]
    cpu = [snapshot(b) for b in ss.DataLoader(ss.open(path).map(image=pipe), 4, seed=8, batch_ops=ops)]
    assert len(plain) == len(mixed) == len(cpu) == 3
    for k, (a, b, c) in enumerate(zip(plain, mixed, cpu)):
        want = apply_batch_ops(ops, a, 8, 0, k)
        assert_same(b, want, f"batch {k}")  # the device tensors through the torch path, with the host's draws
        np.testing.assert_array_equal(b["label"], c["label"])  # the CPU pipeline's batch: the same labels (and lambda, box)


def test_the_torch_drop_in_resumes_exactly_with_batch_ops():
    torch = pytest.importorskip("torch")
    from slipstream.torch import DataLoader

    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return torch.full((3, 4, 6), float(i)), i % K

    ops = [MixUpOrCutMix(num_classes=K)]
    assert assert_resumes_exactly(lambda: DataLoader(Pairs(), 3, shuffle=True, seed=4, batch_ops=ops)) == 10
    # torch's own sampler (no seed=), drawing from the loader's generator: resumed from its saved states
    make = lambda: DataLoader(Pairs(), 3, shuffle=True, batch_ops=ops, generator=torch.Generator().manual_seed(6))  # noqa: E731
    assert assert_resumes_exactly(make) == 10


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_on_cuda_the_ops_run_on_the_device_with_the_cpus_labels_and_boxes(tmp_path):  # pragma: no cover - GPU only
    import torch
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops as O

    samples = [{"image": photo_like(30 + 3 * k, 35 + 2 * k, seed=k), "label": k % K} for k in range(16)]
    path = ss.write(tmp_path / "c.arrow", samples, {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    pipe = [O.RandomResizedCrop(24), O.ToCHW()]  # uint8 levels: MixUp rounds, CutMix copies
    ops = [MixUpOrCutMix(num_classes=K)]

    def run(device, batch_ops=None):
        view = ss.open(path).map(image=pipe, device=device)
        with ss.DataLoader(view, 4, seed=3, workers=2, batch_ops=batch_ops) as loader:
            return [snapshot(b) for b in loader]

    plain, mixed, on_cpu = run("cuda"), run("cuda", ops), run("cpu", ops)
    for k, (a, b, c) in enumerate(zip(plain, mixed, on_cpu)):
        assert b["image"].is_cuda
        assert_same(b, apply_batch_ops(ops, a, 3, 0, k), f"batch {k}")  # the same ops on the device tensors
        np.testing.assert_array_equal(b["label"], c["label"])  # and the host's draws: the CPU's labels
        torch.cuda.synchronize()


def test_the_torch_drop_in_keys_the_draws_by_torchs_process_rank(monkeypatch):
    torch = pytest.importorskip("torch")
    import slipstream.torch._maploader as maploader
    from slipstream.torch import DataLoader

    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.full((3, 4, 6), float(i)), i % K

    ops = [MixUp(num_classes=K)]
    first = [next(iter(DataLoader(Pairs(), 4, seed=1, batch_ops=ops)))[1]]
    monkeypatch.setattr(maploader, "_process_rank", lambda: 1)  # as under torch.distributed at rank 1
    first.append(next(iter(DataLoader(Pairs(), 4, seed=1, batch_ops=ops)))[1])
    assert not torch.equal(first[0], first[1])
    core = ss.DataLoader(Images(), 4, seed=1, batch_ops=ops)
    core.draw_rank = 1
    by_rank = ss.DataLoader(Images(), 4, seed=1, rank=1, world_size=2, batch_ops=ops)
    a, b = next(iter(core)), next(iter(by_rank))
    np.testing.assert_array_equal(a["label"][a["label"] > 0].max(), b["label"][b["label"] > 0].max())  # rank 1's lambda


def test_a_loader_reuses_the_batch_ops_outputs_its_consumer_dropped_and_never_one_it_holds():
    data = [{"image": np.full((3, 8, 8), i, np.float32), "label": i % 4} for i in range(64)]
    loader = ss.DataLoader(data, 8, seed=0, batch_ops=[MixUp(num_classes=4)])
    addresses = {b["image"].__array_interface__["data"][0] for b in loader}
    assert len(addresses) < len(loader)  # dropped outputs come back
    kept = list(loader)
    assert len({b["image"].__array_interface__["data"][0] for b in kept}) == len(kept)  # held ones never do
    fresh = ss.DataLoader(data, 8, seed=0, batch_ops=[MixUp(num_classes=4)])
    list(fresh)
    again = list(fresh)  # epoch 1 again: the kept batches were not overwritten since
    for a, b in zip(kept, again):
        np.testing.assert_array_equal(a["image"], b["image"])


def test_a_loader_reuses_the_batch_ops_outputs_from_one_epoch_to_the_next(monkeypatch):
    made: list[int] = []
    empty_like = batchops.OutputBuffers.empty_like

    def counting(self: batchops.OutputBuffers, a: np.ndarray) -> np.ndarray:
        held = [id(b) for b in self._free.get((tuple(a.shape), a.dtype.str), [])]
        out = empty_like(self, a)
        made.append(id(out) not in held)
        return out

    monkeypatch.setattr(batchops.OutputBuffers, "empty_like", counting)
    data = [{"image": np.full((3, 8, 8), i, np.float32), "label": i % 4} for i in range(64)]
    loader = ss.DataLoader(data, 8, seed=0, batch_ops=[MixUp(num_classes=4)])
    for _ in range(5):
        assert sum(b["image"].shape[0] for b in loader) == 64
    # 40 batches mixed; fresh arrays only while the pool grows to the batches in flight at once
    # (how many that is depends on the threads' timing), never more than the pool keeps
    assert len(made) == 40 and sum(made) <= batchops.OutputBuffers()._keep, f"new buffers {made}"


def _mixup_inputs(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Values of every kind the dtype holds: for floats small, large, subnormal, signed zeros, infinities, NaNs."""
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    kind = np.dtype(dtype)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 6, shape)).astype(kind)
    flat = x.reshape(-1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(kind).tiny / 4, np.finfo(kind).max, 255.5], kind)
    picks = rng.integers(0, flat.size, max(1, flat.size // 8))
    flat[picks] = specials[rng.integers(0, len(specials), len(picks))]
    return x


def _same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    """Equal bytes, except that any NaN equals any NaN (where both products are NaN, which one
    the sum keeps is not specified: NumPy's own SIMD and scalar loops differ there)."""
    if got.dtype.kind != "f":
        return got.tobytes() == expected.tobytes()
    both = np.isnan(got) & np.isnan(expected)
    bits = f"u{got.dtype.itemsize}"
    return np.array_equal(got[~both].view(bits), expected[~both].view(bits))


@pytest.mark.skipif(batchops._mix is None, reason="the _roijpeg extension (with mixup) is not built")
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("shape", [(1, 5, 7, 3), (2, 3, 4, 5), (2,), (3, 1), (7, 3, 13, 11), (5, 17, 9, 1), (64, 1000)])
def test_the_compiled_mixup_gives_the_numpy_codes_bits(dtype, shape, monkeypatch):
    images = _mixup_inputs(dtype, shape, seed=len(shape) * 100 + shape[0])
    lams = [0.0, 1.0, 0.5, 0.25, float(np.float32(1 / 3)), *np.random.default_rng(shape[0]).random(5).astype(np.float32).tolist()]
    compiled = [batchops._mixup_images(images, lam) for lam in lams]
    monkeypatch.setattr(batchops, "_mix", None)
    for lam, got in zip(lams, compiled):
        with np.errstate(all="ignore"):  # (inf * 0, overflow)
            expected = batchops._mixup_images(images, lam)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert _same_bits(got, expected), f"lam {lam}: {int((got.view(np.uint8) != expected.view(np.uint8)).sum())} bytes differ"


@pytest.mark.skipif(batchops._mix is None, reason="the _roijpeg extension (with mixup) is not built")
def test_the_compiled_mixup_rounds_float16_ties_and_uint8_ties_as_numpy_and_keeps_nans_nans(monkeypatch):
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(2, -1)  # NaN payloads too
    ties = np.arange(256, dtype=np.uint8)[None, :].repeat(2, axis=0)
    ties[1] = ties[1][::-1]
    nans = np.array([[0x7FC00001, 0x7F800003, 0xFFC00000, 1], [0x7FC00002, 0xFF800005, 0x7FC00000, 0x7F800007]], np.uint32)
    cases = (
        [(every_half, lam) for lam in (0.5, 0.3, 1 / 7, 1e-4)]
        + [(nans.view(np.float32), 0.5)]
        + [(ties, lam) for lam in (0.5, 0.25, 0.125, 0.375)]
    )
    compiled = [batchops._mixup_images(images, lam) for images, lam in cases]
    monkeypatch.setattr(batchops, "_mix", None)
    for (images, lam), got in zip(cases, compiled):
        with np.errstate(all="ignore"):
            expected = batchops._mixup_images(images, lam)
        assert _same_bits(got, expected), f"{images.dtype}, lam {lam}"


@pytest.mark.skipif(batchops._mix is None, reason="the _roijpeg extension (with mixup) is not built")
def test_the_compiled_mixup_refuses_what_it_cannot_take_and_the_numpy_code_takes_the_rest():
    images = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with pytest.raises(ValueError, match=r"lam must be in \[0, 1\], got 1.5"):
        batchops._mix(images, np.empty_like(images), 1.5)
    with pytest.raises(TypeError, match="out must have the images' dtype"):
        batchops._mix(images, np.empty(images.shape, np.float16), 0.5)
    with pytest.raises(ValueError, match="out must have the images' shape"):
        batchops._mix(images, np.empty((2, 3, 5), np.float32), 0.5)
    with pytest.raises(ValueError, match="out overlaps images"):
        batchops._mix(images, images, 0.5)
    strided = np.arange(48, dtype=np.float32).reshape(2, 3, 8)[:, :, ::2]  # the NumPy code: the same formula
    np.testing.assert_array_equal(
        batchops._mixup_images(strided, 0.25), np.roll(strided, 1, 0) * np.float32(0.75) + strided * np.float32(0.25)
    )
    wide = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert batchops._mixup_images(wide, 1.0).tobytes() == wide.tobytes()
