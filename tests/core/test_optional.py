"""core/optional.py: optional dependencies, imported one way."""

import os
import subprocess
import sys
import textwrap

import pytest
from helpers import SRC


def run_script(code, timeout=60, env=None):
    """``code`` in a fresh interpreter on this slipstream (a hang fails, never freezes)."""
    full = dict(os.environ, PYTHONPATH=SRC)
    full.pop("PYTHONUNBUFFERED", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=full, cwd="/tmp")


@pytest.mark.parametrize("blocked, call", [
    ("qoi", "ss.write(path, [{'img': np.zeros((8, 8, 3), np.uint8)}] * 2, fields={'img': F.Image(codec='qoi')})"),
    ("tqdm", "ss.write(path, {'x': np.zeros((4, 2))}, progress=True)"),
])
def test_missing_optional_module_is_still_a_module_not_found_error(blocked, call, tmp_path):
    """A missing qoi / tqdm surfaces as ModuleNotFoundError (``core.optional.require``'s error is
    one, with the install hint), so a caller's ``except ModuleNotFoundError`` still catches it."""
    r = run_script(
        f"""
        import sys
        sys.modules[{blocked!r}] = None
        import numpy as np, slipstream as ss
        from slipstream import fields as F
        path = {str(tmp_path / 'out.ss')!r}
        try:
            {call}
        except ModuleNotFoundError:
            print("ModuleNotFoundError")
        except ImportError as exc:
            print("ImportError", exc)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ModuleNotFoundError", r.stdout


def test_a_missing_dependency_names_the_extra_and_the_package():
    from slipstream.core.optional import optional, require

    with pytest.raises(ModuleNotFoundError, match=r"things need nothere: pip install 'slipstream\[files\]' \(or pip install nothere\); a note") as info:
        require("nothere", extra="files", purpose="things need nothere", note="a note")
    assert info.value.name == "nothere"
    assert optional("nothere") is None and optional("os") is os
    os.environ["SLIPSTREAM_TEST_OFF"] = "1"
    try:
        assert optional("os", disable_env="SLIPSTREAM_TEST_OFF") is None
    finally:
        del os.environ["SLIPSTREAM_TEST_OFF"]


def test_threads_that_ask_for_a_module_while_another_imports_it_get_the_whole_module(tmp_path):
    """A module still being imported by one thread is in sys.modules already: the others must wait
    for it (as ``import`` does), not take the half-made module."""
    (tmp_path / "slowmod.py").write_text("import time\ntime.sleep(0.3)\ndef ready():\n    return 'ready'\n")
    code = """
        import sys, threading
        from slipstream.core.optional import require
        out = []
        def ask():
            out.append(require("slowmod", extra="files", purpose="x").ready())
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(out)
    """
    result = run_script(code, env={"PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path}"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['ready', 'ready', 'ready', 'ready']"


def test_probe_says_why_a_module_is_not_active(tmp_path, monkeypatch):
    from slipstream.core.optional import probe

    (tmp_path / "brokenmod.py").write_text("raise RuntimeError('built for another numpy')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert probe("os") == (os, "active")
    monkeypatch.setenv("SLIPSTREAM_TEST_OFF", "yes")
    assert probe("os", disable_env="SLIPSTREAM_TEST_OFF") == (None, "disabled by SLIPSTREAM_TEST_OFF")
    assert probe("nothere.sub", missing="not built") == (None, "not built")
    assert probe("brokenmod", errors=(Exception,)) == (None, "failed to import (RuntimeError: built for another numpy)")
    with pytest.raises(RuntimeError):
        probe("brokenmod")  # only the errors asked for are caught
