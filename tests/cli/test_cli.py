"""The ``slipstream`` command line: ``demo``, ``convert``, ``inspect``, ``info``, ``bench``, ``validate`` and
``--version`` (in process and through the installed entry point), their messages and exit codes for bad
input, and the Makefile targets that install what the demo and the benchmarks' smoke tests need."""

from helpers import run_python


def test_the_demo_runs_and_prints_slipstream_throughput():
    result = run_python("from slipstream.cli.main import main; main(['demo', '--samples', '64', '--batch-size', '16'])", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "slipstream DataLoader" in result.stdout and "img/s" in result.stdout


# -- convert and inspect -------------------------------------------------------------------------------
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from helpers import SRC  # noqa: E402


def _images_file(path, n=30, page_size=2048):
    import slipstream as ss
    from slipstream import fields as F

    rng = np.random.default_rng(0)
    samples = [{"image": rng.integers(0, 256, (8 + i % 4, 6 + i % 3, 3), dtype=np.uint8), "label": i % 5} for i in range(n)]
    ss.write(path, samples, {"image": F.Image(codec="png", policy="proportion", proportion=0.5), "label": F.Int()}, page_size=page_size, progress=False)
    return samples


def test_inspect_prints_schema_counts_sizes_and_codec_mix(tmp_path, capsys):
    import slipstream as ss
    from slipstream.cli.main import main

    path = tmp_path / "mix.ss"
    samples = _images_file(path)
    ds = ss.open(path)
    codecs = [ds.page(p)["image"].codec(r) for p in range(ds.num_pages) for r in range(len(ds.page(p)["image"].codes))]
    assert 0 < codecs.count("png") < 30 and ds.num_pages > 1
    assert main(["inspect", str(path), "--validate"]) == 0
    out = capsys.readouterr().out
    assert "samples   30" in out and f"pages     {ds.num_pages}" in out
    assert f"({path.stat().st_size} bytes)" in out
    assert f"png {codecs.count('png')} " in out and f"raw {codecs.count('raw')} " in out
    heights = np.mean([s["image"].shape[0] for s in samples])
    widths = np.mean([s["image"].shape[1] for s in samples])
    assert f"mean height {heights:.1f}, mean width {widths:.1f}" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip() and "field" not in line}
    assert "image" in lines["image"] and "codec=png" in lines["image"] and "policy=proportion" in lines["image"]
    assert lines["label"].split()[1:4] == ["int", "-", "240"]  # 30 int64 values: 240 bytes
    assert "checksums ok" in out


