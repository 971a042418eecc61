"""Print RandAugment's and TrivialAugmentWide's magnitude tables (num_magnitude_bins=31) exactly as torchvision
0.29.1 computes them (float32 torch.linspace, then float(); translate and posterize as the ops then use them: int()).
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_tables.py [H W]   (default 224 224)
"""

import sys
import warnings

from torchvision.transforms import v2

warnings.filterwarnings("ignore")


def dump(cls, h: int, w: int, bins: int = 31) -> None:
    print(f"== {cls.__name__}: {len(cls._AUGMENTATION_SPACE)} ops, index = torch.randint({len(cls._AUGMENTATION_SPACE)}, ()) in this order, H={h} W={w}")
    for i, (name, (fn, signed)) in enumerate(cls._AUGMENTATION_SPACE.items()):
        mags = fn(bins, h, w)
        if mags is None:
            print(f"  [{i:2d}] {name:<12} no magnitude (no magnitude draw, no sign draw)")
            continue
        vals = [float(m) for m in mags]
        if name.startswith("Translate") or name == "Posterize":
            used = [int(v) for v in vals]
            shown = ", ".join(str(u) for u in used) + "   (int() of " + ", ".join(repr(v) for v in vals) + ")"
        else:
            shown = ", ".join(repr(v) for v in vals)
        print(f"  [{i:2d}] {name:<12} signed={signed!s:<5} [{shown}]")


def main() -> None:
    h, w = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (224, 224)
    dump(v2.RandAugment, h, w)
    ra = v2.RandAugment()
    print(f"  RandAugment(num_ops={ra.num_ops}, magnitude={ra.magnitude}) uses column {ra.magnitude} of each row:")
    for name, (fn, signed) in v2.RandAugment._AUGMENTATION_SPACE.items():
        mags = fn(31, h, w)
        if mags is not None:
            print(f"     {name:<12} {float(mags[ra.magnitude])!r}{' (+/-)' if signed else ''}")
    dump(v2.TrivialAugmentWide, h, w)


if __name__ == "__main__":
    main()
