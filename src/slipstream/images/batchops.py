"""Batch augmentations: MixUp, CutMix and the choice between them, on whole collated batches.

``ss.DataLoader(..., batch_ops=[MixUp(num_classes=1000)])`` applies the ops, in order, to each
collated batch (``loading.batchfinish``); called by hand, ``op(batch, seed=..., epoch=..., index=...)``
does the same to one batch. The semantics are torchvision v2's (``transforms.v2.MixUp``, ``CutMix``;
``tools/torchvision_v2/semantics.md`` section 7), and ``MixUpOrCutMix`` is timm's choice between them:

* **Pairing**: roll by one. Sample ``i`` mixes with sample ``i - 1`` (sample 0 with the last).
* **lambda** ~ Beta(alpha, alpha) (``images.beta``), rounded to float32 as torchvision's is.
* **MixUp**: ``out = rolled * (1 - lam) + x * lam``, each product in the image's dtype (float32
  for a float32 batch: bit for bit torchvision's ``x.roll(1, 0).mul_(1 - lam).add_(x.mul(lam))``).
  On an integer batch (uint8) the sum is computed in float32 and rounded half to even (``np.rint``,
  as timm's ``FastCollateMixup``), then clipped to the dtype's range. torchvision refuses a uint8
  batch here (``RuntimeError: result type Float can't be cast to ... Byte``).
* **CutMix**: ``r = 0.5 * sqrt(1 - lam)``, ``rw = int(r * W)``, ``rh = int(r * H)``, a center pixel
  ``(r_x, r_y)`` drawn uniformly over the image, the box ``[max(r_x - rw, 0), min(r_x + rw, W))`` by
  ``[max(r_y - rh, 0), min(r_y + rh, H))``; the box's pixels come from the rolled batch, the rest
  from the batch itself (a pure copy: any dtype). The labels use the area-corrected
  ``lam' = 1 - box_area / (W * H)``.
* **Labels**: integer labels of shape (B,) become one-hot float32 rows (``num_classes`` required),
  with ``label_smoothing`` s as timm's: off = s/K, on = 1 - s + s/K. Soft labels (B, K) (float)
  pass as they are (no smoothing). The mixed label is ``rolled * (1 - lam) + label * lam``.
* **MixUpOrCutMix** (timm's ``Mixup``): with probability ``prob`` the batch is mixed at all; then
  CutMix with probability ``switch_prob``, else MixUp, each with its own alpha (alpha 0 turns that
  one off). A batch left unmixed still gets the one-hot (smoothed) labels, so every batch has the
  same structure.

**Batches**: a dict of arrays (``image`` and ``label`` name its keys; the others pass through), or
a tuple or list (``image`` and ``label`` are then positions; by default 0 and 1). The arrays are
NumPy arrays or torch tensors (on any device: the device stage applies the ops on the GPU), and
the result has the batch's container type; the input's arrays are never modified.

**Layout**: MixUp needs only the batch axis first. CutMix needs (B, H, W, C) ("HWC") or
(B, C, H, W) ("CHW"), given as ``layout=`` or, with ``layout="auto"`` (the default), inferred: "CHW"
when axis 1 has 1, 3 or 4 entries and the last axis does not, "HWC" when the last axis does and
axis 1 does not; anything else (both, neither, not 4-D) raises ``ValueError`` asking for ``layout``.

**Draws**: each op takes a fixed number of uniforms per batch (``draws``) from the counter-based
draws (``core.draws``) keyed by (seed, epoch, batch number in the epoch, rank, the op's position
in ``batch_ops``): a pure function of those, whatever the backend, worker count or resume point.
The host computes the parameters (``params``: lambda, box) from them and the batch's shape, and
``apply`` uses them on NumPy or torch arrays alike, so a CPU batch and a device batch get the same
lambda, box and labels.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.draws import Draws
from .beta import BETA_DRAWS, beta_from_uniforms
from .compiled import EXTENSION as _EXTENSION

__all__ = ["BatchOp", "CutMix", "MixUp", "MixUpOrCutMix", "OutputBuffers", "batch_uniforms", "check_batch_ops"]

_STREAM = 0xBA7C << 32  # the draws' stream: this base + (rank << 16) + the op's position (not a sample op's position)
_LAYOUTS = ("auto", "HWC", "CHW")
_CHANNELS = (1, 3, 4)
_mix = getattr(_EXTENSION, "mixup", None)  # the compiled MixUp (``_roijpeg.mixup``: the NumPy code's bits), or None
_MIXED = (np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.float16))


def batch_uniforms(seed: int, epoch: int, index: int, rank: int, position: int, count: int) -> np.ndarray:
    """The ``count`` uniforms (float64 in [0, 1)) of the op at ``position`` of ``batch_ops`` for
    batch ``index`` of ``epoch`` on ``rank`` under ``seed``."""
    if not 0 <= position < 1 << 16 or not 0 <= rank < 1 << 16:
        raise ValueError(f"position and rank must be in [0, 65536), got {position} and {rank}")
    return Draws(seed, epoch, [index]).uniforms(_STREAM + (rank << 16) + position, count)[0]


def _is_torch(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _check_alpha(name: str, value: Any, zero: bool = False) -> float:
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None
    if not math.isfinite(alpha) or alpha < 0 or (alpha == 0 and not zero):
        raise ValueError(f"{name} must be a finite number > 0{' (or 0: never)' if zero else ''}, got {value!r}")
    return alpha


def _check_probability(name: str, value: Any) -> float:
    p = float(value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return p


def _lam(u: np.ndarray, alpha: float) -> float:
    """lambda ~ Beta(alpha, alpha) from ``BETA_DRAWS`` uniforms, as a float32 value (torchvision's)."""
    return float(np.float32(beta_from_uniforms(u, alpha, alpha)))


def _box(lam: float, ux: float, uy: float, height: int, width: int) -> tuple[tuple[int, int, int, int], float]:
    """torchvision's CutMix box ``(x1, y1, x2, y2)`` for ``lam`` and the center drawn from ``ux``,
    ``uy``, and the area-corrected lambda."""
    r_x = min(int(ux * width), width - 1)  # randint(W): uniform over the pixels
    r_y = min(int(uy * height), height - 1)
    r = 0.5 * math.sqrt(1.0 - lam)
    rw, rh = int(r * width), int(r * height)
    x1, y1 = max(r_x - rw, 0), max(r_y - rh, 0)
    x2, y2 = min(r_x + rw, width), min(r_y + rh, height)
    return (x1, y1, x2, y2), float(1.0 - (x2 - x1) * (y2 - y1) / (width * height))


class BatchOp:
    """A batch augmentation: ``draws`` uniforms per batch become its parameters (``params``, on the
    host), which ``apply`` uses on the batch (module doc). ``image`` and ``label`` name the batch's
    fields (dict keys, or positions of a tuple/list batch)."""

    draws = 0

    def __init__(self, num_classes: int | None, label_smoothing: float, image: str | int, label: str | int, layout: str):
        if num_classes is not None and (
            isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1
        ):
            raise ValueError(f"num_classes must be None or an integer >= 1, got {num_classes!r}")
        smoothing = float(label_smoothing)
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
        if layout not in _LAYOUTS:
            raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
        for name, key in (("image", image), ("label", label)):
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise TypeError(f"{name} must be a dict key (str) or a tuple position (int), got {key!r}")
        self.num_classes = None if num_classes is None else int(num_classes)
        self.label_smoothing, self.image, self.label, self.layout = smoothing, image, label, layout

    # -- what subclasses define ---------------------------------------------------------------
    def params(self, u: np.ndarray, shape: tuple[int, ...]) -> dict[str, Any]:
        """The parameters for a batch of images of ``shape`` from this op's ``draws`` uniforms:
        ``kind`` ("mixup", "cutmix" or "none"), ``lam`` (the labels' lambda) and, for CutMix,
        ``box`` (x1, y1, x2, y2)."""
        raise NotImplementedError

    # -- applying ---------------------------------------------------------------------------
    def __call__(
        self,
        batch: Any,
        *,
        seed: int | None = None,
        epoch: int = 0,
        index: int = 0,
        rank: int = 0,
        position: int = 0,
        buffers: OutputBuffers | None = None,
    ) -> Any:
        """``batch`` through this op with the draws of batch ``index`` of ``epoch`` under ``seed``
        (what a loader's ``batch_ops`` at ``position`` does); ``seed=None``: fresh random draws.
        ``buffers``: where NumPy outputs are allocated (a loader reuses them; default new arrays)."""
        if seed is None:
            u = Draws.fresh(1).uniforms(_STREAM + position, self.draws)[0]
        else:
            u = batch_uniforms(seed, epoch, index, rank, position, self.draws)
        return self.apply(batch, self.params(u, self._shape(batch)), buffers)

    def _images_and_labels(self, batch: Any) -> tuple[Any, Any]:
        image, label = self.image, self.label
        if isinstance(batch, dict):
            if isinstance(image, int) or isinstance(label, int):
                raise TypeError(
                    f"{type(self).__name__}: a dict batch needs image= and label= keys (str), got {image!r} and {label!r}"
                )
            missing = [k for k in (image, label) if k not in batch]
            if missing:
                raise KeyError(
                    f"{type(self).__name__}: the batch has no field(s) {missing} (its fields: {sorted(map(str, batch))}); pass image= and label="
                )
            return batch[image], batch[label]
        if isinstance(batch, (tuple, list)):
            i, j = (0 if isinstance(image, str) else image), (1 if isinstance(label, str) else label)
            if not (-len(batch) <= i < len(batch) and -len(batch) <= j < len(batch)):
                raise IndexError(
                    f"{type(self).__name__}: a batch of {len(batch)} members has no position {i} (image) or {j} (label)"
                )
            return batch[i], batch[j]
        raise TypeError(
            f"{type(self).__name__}: a batch must be a dict or a tuple/list (images, labels), got {type(batch).__name__}"
        )

    def _shape(self, batch: Any) -> tuple[int, ...]:
        images, labels = self._images_and_labels(batch)
        if not (isinstance(images, np.ndarray) or _is_torch(images)):
            raise TypeError(
                f"{type(self).__name__}: the images must be a NumPy array or a torch tensor, got {type(images).__name__}"
            )
        shape = tuple(int(s) for s in images.shape)
        count = int(labels.shape[0]) if hasattr(labels, "shape") and len(labels.shape) else None
        if not shape or count != shape[0]:
            raise ValueError(f"{type(self).__name__}: the labels' batch size ({count}) does not match the images' shape {shape}")
        return shape

    def _hw(self, shape: tuple[int, ...]) -> tuple[int, int, str]:
        """(H, W, layout) of a CutMix batch of ``shape`` (module doc's rule)."""
        if len(shape) != 4:
            raise ValueError(f"{type(self).__name__}: CutMix needs a 4-D batch (B, H, W, C) or (B, C, H, W), got shape {shape}")
        layout = self.layout
        if layout == "auto":
            first, last = shape[1] in _CHANNELS, shape[3] in _CHANNELS
            if first == last:
                raise ValueError(
                    f"{type(self).__name__}: cannot tell the layout of a batch of shape {shape} (channels of 1, 3 or 4 on "
                    f"{'both' if first else 'neither'} axis 1 and axis 3): pass layout='HWC' or layout='CHW'"
                )
            layout = "CHW" if first else "HWC"
        return (shape[2], shape[3], layout) if layout == "CHW" else (shape[1], shape[2], layout)

    def apply(self, batch: Any, params: dict[str, Any], buffers: OutputBuffers | None = None) -> Any:
        """``batch`` with its images and labels mixed as ``params`` say (a new container; the
        input's arrays are left as they are; NumPy images go into ``buffers`` when given)."""
        images, labels = self._images_and_labels(batch)
        targets = self._targets(labels, int(images.shape[0]))
        kind, lam = params["kind"], params["lam"]
        empty = np.empty_like if buffers is None else buffers.empty_like
        if kind == "mixup":
            images = _mixup_images(images, lam, empty)
        elif kind == "cutmix":
            images = _cutmix_images(images, params["box"], params["layout"], empty)
        elif kind != "none":
            raise ValueError(f"unknown kind {kind!r}")
        if kind != "none":
            targets = _mix_labels(targets, lam)
        return self._rebuilt(batch, images, targets)

    def _rebuilt(self, batch: Any, images: Any, labels: Any) -> Any:
        if isinstance(batch, dict):
            out = dict(batch)
            out[self.image], out[self.label] = images, labels
            return out
        members = list(batch)
        i, j = (0 if isinstance(self.image, str) else self.image), (1 if isinstance(self.label, str) else self.label)
        members[i], members[j] = images, labels
        if isinstance(batch, list):
            return members
        return type(batch)(*members) if hasattr(batch, "_fields") else tuple(members)

    def _targets(self, labels: Any, count: int) -> Any:
        """The labels as float rows (B, K): integer (B,) labels one-hot (smoothed), soft ones as they are."""
        torch = _is_torch(labels)
        if not (torch or isinstance(labels, np.ndarray)):
            labels = np.asarray(labels)
        name = type(self).__name__
        floating = labels.dtype.is_floating_point if torch else labels.dtype.kind == "f"
        if labels.ndim == 2:
            k = self.num_classes
            if k is not None and int(labels.shape[1]) != k:
                raise ValueError(f"{name}: soft labels of shape {tuple(labels.shape)} do not have num_classes={k} columns")
            if floating:
                return labels
            return labels.float() if torch else labels.astype(np.float32)
        if labels.ndim != 1 or floating:
            raise ValueError(
                f"{name}: labels must be integer class indices of shape (B,) or soft labels (B, K), got {labels.dtype} of shape {tuple(labels.shape)}"
            )
        k = self.num_classes
        if k is None:
            raise ValueError(f"{name}: integer labels of shape (B,) need num_classes= (to make one-hot rows); pass num_classes")
        if count:
            low, high = (int(labels.min()), int(labels.max()))
            if low < 0 or high >= k:
                raise ValueError(f"{name}: labels must be in [0, num_classes={k}), got values from {low} to {high}")
        s = self.label_smoothing
        off = s / k
        on = 1.0 - s + off
        if torch:
            import torch as t

            out = t.full((count, k), off, dtype=t.float32, device=labels.device)
            out.scatter_(1, labels.long()[:, None], on)
            return out
        out = np.full((count, k), off, np.float32)
        out[np.arange(count), labels.astype(np.int64)] = on
        return out


class OutputBuffers:
    """Reusable NumPy output arrays for the batch ops of one loader: ``empty_like(a)`` returns an
    array of ``a``'s shape and dtype that nothing outside holds (no batch, view or tensor of it, by
    reference count, as ``core.slots`` decides), else a new one. A loader whose consumer drops
    each batch allocates nothing in steady state (a fresh large array costs page faults: about
    0.1 ms per 224x224x3 float32 image)."""

    def __init__(self, keep: int = 8):
        self._free: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        key = (tuple(a.shape), a.dtype.str)
        with self._lock:
            held = self._free.setdefault(key, [])
            for buffer in held:
                if sys.getrefcount(buffer) == 3:  # the list, this loop's name, getrefcount's argument
                    return buffer
            buffer = np.empty(a.shape, a.dtype)
            if len(held) < self._keep:
                held.append(buffer)
            return buffer


def _mixup_images(images: Any, lam: float, empty: Any = np.empty_like) -> Any:
    """``rolled * (1 - lam) + images * lam``: torchvision's float op; integer images in float32,
    rounded half to even and clipped. NumPy arrays go sample by sample (each sample's work stays
    in the cache), with the same element-wise operations as the whole-batch formula; C-contiguous
    uint8, float32 and float16 ones, for lam in [0, 1], in one compiled pass when the extension is
    built (``_roijpeg.mixup``, the same bits)."""
    if _is_torch(images):
        if images.dtype.is_floating_point:
            return images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        import torch

        f = images.to(torch.float32)
        out = f.roll(1, 0).mul_(1.0 - lam).add_(f.mul(lam)).round_()
        info = torch.iinfo(images.dtype)
        return out.clamp_(info.min, info.max).to(images.dtype)
    if images.dtype.kind == "f":
        kind = images.dtype.type
    elif images.dtype.kind in "ui":
        kind = np.float32
    else:
        raise TypeError(f"MixUp: images must be float or integer, got {images.dtype}")
    out = empty(images)
    if not len(images):
        return out
    if (
        _mix is not None and images.dtype in _MIXED and 0.0 <= lam <= 1.0 and images.flags.c_contiguous
        and out.flags.c_contiguous and out.flags.writeable and not np.may_share_memory(images, out)
    ):  # fmt: skip
        _mix(images, out, float(lam))  # (one pass, without the GIL)
        return out
    if images.dtype == np.float16:  # torch computes half products and sums in float32, rounding each to half
        a32, b32 = np.float32(1.0 - lam), np.float32(lam)
        for i in range(len(images)):
            first = (images[i - 1].astype(np.float32) * a32).astype(np.float16)
            second = (images[i].astype(np.float32) * b32).astype(np.float16)
            out[i] = (first.astype(np.float32) + second.astype(np.float32)).astype(np.float16)
        return out
    a, b = kind(1.0 - lam), kind(lam)
    first, second = np.empty(images.shape[1:], kind), np.empty(images.shape[1:], kind)
    integer = images.dtype.kind != "f"
    if integer:
        info = np.iinfo(images.dtype)
    for i in range(len(images)):
        np.multiply(images[i - 1], a, out=first)  # (i - 1 = -1: the last sample, as roll gives)
        np.multiply(images[i], b, out=second)
        if integer:
            first += second
            np.rint(first, out=first)
            np.clip(first, info.min, info.max, out=first)
            out[i] = first  # (exact: whole numbers within the dtype's range)
        else:
            np.add(first, second, out=out[i, ...])  # (a 0-d view for a batch of scalars)
    return out


def _cutmix_images(images: Any, box: tuple[int, int, int, int], layout: str, empty: Any = np.empty_like) -> Any:
    """``images`` with the box's pixels taken from the rolled batch."""
    x1, y1, x2, y2 = box
    if _is_torch(images):
        out = images.clone()
        region = (
            (slice(None), slice(None), slice(y1, y2), slice(x1, x2))
            if layout == "CHW"
            else (slice(None), slice(y1, y2), slice(x1, x2))
        )
        out[region] = images[region].roll(1, 0)
        return out
    out = empty(images)
    np.copyto(out, images)
    region = (
        (slice(None), slice(None), slice(y1, y2), slice(x1, x2))
        if layout == "CHW"
        else (slice(None), slice(y1, y2), slice(x1, x2))
    )
    out[region][1:] = images[region][:-1]
    out[region][:1] = images[region][-1:]
    return out


def _mix_labels(targets: Any, lam: float) -> Any:
    """``rolled * (1 - lam) + targets * lam`` (torchvision's ``_mixup_label``)."""
    if _is_torch(targets):
        return targets.roll(1, 0).mul_(1.0 - lam).add_(targets.mul(lam))
    kind = targets.dtype.type
    out = np.roll(targets, 1, axis=0) * kind(1.0 - lam)
    out += targets * kind(lam)
    return out


class _OneAlpha(BatchOp):
    """A batch op with one Beta(alpha, alpha) for its lambda (MixUp's, CutMix's)."""

    def __init__(
        self, alpha: float = 1.0, num_classes: int | None = None, label_smoothing: float = 0.0,
        image: str | int = "image", label: str | int = "label", layout: str = "auto",
    ):  # fmt: skip
        super().__init__(num_classes, label_smoothing, image, label, layout)
        self.alpha = _check_alpha("alpha", alpha)


class MixUp(_OneAlpha):
    """MixUp (Zhang et al. 2018) with torchvision v2's semantics (module doc): every batch is mixed
    with lambda ~ Beta(alpha, alpha). ``num_classes`` is needed for integer labels."""

    draws = BETA_DRAWS

    def params(self, u: np.ndarray, shape: tuple[int, ...]) -> dict[str, Any]:
        return {"kind": "mixup", "lam": _lam(u[:BETA_DRAWS], self.alpha)}

    def __repr__(self) -> str:
        return f"MixUp(alpha={self.alpha}, num_classes={self.num_classes}, label_smoothing={self.label_smoothing})"


class CutMix(_OneAlpha):
    """CutMix (Yun et al. 2019) with torchvision v2's box and area-corrected lambda (module doc).
    Works on any dtype (a copy). ``layout``: "auto", "HWC" or "CHW"."""

    draws = BETA_DRAWS + 2

    def params(self, u: np.ndarray, shape: tuple[int, ...]) -> dict[str, Any]:
        height, width, layout = self._hw(shape)
        box, lam = _box(_lam(u[:BETA_DRAWS], self.alpha), float(u[BETA_DRAWS]), float(u[BETA_DRAWS + 1]), height, width)
        return {"kind": "cutmix", "lam": lam, "box": box, "layout": layout}

    def __repr__(self) -> str:
        return f"CutMix(alpha={self.alpha}, num_classes={self.num_classes}, label_smoothing={self.label_smoothing})"


class MixUpOrCutMix(BatchOp):
    """timm's ``Mixup`` choice (module doc): with probability ``prob`` mix the batch; then CutMix
    (``cutmix_alpha``) with probability ``switch_prob``, else MixUp (``mixup_alpha``). An alpha of 0
    turns that op off (the other is then always chosen); both 0 is an error. The defaults are the
    DeiT recipe's (0.8, 1.0, 0.5); torchvision's reference scripts' ``RandomChoice`` is
    ``switch_prob=0.5, prob=1.0``."""

    draws = 2 + BETA_DRAWS + 2  # apply?, which?, lambda, the CutMix center

    def __init__(
        self, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0, switch_prob: float = 0.5, prob: float = 1.0,
        num_classes: int | None = None, label_smoothing: float = 0.0, image: str | int = "image", label: str | int = "label",
        layout: str = "auto",
    ):  # fmt: skip
        super().__init__(num_classes, label_smoothing, image, label, layout)
        self.mixup_alpha = _check_alpha("mixup_alpha", mixup_alpha, zero=True)
        self.cutmix_alpha = _check_alpha("cutmix_alpha", cutmix_alpha, zero=True)
        if self.mixup_alpha == 0 and self.cutmix_alpha == 0:
            raise ValueError("mixup_alpha and cutmix_alpha are both 0: at least one must be > 0")
        self.switch_prob = _check_probability("switch_prob", switch_prob)
        self.prob = _check_probability("prob", prob)

    def choice(self, u: np.ndarray) -> str:
        """ "none", "mixup" or "cutmix", from the first two of this op's uniforms."""
        if not float(u[0]) < self.prob:
            return "none"
        if self.mixup_alpha == 0:
            return "cutmix"
        if self.cutmix_alpha == 0:
            return "mixup"
        return "cutmix" if float(u[1]) < self.switch_prob else "mixup"

    def params(self, u: np.ndarray, shape: tuple[int, ...]) -> dict[str, Any]:
        kind = self.choice(u)
        beta = u[2 : 2 + BETA_DRAWS]
        if kind == "none":
            return {"kind": "none", "lam": 1.0}
        if kind == "mixup":
            return {"kind": "mixup", "lam": _lam(beta, self.mixup_alpha)}
        height, width, layout = self._hw(shape)
        center = u[2 + BETA_DRAWS :]
        box, lam = _box(_lam(beta, self.cutmix_alpha), float(center[0]), float(center[1]), height, width)
        return {"kind": "cutmix", "lam": lam, "box": box, "layout": layout}

    def __repr__(self) -> str:
        return (
            f"MixUpOrCutMix(mixup_alpha={self.mixup_alpha}, cutmix_alpha={self.cutmix_alpha}, switch_prob={self.switch_prob}, "
            f"prob={self.prob}, num_classes={self.num_classes}, label_smoothing={self.label_smoothing})"
        )


def check_batch_ops(ops: Sequence[Any] | None) -> tuple[BatchOp, ...]:
    """``batch_ops=`` checked: a list or tuple of ``BatchOp`` (None: none)."""
    if ops is None:
        return ()
    if isinstance(ops, BatchOp) or not isinstance(ops, (list, tuple)):
        raise TypeError(f"batch_ops must be a list of batch ops (MixUp, CutMix, MixUpOrCutMix), got {type(ops).__name__}")
    for op in ops:
        if not isinstance(op, BatchOp):
            raise TypeError(f"batch_ops must hold batch ops (MixUp, CutMix, MixUpOrCutMix), got {type(op).__name__}")
    if len(ops) >= 1 << 16:
        raise ValueError(f"batch_ops holds {len(ops)} ops; at most 65535")
    return tuple(ops)
