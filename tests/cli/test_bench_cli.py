"""``slipstream bench``: common files load without a traceback, the warm-up is never
timed, and the advice after ``--sweep`` is the sweep's."""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("PIL")  # JPEG without the compiled extension

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream.cli import bench  # noqa: E402
from slipstream.cli.main import main  # noqa: E402


def _photos(path, n=24, sizes=True, gray=None, channels=None):
    """JPEGs of several sizes (``sizes``), one grayscale row at ``gray``, stored with ``channels``."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(n):
        h, w = (30 + 7 * (i % 5), 26 + 5 * (i % 3)) if sizes else (32, 32)
        samples.append({"image": rng.integers(0, 256, (h, w, 1 if i == gray else 3), dtype=np.uint8), "label": i % 4})
    ss.write(path, samples, {"image": F.Image(codec="jpeg", channels=channels), "label": F.Int()}, progress=False)
    return path


def _tokens(path, n=40):
    rng = np.random.default_rng(1)
    samples = [{"tokens": rng.integers(0, 50_000, 5 + i % 11, dtype=np.int32), "meta": {"k": i} if i % 2 else [i], "label": i} for i in range(n)]
    ss.write(path, samples, {"tokens": F.Array(dtype="int32", ndim=1), "meta": F.JSON(), "label": F.Int()}, progress=False)
    return path


FAST = ["--batch-size", "8", "--epochs", "1", "--warmup", "0", "--workers", "2"]


@pytest.mark.parametrize(
    "make, pipeline, note",
    [
        (lambda p: _photos(p), "decode", "'image' (images at their stored sizes)"),  # mixed-size photos as stored
        (lambda p: _photos(p, sizes=False, gray=5), "rrc", "bench puts ops.ToRGB() first"),  # a Hugging Face conversion's grayscale row
        (lambda p: _photos(p, sizes=False, gray=5), "center", "bench puts ops.ToRGB() first"),
        (lambda p: _photos(p, gray=3), "decode", "images at their stored sizes"),
        (_tokens, "rrc", "'tokens' (a ragged array: shapes vary), 'meta' (JSON values)"),  # a file of token arrays
    ],
    ids=["mixed-sizes-decode", "grayscale-row-rrc", "grayscale-row-center", "mixed-all-decode", "token-arrays"],
)
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_bench_picks_a_pipeline_that_batches_common_files(tmp_path, capsys, make, pipeline, note, backend):
    path = make(tmp_path / "data.ss")
    assert main(["bench", str(path), "--pipeline", pipeline, "--backend", backend, *FAST]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err == "", captured.err
    assert note in captured.out, captured.out
    line = next(line for line in captured.out.splitlines() if "samples/s" in line)
    assert line.split()[0] == backend and "workers=2" in line
    if make is _tokens:
        assert "no image field: this is a plain read rate" in captured.out


def test_bench_of_a_hugging_face_conversion_with_a_grayscale_row(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rng = np.random.default_rng(2)
    images = [Image.fromarray(rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)) for _ in range(12)]
    images[4] = Image.fromarray(rng.integers(0, 256, (32, 40), dtype=np.uint8))  # one grayscale row, as in real sets
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    datasets.Dataset.from_dict({"image": images, "label": [i % 3 for i in range(12)]}, features=features).save_to_disk(str(tmp_path / "hf"))
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "hf.ss"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["bench", str(tmp_path / "hf.ss"), *FAST]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "bench puts ops.ToRGB() first" in captured.out and "samples/s" in captured.out


def test_plan_adds_to_rgb_only_where_the_file_keeps_each_images_channels(tmp_path):
    kept = bench.plan(ss.open(_photos(tmp_path / "kept.ss", sizes=False, gray=2)), "rrc")
    assert kept.rgb == ["image"] and kept.collate is None and kept.resamples
    assert kept.data[2]["image"].shape == (3, 224, 224)  # the grayscale row, made RGB
    rgb = bench.plan(ss.open(_photos(tmp_path / "rgb.ss", sizes=False, channels=3)), "rrc")
    assert rgb.rgb == [] and not any("ToRGB" in note for note in rgb.notes)
    stored = bench.plan(ss.open(_photos(tmp_path / "sizes.ss")), "decode", samples=10)
    assert len(stored.data) == 10 and not stored.resamples and stored.collate.lists == ["image"]
    batch = stored.collate([stored.data[i] for i in range(4)])
    assert [im.shape for im in batch["image"]] == [stored.data[i]["image"].shape for i in range(4)]
    assert batch["label"].tolist() == [0, 1, 2, 3]  # fixed fields still stacked


def test_a_damaged_file_is_one_paragraph_on_stderr_and_exit_2(tmp_path, capsys):
    path = _photos(tmp_path / "good.ss", sizes=False, channels=3)
    data = bytearray(path.read_bytes())
    scan = data.find(b"\xff\xda", len(data) // 2)  # a JPEG's scan in the middle of the page
    data[scan + 20 : scan + 300] = bytes(280)
    bad = tmp_path / "bad.ss"
    bad.write_bytes(bytes(data))
    for backend in ("thread", "process"):
        assert main(["bench", str(bad), "--backend", backend, *FAST]) == 2
        err = capsys.readouterr().err
        assert err.startswith("slipstream bench: loading ") and "\n\n" not in err.strip(), err
        assert "Traceback" not in err and 'File "' not in err, err  # a worker's traceback is left out too
        text = " ".join(err.split())  # one paragraph, wrapped
        assert "CorruptFileError" in text and "What to do" in text and f"slipstream validate {bad}" in text, err
        assert f"backend={backend!r}" in text


def test_an_empty_file_says_there_is_nothing_to_time(tmp_path, capsys):
    path = tmp_path / "empty.ss"
    ss.write(path, [], {"label": F.Int()}, progress=False)
    assert main(["bench", str(path)]) == 2
    err = capsys.readouterr().err
    assert "holds no samples" in err and "Traceback" not in err


def test_the_timed_epochs_are_whole_and_exclude_the_warm_up(tmp_path):
    chosen = bench.plan(ss.open(_photos(tmp_path / "p.ss", n=40, sizes=False, channels=3)), "rrc")
    ticks = itertools.count()
    clock = lambda: next(ticks) * 0.1  # noqa: E731 - each reading 0.1 s later: the warm-up ends after 1 "second"
    result = bench.measure(chosen.data, 2, "thread", 8, 2, warmup=1.0, clock=clock)
    warm, timed = result["warmup"], result["timed"]
    assert warm["batches"] >= 10 and len(warm["epochs"]) >= 2 and warm["seconds"] >= 1.0  # 5 batches an epoch: it went on
    assert min(timed["epochs"]) > max(warm["epochs"]) and len(timed["epochs"]) == 2  # other epochs than the warm-up's
    assert timed["samples"] == 2 * 40 and result["stats"]["samples"] == 40  # whole epochs, none of the warm-up's samples
    assert result["stats"]["epoch"] == timed["epochs"][-1]
    assert result["samples_per_s"] == pytest.approx(timed["samples"] / timed["seconds"])
    quick = bench.measure(chosen.data, 1, "thread", 8, 1, warmup=0.0)
    assert quick["warmup"]["batches"] == bench.WARMUP_BATCHES and quick["warmup"]["epochs"] == [0]
    assert quick["timed"]["epochs"] == [1] and quick["timed"]["samples"] == 40


def _result(backend, workers, rate, busy=0.9):
    return {"backend": backend, "workers": workers, "samples_per_s": rate, "stats": {"worker_busy": busy, "wait_fraction": 0.9}}


def test_suggestions_after_a_sweep_follow_its_result():
    fast = {"region_decoder": "active"}
    one_best = [_result(b, k, (3000 if k == 1 else 1000) + 10 * i) for i, b in enumerate(("thread", "process")) for k in (1, 2, 4)]
    tips = bench.suggestions(one_best, 4, swept=True, **fast)
    assert tips[0].startswith("fastest here: backend='process', workers=1 ")
    assert any("more workers did not pay off" in tip and "keep workers=1" in tip for tip in tips), tips
    assert not any("more workers may pay off" in tip or "cores are usable" in tip for tip in tips), tips
    all_best = [_result("thread", k, 1000 * k) for k in (1, 2, 4)]
    tips = bench.suggestions(all_best, 4, swept=True, **fast)
    assert "workers=4" in tips[0] and any("used every usable core (4)" in tip for tip in tips), tips
    assert not any("did not pay off" in tip for tip in tips)
    swept_one_core = [_result(b, 1, 100 + i) for i, b in enumerate(("thread", "process", "helper"))]
    assert bench.suggestions(swept_one_core, 1, swept=True, **fast)[0].startswith("fastest here: backend='helper', workers=1")
    # one measurement, no sweep: fewer workers than cores may be worth more, and idle threads point at processes
    single = bench.suggestions([_result("thread", 2, 500, busy=0.3)], 4, **fast)
    assert any("--sweep measures them" in tip for tip in single) and any("try backend='process'" in tip for tip in single)
    assert bench.suggestions([_result("thread", 4, 500)], 4, **fast) == []
    # threads with nothing to do (a file of a few samples) are not said to be held back by the GIL
    assert not any("GIL" in tip for tip in bench.suggestions([_result("thread", 4, 500, busy=0.05)], 8, **fast))
    # the fast paths are named when the pipeline resamples images, never for a plain read rate
    slow = {"region_decoder": "not built"}
    tips = bench.suggestions([_result("thread", 4, 500)], 4, **slow)
    assert len(tips) == 1 and "is not built" in tips[0] and "resampled on NumPy" in tips[0], tips
    assert bench.suggestions([_result("thread", 4, 500)], 4, resamples=False, **slow) == []


def test_the_printed_advice_after_a_sweep_is_the_sweeps(tmp_path, monkeypatch, capsys):
    path = _photos(tmp_path / "p.ss", sizes=False, channels=3)
    monkeypatch.setattr(bench, "usable_cores", lambda: 4)
    calls = []

    def measure(data, workers, backend, batch_size, epochs, **settings):  # one worker is fastest on every backend
        calls.append((backend, workers))
        return _result(backend, workers, 2000 / workers)

    assert bench.run(str(path), pipeline="rrc", workers="auto", backend="thread", batch_size=8, epochs=1, samples=None,
                     sweep=True, measure=measure) == 0  # fmt: skip
    assert calls == [(b, k) for b in ("thread", "process", "helper") for k in (1, 2, 4)]
    out = capsys.readouterr().out
    tips = [line.strip()[2:] for line in out.splitlines() if line.strip().startswith("- ")]
    assert tips[-2].startswith("fastest here: backend='thread', workers=1 "), tips
    assert "more workers did not pay off" in tips[-1] and "keep workers=1" in tips[-1], tips
    assert "more workers may pay off" not in out and "cores are usable here" not in out


def _subparser(monkeypatch, command):
    """The argparse parser of ``slipstream COMMAND``, as main builds it."""
    seen = {}

    def parse_args(self, *args, **kwargs):
        seen["parser"] = self
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(SystemExit):
        main([command])
    (commands,) = [a for a in seen["parser"]._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[command]


@pytest.mark.parametrize("command", ["bench", "demo", "validate", "inspect"])
def test_every_option_has_help_text(monkeypatch, command):
    parser = _subparser(monkeypatch, command)
    actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    assert actions and parser.description
    missing = [a.option_strings or a.dest for a in actions if not (a.help or "").strip()]
    assert not missing, f"slipstream {command}: no help for {missing}"


def test_bench_options_are_checked_by_the_parser(capsys):
    for bad in (["--warmup", "-1"], ["--warmup", "soon"], ["--workers", "0"], ["--epochs", "0"], ["--pipeline", "blur"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", "x.ss", *bad])
        assert exit_info.value.code == 2
    capsys.readouterr()
