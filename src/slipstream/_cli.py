"""The ``slipstream`` command line: ``slipstream demo``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slipstream", description="slipstream: data loading at hardware speed")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="load a generated dataset with slipstream and torch; print throughputs")
    demo.add_argument("--samples", type=int, default=20_000, help="dataset size (default 20000)")
    demo.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run

        run(n=args.samples, batch_size=args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
