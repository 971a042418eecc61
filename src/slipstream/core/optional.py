"""Optional dependencies, imported one way.

slipstream's core needs NumPy alone; packed files, image codecs, the compiled
image code (JPEG region decoding, resampling) and the Hugging Face bridge are optional. Two calls import them:

- ``require(module, extra=..., purpose=...)``: a dependency a feature cannot work without. When
  it is missing, ``ImportError`` with the install hint, always in one shape:
  ``"<purpose>: pip install 'slipstream[<extra>]' (or pip install <package>)"``, e.g.
  ``"packed files need pyarrow: pip install 'slipstream[files]' (or pip install pyarrow)"``.
- ``optional(module, disable_env=...)`` (``probe`` also says why): a dependency that only makes something faster. ``None``
  when it is missing, or when the environment variable ``disable_env`` is set to anything but
  "", "0", "false", "no" or "off"; the caller then falls back to its slower path.

Both return the imported module (the submodule itself for a dotted name) and import nothing until called.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

__all__ = ["disabled", "optional", "probe", "require"]


def require(module: str, *, extra: str, purpose: str, package: str | None = None, note: str | None = None) -> ModuleType:
    """Import ``module``, or raise ``ImportError`` with the install hint.

    ``purpose``: what needs it, as a sentence naming the dependency ("packed files need pyarrow").
    ``extra``: the ``slipstream[extra]`` that installs it. ``package``: its name on PyPI (default:
    the top-level module name; "Pillow" for ``PIL``). ``note``: said after the hint (which build
    to pick for an accelerator).
    """
    loaded = sys.modules.get(module)  # the common case, on hot paths: no import machinery...
    if loaded is not None and not getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        return loaded  # ...unless another thread is still importing it: then wait for it, as ``import`` does
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = package or module.partition(".")[0]
        text = f"{purpose}: pip install 'slipstream[{extra}]' (or pip install {name})"
        text = text if note is None else f"{text}; {note}"
        if isinstance(exc, ModuleNotFoundError):  # still caught as one, naming the module that is missing
            raise ModuleNotFoundError(text, name=exc.name) from exc
        raise ImportError(text) from exc


def disabled(variable: str) -> bool:
    """Whether the environment variable ``variable`` switches something off (set, and not "", "0", "false", "no" or "off")."""
    return os.environ.get(variable, "").strip().lower() not in ("", "0", "false", "no", "off")


def probe(
    module: str,
    *,
    disable_env: str | None = None,
    errors: tuple[type[BaseException], ...] = (ImportError,),
    missing: str = "missing",
) -> tuple[ModuleType | None, str]:
    """``module`` imported, or None, and why: "active"; "disabled by <disable_env>" (a set
    environment variable, see ``disabled``); ``missing`` (it is not there); or "failed to import
    (<error>)" (one of ``errors`` raised while importing it: a library that can be installed yet
    broken, such as numba against a newer NumPy, passes ``(Exception,)``)."""
    if disable_env is not None and disabled(disable_env):
        return None, f"disabled by {disable_env}"
    try:
        return importlib.import_module(module), "active"
    except errors as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and module.startswith(exc.name):
            return None, missing
        return None, f"failed to import ({type(exc).__name__}: {' '.join(str(exc).split())})"


def optional(
    module: str, *, disable_env: str | None = None, errors: tuple[type[BaseException], ...] = (ImportError,)
) -> ModuleType | None:
    """``module`` imported, or None when it is missing, broken or switched off (see ``probe``)."""
    return probe(module, disable_env=disable_env, errors=errors)[0]
