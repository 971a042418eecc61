"""What a conversion source is: its samples and fields (``Source``), and the error for one that cannot be converted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConvertError
from ..files.field import Field

__all__ = ["SUPPORTED", "ConvertError", "Source"]

SUPPORTED = (
    "a folder of class sub-folders of images (root/<class>/<image files>), a .npy or .npz file, "
    "a .parquet file (or a folder of them), or a Hugging Face dataset saved with save_to_disk "
    "(a folder with dataset_info.json or state.json and data-*.arrow files)"
)


@dataclass
class Source:
    """A recognized source: ``data`` (a container or a sized iterable of dict samples) and its
    ``fields``; ``metadata`` to store with them (class names: ``{"class_names": {field: [names]}}``).
    ``data.sample_origin(index)``, when it has one, names where a sample comes from (its file) in
    ``ss.write``'s errors."""

    kind: str
    path: Path
    data: Any
    fields: dict[str, Field]
    notes: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    cautions: list[str] = field(default_factory=list)  # how the data is stored that the user may not expect (the CLI prints them)

    def __len__(self) -> int:
        return len(self.data)
