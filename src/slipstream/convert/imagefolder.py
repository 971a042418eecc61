"""``ss.imagefolder(root)``: a class-per-folder image tree (torchvision's ImageFolder layout) as a container.

``root/<class>/<file>``: classes are the sorted sub-folder names, labelled 0, 1, ...; files are
taken in sorted order within each class (so the order, and a packed file made from it, is
deterministic). ``ds[i]`` is ``{"image": ..., "label": int, "path": str}`` where the image is the
file's encoded bytes (the default: ``ss.write`` then stores JPEGs without a second lossy encode)
or, with ``decode=True``, a uint8 (H, W, C) array with ``channels`` channels (3 by default, RGB as
torchvision's ImageFolder gives; None keeps each file's own). Encoded bytes keep the file's own
channels: pack them with ``F.Image(channels=3)``, or map them with ``ops.ToRGB()``.

``ss.write(path, ss.imagefolder(root))`` stores what ``slipstream convert root path`` stores: the
fields ``default_fields()`` gives (``image`` as ``F.Image(codec="jpeg", channels=3)``: JPEG files
that need no resize are kept byte for byte, other formats (PNG...) are re-encoded as JPEG, lossy;
pass ``fields=`` with ``F.Image(codec="png")`` to keep them lossless) and the class names
(``default_metadata``: ``ss.open(path).metadata["class_names"]["label"]``), also with ``fields=``.

A relative ``root`` stays relative in the samples' ``path``, but its files are read from the
folder that was current when the tree was listed, in whichever process reads them (a worker
process, a Ray task on another node's working directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..files import field_kinds as F
from ..images.encoded import codecs as _imaging

__all__ = ["ImageFolder", "imagefolder"]

EXTENSIONS = (".jpg", ".jpeg", ".png", ".qoi", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


class ImageFolder:
    """A class-per-folder tree of image files (see ``ss.imagefolder``)."""

    def __init__(
        self, root: str | os.PathLike, decode: bool = False, extensions: tuple[str, ...] = EXTENSIONS, channels: int | None = 3
    ):
        if channels not in (None, 1, 3) or isinstance(channels, bool):
            raise ValueError(f"channels must be None (each file's own), 1 (grayscale) or 3 (RGB), got {channels!r}")
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotADirectoryError(f"{self.root}: expected a folder with one sub-folder of images per class")
        self.classes = sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir() and not entry.name.startswith("."))
        if not self.classes:
            raise ValueError(f"{self.root}: no class sub-folders found (expected root/<class>/<image files>)")
        extensions = tuple(e.lower() for e in extensions)
        self.samples: list[tuple[str, int]] = []
        for label, name in enumerate(self.classes):
            for folder, subdirs, files in sorted(os.walk(self.root / name, followlinks=True)):
                subdirs.sort()
                for file in sorted(files):
                    if file.lower().endswith(extensions) and not file.startswith("."):
                        self.samples.append((os.path.join(folder, file), label))
        self.decode, self.channels = decode, channels
        self.opened_in = os.getcwd()  # a relative root's files are read from here, in any process (a Ray worker's cwd differs)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path, label = self.samples[index]
        data = Path(self.opened_in, path).read_bytes()  # ``path`` as listed (relative when the root is), read where it was listed
        image: Any = data
        if self.decode:
            image = _imaging.as_image(data, path)
            if self.channels is not None:
                image = _imaging.to_channels(image, self.channels)
        return {"image": image, "label": label, "path": path}

    def sample_origin(self, index: int) -> str:
        """Where sample ``index`` comes from, for error messages (``ss.write`` uses it)."""
        return f"file {self.samples[index][0]}"

    def default_fields(self) -> dict[str, Any]:
        """The fields ``ss.write`` stores when given none, as ``slipstream convert`` does: ``image``
        (JPEG, RGB, or each image's own channels with ``channels=None``), ``label``, ``path``."""
        return {"image": F.Image(codec="jpeg", channels=self.channels), "label": F.Int(), "path": F.Text()}

    def default_metadata(self, names: list[str]) -> dict[str, Any]:
        """The class names, ``{"class_names": {"label": [...]}}``, when ``label`` is written."""
        return {"class_names": {"label": list(self.classes)}} if "label" in names else {}

    def __repr__(self) -> str:
        return f"ss.imagefolder({str(self.root)!r}): {len(self)} images in {len(self.classes)} classes"


def imagefolder(root: str | os.PathLike, decode: bool = False, channels: int | None = 3) -> ImageFolder:
    """The images under ``root/<class>/`` as a container of ``{"image", "label", "path"}`` samples;
    ``channels`` applies to decoded images (``decode=True``), see the module doc."""
    return ImageFolder(root, decode=decode, channels=channels)
