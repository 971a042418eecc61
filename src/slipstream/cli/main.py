"""The ``slipstream`` command line: ``slipstream demo``, ``convert``, ``inspect``, ``validate``, ``info`` and ``bench``."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from ..convert.sources import convert
from ..core.errors import PackedFileError
from ..core.sizes import parse_size
from ..core.version import __version__
from ..files.field import pyarrow_module
from ..loading.backends import BACKENDS
from ..remote.open import open as open_any
from ..write.failures import SKIP_HINT, SkippedSamplesWarning
from ..write.failures import describe as describe_skipped
from .bench import PIPELINES, WARMUP_BATCHES
from .bench import run as run_bench
from .demo import main as run_demo
from .info import run as run_info
from .inspect import fail, human
from .inspect import inspect as run_inspect
from .inspect import validate as run_validate


def _size(text: str) -> int:
    """A positive byte count, read as ``ss.write`` reads sizes (``core.sizes.parse_size``): ``8388608``,
    ``1G`` / ``1GB`` (10**9), ``8MiB`` / ``8Mi`` (2**23)."""
    try:
        value = parse_size(text, "a size")
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive byte count such as 8388608, 1G (10^9 bytes) or 8MiB (2^23 bytes), got {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _workers(text: str) -> int | str:
    return "auto" if text == "auto" else _positive(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _quality(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected an integer in 1..100, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slipstream", description="slipstream: data loading at hardware speed")
    parser.add_argument("--version", action="version", version=f"slipstream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="make, pack and train-load photo-like JPEGs with slipstream and torch; print img/s",
        description="Make photo-like JPEGs, pack them into a temporary file, train-load them (RandomResizedCrop(224) + flip) "
        "with slipstream and, when torch is installed, with torch.utils.data.DataLoader; print images/s for both. "
        "Needs the files extra: pip install 'slipstream[files]'.",
    )
    demo.add_argument("--samples", type=_positive, default=1000, metavar="N", help="images to make and load (default 1000)")
    demo.add_argument("--batch-size", type=_positive, default=64, metavar="N", help="samples per batch (default 64)")
    demo.add_argument("--workers", type=_positive, default=2, metavar="N", help="worker threads (torch: worker processes) (default 2)")

    convert = commands.add_parser(
        "convert",
        help="pack an image folder, .npy/.npz, .parquet or saved Hugging Face dataset into a packed file",
        description="Pack SRC into the packed file OUT. SRC: a folder root/<class>/<images> (fields image, label, path), "
        "a .npy file (field 'data'), a .npz file (a field per key), a .parquet file (a field per column), or a Hugging Face "
        "dataset saved with save_to_disk (a field per feature). The image options apply to every image field. Class names "
        "(folder names, ClassLabel names) are stored in the file's metadata. OUT is checked first: an existing file is "
        "replaced only with --force.",
    )
    convert.add_argument("src", metavar="SRC")
    convert.add_argument("out", metavar="OUT")
    convert.add_argument(
        "--codec", choices=["jpeg", "png", "qoi", "raw"], default="jpeg",
        help="image codec (default jpeg: JPEG files are kept byte for byte, other images, such as PNG, are re-encoded as JPEG, "
        "which is lossy, and the command says so; png, qoi and raw are lossless)",
    )  # fmt: skip
    convert.add_argument("--quality", type=_quality, default=90, help="JPEG quality 1..100 (default 90)")
    convert.add_argument(
        "--channels",
        choices=["auto", "3", "1", "keep"],
        default="auto",
        help="store images as RGB (3), grayscale (1) or as each is (keep); auto (default): RGB for image folders, keep otherwise",
    )
    convert.add_argument("--max-side", type=_positive, default=None, metavar="N", help="downscale images so the longer side is at most N")
    convert.add_argument("--min-side", type=_positive, default=None, metavar="N", help="downscale images so the shorter side is at most N")
    convert.add_argument(
        "--policy", choices=["smart", "proportion"], default=None, help="compress only large images (smart) or a seeded half of them (proportion)"
    )
    convert.add_argument("--workers", type=_positive, default=None, metavar="N", help="encoding threads (default: CPU count, at most 8)")
    convert.add_argument("--page-size", type=_size, default=8 << 20, metavar="BYTES", help="bytes per page (default 8MiB; K, M, G = 10^3, 10^6, 10^9 bytes, with or without B; KiB, MiB, GiB = 2^10, 2^20, 2^30)")
    convert.add_argument(
        "--shard-size", type=_size, default=None, metavar="BYTES", help="write OUT as a folder of shards of about this size (such as 1G = 1GB = 10^9 bytes, or 512MiB), plus index.json (for object storage)"
    )
    engines = convert.add_mutually_exclusive_group()
    engines.add_argument(
        "--ray", action="store_true",
        help="with --shard-size: one Ray task per shard, on the cluster Ray finds (RAY_ADDRESS, a `ray start` here), else a local Ray; "
        "OUT and SRC must be on a file system every node sees",
    )  # fmt: skip
    convert.add_argument(
        "--ray-address", default=None, metavar="ADDRESS", help="the Ray cluster to write on (such as head:6379 or ray://head:10001); implies --ray"
    )
    engines.add_argument(
        "--processes", nargs="?", type=_positive, const=0, default=None, metavar="N",
        help="with --shard-size: write the shards in N local processes (default N: every usable core)",
    )  # fmt: skip
    convert.add_argument("--no-progress", action="store_true", help="no progress bar (default: one when stderr is a terminal)")
    convert.add_argument("--force", action="store_true", help="replace OUT if it exists (checked before any encoding)")
    convert.add_argument(
        "--skip-bad", action="store_true",
        help="leave out samples that fail to read or encode (a damaged image) and write the others; each one left out is "
        "printed on stderr and listed in OUT's metadata (ss.open(OUT).metadata['skipped']). Default: stop at the first, naming it",
    )  # fmt: skip

    inspect = commands.add_parser(
        "inspect",
        help="print a packed file's schema, counts, sizes and image codecs",
        description="Print FILE's format, sample and page counts, size, each field's kind, settings and stored bytes, and "
        "for image fields the codec mix and the stored sizes. With --validate, also check every page's checksum.",
    )
    inspect.add_argument("file", metavar="FILE", help="a packed file, a folder of shards or a URL")
    inspect.add_argument("--validate", action="store_true", help="also check every page's checksum (as slipstream validate does)")

    validate = commands.add_parser(
        "validate",
        help="check every page of packed files against its stored checksum; exit 2 naming the first bad page",
        description="Check that each FILE opens and that every page matches the checksum stored when it was written "
        "(reads check only the structure: validate files you copy or download). Prints one line per file; exit status 2 "
        "when any file fails, naming the page and its samples.",
    )
    validate.add_argument("files", metavar="FILE", nargs="+", help="a packed file, a folder of shards or a URL")

    commands.add_parser(
        "info", help="print versions, the cores this process may use and which fast paths are active (pixel kernels, region JPEG decoder, libjpeg-turbo)"
    )

    bench = commands.add_parser(
        "bench",
        help="time loading a packed file here (samples/s, how long the consumer waited, how busy the workers were) and suggest settings",
        description="Time loading FILE with ss.DataLoader as a training loop would (an empty loop consumes the batches), "
        "after an untimed warm-up, and suggest settings from what was measured. Image fields go through --pipeline "
        "(ops.ToRGB() added when the file keeps each image's channel count); fields whose shapes vary (images with "
        "--pipeline decode, ragged arrays such as token ids, JSON) are batched as lists. Data that cannot be loaded is "
        "reported in one paragraph, exit status 2.",
    )
    bench.add_argument("file", metavar="FILE", help="a packed file, a folder of shards or a URL")
    bench.add_argument(
        "--pipeline", choices=sorted(PIPELINES), default="rrc",
        help="what the image fields go through: rrc = RandomResizedCrop(224) + flip + CHW (default), "
        "center = Resize(256) + CenterCrop(224) + CHW, decode = the decoded image as stored (batched as lists)",
    )  # fmt: skip
    bench.add_argument("--workers", type=_workers, default="auto", metavar="N|auto", help="loader workers: an integer or auto (default: the usable cores)")
    bench.add_argument(
        "--backend", choices=list(BACKENDS), default="thread",
        help="where the workers run: thread (default), process (worker processes) or helper (the threads in one helper process)",
    )  # fmt: skip
    bench.add_argument("--batch-size", type=_positive, default=64, metavar="N", help="samples per batch (default 64)")
    bench.add_argument("--epochs", type=_positive, default=2, metavar="N", help="whole epochs timed after the warm-up (default 2)")
    bench.add_argument("--samples", type=_positive, default=None, metavar="N", help="time only the first N samples (default: all)")
    bench.add_argument(
        "--warmup", type=_seconds, default=1.0, metavar="SECONDS",
        help=f"untimed warm-up before each measurement: at least SECONDS and {WARMUP_BATCHES} batches (default 1)",
    )  # fmt: skip
    bench.add_argument(
        "--sweep", action="store_true",
        help="measure 1, 2, 4, ... workers up to the usable cores on every backend, name the fastest (--workers and --backend are ignored)",
    )  # fmt: skip

    args = parser.parse_args(argv)
    if args.command == "info":
        return run_info()
    if args.command == "demo":
        return run_demo(n=args.samples, batch_size=args.batch_size, workers=args.workers)
    try:
        pa = pyarrow_module()  # convert and inspect read and write packed files
    except ImportError as exc:  # the install hint, on one line
        return fail(args.command, exc)
    if args.command == "convert":
        return _convert(args, pa)
    if args.command == "bench":
        try:
            return run_bench(
                args.file, pipeline=args.pipeline, workers=args.workers, backend=args.backend, batch_size=args.batch_size,
                epochs=args.epochs, samples=args.samples, sweep=args.sweep, warmup=args.warmup,
            )  # fmt: skip
        except (OSError, PackedFileError) as exc:
            return fail("bench", exc)
        except KeyboardInterrupt:
            print("slipstream bench: interrupted", file=sys.stderr)
            return 130
    if args.command == "validate":
        return run_validate(args.files, pa)
    return run_inspect(args.file, args.validate, pa)


def _channels(text: str) -> int | str | None:
    return {"auto": "auto", "keep": None}[text] if text in ("auto", "keep") else int(text)


def _engine(args: argparse.Namespace) -> tuple[str | None, int | None, str | None]:
    """(engine, workers, ray address) from ``--ray`` / ``--ray-address`` / ``--processes`` / ``--workers``;
    ``ValueError`` for what cannot go together."""
    ray = args.ray or args.ray_address is not None
    if ray and args.processes is not None:
        raise ValueError("--ray-address is for --ray (one Ray task per shard), not --processes")
    if not ray and args.processes is None:
        return None, args.workers, None
    flag = ("--ray" if args.ray else "--ray-address") if ray else "--processes"
    if args.shard_size is None:
        raise ValueError(f"{flag} writes one shard per task: give --shard-size too (such as --shard-size 1G)")
    if args.workers is not None:
        raise ValueError(f"--workers sets encoding threads in this process; with {flag} leave it out (--processes N sets the processes)")
    if ray:
        return "ray", None, args.ray_address or None
    return "processes", args.processes or None, None


def _convert(args: argparse.Namespace, pa: Any) -> int:
    try:
        engine, workers, address = _engine(args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SkippedSamplesWarning)  # each one is printed below
            path, source = convert(
                args.src,
                args.out,
                codec=args.codec,
                quality=args.quality,
                channels=_channels(args.channels),
                max_side=args.max_side,
                min_side=args.min_side,
                policy=args.policy,
                workers=workers,
                progress=False if args.no_progress else None,
                page_size=args.page_size,
                force=args.force,
                shard_size=args.shard_size,
                engine=engine,
                ray_address=address,
                on_error="skip" if args.skip_bad else "raise",
            )
    except (ValueError, TypeError, OSError, ImportError, RuntimeError, pa.ArrowException) as exc:
        return fail("convert", _with_cli_hint(exc))
    fields = ", ".join(f"{name} ({field.kind})" for name, field in source.fields.items())
    size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
    shards = f" in {len([f for f in path.iterdir() if f.suffix == '.arrow'])} shards" if path.is_dir() else ""
    skipped = open_any(path).metadata.get("skipped", []) if args.skip_bad else []
    for entry in skipped:
        print(f"slipstream convert: skipped {describe_skipped(entry)}", file=sys.stderr)
    for caution in source.cautions:
        print(f"slipstream convert: note: {caution}", file=sys.stderr)
    written = f"{len(source) - len(skipped)} samples ({len(skipped)} skipped, listed in the metadata)" if skipped else f"{len(source)} samples"
    print(f"{path}: {written} from the {source.kind} {source.path}; fields {fields}; {human(size)}{shards}")
    return 0


def _with_cli_hint(exc: BaseException) -> BaseException:
    """``exc`` with ss.write's way out (``on_error='skip'``) said as this command's option."""
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = ["fix or remove that file, or pass --skip-bad to write the others and list those that fail" if note == SKIP_HINT else note for note in notes]
    return exc


if __name__ == "__main__":
    sys.exit(main())