def test_inspect_bad_files_print_one_line_and_exit_2(tmp_path, capsys):
    from slipstream.cli.main import main

    (tmp_path / "notes.txt").write_text("hello\n")
    path = tmp_path / "good.ss"
    samples = _images_file(path, n=6, page_size=1 << 20)
    data = path.read_bytes()
    (tmp_path / "cut.ss").write_bytes(data[: len(data) // 2])
    cases = {"notes.txt": "not an Arrow IPC file", "cut.ss": "cut short", "missing.ss": "No such file"}
    for name, message in cases.items():
        assert main(["inspect", str(tmp_path / name)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.startswith("slipstream inspect: ") and message in captured.err
        assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    # a damaged page: the structure still reads, the checksum does not match
    ds_bytes = bytearray(data)
    raw = next(s["image"].tobytes() for s in samples if data.find(s["image"].tobytes()) >= 0)  # a raw-stored image
    ds_bytes[data.find(raw) + 5] ^= 0xFF
    (tmp_path / "flipped.ss").write_bytes(bytes(ds_bytes))
    code = main(["inspect", str(tmp_path / "flipped.ss"), "--validate"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


def test_convert_options_are_checked_by_the_parser(tmp_path, capsys):
    from slipstream.cli.main import _size, main

    assert [_size(s) for s in ("4096", "8M", "8MiB", "512k", "512Ki", "1G", "1GB")] == [4096, 8 * 10**6, 8 << 20, 512_000, 512 << 10, 10**9, 10**9]
    for bad in (["--quality", "0"], ["--page-size", "lots"], ["--max-side", "-3"], ["--codec", "webp"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["convert", "a.npy", "b.ss", *bad])
        assert exit_info.value.code == 2
    capsys.readouterr()


def test_the_installed_entry_point_converts_and_inspects(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.int16).reshape(6, 2))
    (tmp_path / "bad.ss").write_bytes(b"ARROW1 but nothing else")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "slipstream", *args], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)

    converted = run("convert", "x.npy", "x.ss")
    assert converted.returncode == 0, converted.stderr
    assert "x.ss: 6 samples" in converted.stdout and converted.stderr == ""  # no bar when stderr is not a terminal
    inspected = run("inspect", "x.ss")
    assert inspected.returncode == 0 and "samples   6" in inspected.stdout and "dtype=<i2 shape=[2]" in inspected.stdout
    bad = run("inspect", "bad.ss")
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1 and "bad.ss" in bad.stderr


def test_version_prints_the_package_version():
    result = subprocess.run([sys.executable, "-m", "slipstream", "--version"], capture_output=True, text=True, timeout=60)
    import slipstream

    assert result.returncode == 0 and result.stdout.strip() == f"slipstream {slipstream.__version__}"


# -- info ----------------------------------------------------------------------------------------


def test_info_prints_versions_cores_and_the_active_fast_paths(capsys):
    import slipstream
    from slipstream.cli.main import main
    from slipstream.core.cpus import usable_cores
    from slipstream.images import kernels
    from slipstream.images.pipeline import ROI_DECODE

    assert main(["info"]) == 0
    lines = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in capsys.readouterr().out.splitlines()}
    assert lines["slipstream"] == slipstream.__version__ and lines["numpy"] == np.__version__
    assert lines["usable cores"].startswith(f"{usable_cores()} (") and f"os.cpu_count() {os.cpu_count()}" in lines["usable cores"]
    assert lines["pixel kernels"].startswith("active (images._roijpeg)") == kernels.C_RESAMPLER
    assert lines["region JPEG decoder"].startswith("active") == ROI_DECODE
    jpeg = "via images._roijpeg (compiled" if kernels.C_RESAMPLER else "via Pillow"
    assert lines["JPEG decoding"].startswith("libjpeg-turbo ") and jpeg in lines["JPEG decoding"], lines["JPEG decoding"]
    assert {"pyarrow", "torch", "jax", "python"} <= lines.keys()


def test_info_says_what_the_environment_switched_off_and_imports_no_framework():
    result = run_python(
        """
        import sys
        from slipstream.cli.main import main
        main(["info"])
        print("IMPORTED", "torch" in sys.modules, "jax" in sys.modules)
        """,
        env={"SLIPSTREAM_NO_ROIJPEG": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert "pixel kernels        disabled by SLIPSTREAM_NO_ROIJPEG: the NumPy reference resamples" in result.stdout
    assert "region JPEG decoder  disabled by SLIPSTREAM_NO_ROIJPEG" in result.stdout
    assert "IMPORTED False False" in result.stdout


def test_info_says_the_compiled_image_code_is_not_built():
    code = "import sys; sys.modules['slipstream.images._roijpeg'] = None\nfrom slipstream.cli.main import main; main(['info'])"
    result = run_python(code, env={"SLIPSTREAM_NO_ROIJPEG": ""})
    assert result.returncode == 0, result.stderr
    assert "pixel kernels        not built: the NumPy reference resamples" in result.stdout
    assert "region JPEG decoder  not built" in result.stdout


def test_the_installed_entry_point_runs_info():
    result = subprocess.run([sys.executable, "-m", "slipstream", "info"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "usable cores" in result.stdout and "region JPEG decoder" in result.stdout


def test_bench_times_a_packed_file_and_reports_waits_and_busy_workers(tmp_path, capsys):
    from slipstream.cli.main import main

    path = tmp_path / "imgs.ss"
    _images_file(path, n=24)
    assert main(["bench", str(path), "--workers", "2", "--batch-size", "8", "--epochs", "1", "--pipeline", "center"]) == 0
    out = capsys.readouterr().out
    assert "24 samples, image fields ['image'], pipeline 'center'" in out
    line = next(line for line in out.splitlines() if "samples/s" in line)
    assert "thread" in line and "workers=2" in line and "consumer waited" in line and "worker threads busy" in line
    stages = next(line for line in out.splitlines() if "worker time per sample" in line)
    assert all(f"{stage} " in stages for stage in ("read", "decode", "augment", "collate")), stages


def test_bench_sweep_measures_every_backend_and_names_the_fastest(tmp_path, capsys):
    from slipstream.cli.main import main

    path = tmp_path / "imgs.ss"
    _images_file(path, n=16)
    assert main(["bench", str(path), "--sweep", "--batch-size", "8", "--epochs", "1", "--samples", "16"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "samples/s" in line and not line.strip().startswith("-")]
    assert {line.split()[0] for line in rows} == {"thread", "process", "helper"}
    assert "fastest here: backend=" in out


def test_bench_of_a_missing_file_says_so_in_one_line(tmp_path, capsys):
    from slipstream.cli.main import main

    assert main(["bench", str(tmp_path / "nope.ss")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("slipstream bench:") and "nope.ss" in err and "\n" not in err


def test_ray_takes_no_value_so_it_never_swallows_src_and_the_address_has_its_own_flag(tmp_path, monkeypatch, capsys):
    import slipstream.cli.main as cli

    calls = []

    def convert(src: str, out: str, **settings: object) -> None:  # records what the parser made of the flags
        calls.append((src, out, settings["engine"], settings["ray_address"]))
        raise ValueError("stop")

    monkeypatch.setattr(cli, "convert", convert)
    assert cli.main(["convert", "--shard-size", "1M", "--ray", "src.npy", "out"]) == 2
    assert calls[-1] == ("src.npy", "out", "ray", None)
    assert cli.main(["convert", "src.npy", "out", "--shard-size", "1M", "--ray-address", "head:6379"]) == 2
    assert calls[-1] == ("src.npy", "out", "ray", "head:6379")
    assert cli.main(["convert", "src.npy", "out", "--shard-size", "1M", "--ray", "--ray-address", "head:6379"]) == 2
    assert calls[-1] == ("src.npy", "out", "ray", "head:6379")
    capsys.readouterr()
    assert cli.main(["convert", "src.npy", "out", "--shard-size", "1M", "--processes", "--ray-address", "head:6379"]) == 2
    assert "--ray-address is for --ray" in capsys.readouterr().err and len(calls) == 3


# -- validate, demo without the files extra, the Makefile ---------------------------------------------


def test_validate_checks_every_page_and_names_the_first_bad_one(tmp_path, capsys):
    import slipstream as ss
    from slipstream import fields as F
    from slipstream.cli.main import main

    good = tmp_path / "good.ss"
    samples = _images_file(good, n=30)
    shards = tmp_path / "shards"
    ss.write(shards, [{"x": i} for i in range(50)], {"x": F.Int()}, shard_size=300, page_size=128, progress=False)
    assert main(["validate", str(good), str(shards)]) == 0
    out = capsys.readouterr().out.splitlines()
    pages = ss.open(good).num_pages
    assert out[0] == f"{good}: ok, 30 samples, {pages} pages, every page matches its checksum"
    assert out[1].startswith(f"{shards}: ok, 50 samples, ") and " shards, every page matches" in out[1]
    data = bytearray(good.read_bytes())
    raw = next(s["image"].tobytes() for s in samples if data.find(s["image"].tobytes()) >= 0)  # a raw-stored image
    data[data.find(raw) + 5] ^= 0xFF
    flipped = tmp_path / "flipped.ss"
    flipped.write_bytes(bytes(data))
    assert main(["validate", str(flipped), str(good), str(tmp_path / "missing.ss")]) == 2
    captured = capsys.readouterr()
    assert captured.out == f"{good}: ok, 30 samples, {pages} pages, every page matches its checksum\n"  # the others still checked
    err = captured.err.splitlines()
    assert len(err) == 2 and all(line.startswith("slipstream validate: ") for line in err), err
    assert "fails its checksum" in err[0] and "page " in err[0] and "missing.ss" in err[1]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("module", ["PIL", "pyarrow"])
def test_the_demo_without_the_files_extra_says_what_to_install_and_exits_2(module):
    result = run_python(  # as a core-only install: the module cannot be imported
        f"""
        import sys
        sys.modules[{module!r}] = None
        from slipstream.cli.main import main
        sys.exit(main(["demo", "--samples", "8"]))
        """
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("slipstream demo: ") and result.stderr.count("\n") == 1, result.stderr
    assert "pip install 'slipstream[files]'" in result.stderr and {"PIL": "Pillow"}.get(module, module) in result.stderr


def _make_dry_run(target, tmp_path):
    """The commands ``make TARGET`` would run for a new virtual environment (``make -n``: nothing runs)."""
    root = Path(__file__).resolve().parents[2]
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # without the calling make's variables (CI runs the suite from `make test WHEEL=...`: make exports WHEEL)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "WHEEL")}
    result = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], capture_output=True, text=True, cwd=root, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_demo_installs_the_files_extra_and_torch_only_and_says_so(tmp_path):
    commands = _make_dry_run("demo", tmp_path)
    installs = [line.split("pip install", 1)[1] for line in commands.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert len(installs) == 2 and "-e '.[files]'" in installs[0] and "torch" in installs[1], installs
    for tool in ("[test]", "moto", "boto3", "hypothesis", "s3fs", "pytest", "scikit-image"):
        assert not any(tool in line for line in installs), (tool, installs)
    assert not any(" -q " in line for line in installs), installs  # pip's own lines show what it fetches
    says = [line for line in commands.splitlines() if line.startswith("echo ")]
    assert len(says) >= 4 and any("file formats" in line for line in says) and any("PyTorch" in line for line in says), says


def test_make_test_installs_scikit_image_for_the_benchmarks_smoke_tests(tmp_path):
    commands = _make_dry_run("test", tmp_path)
    assert "scikit-image" in commands and "-e '.[test]'" in commands
    assert commands.index("scikit-image") < commands.index("pytest -q")
