"""Convert a published region detector into capeval's detector folder (``model.safetensors`` + ``config.json``).

    python -m conversion.convert_regions [--detector x152-fpn] --checkpoint FILE --config YAML --out DIR

The command line and the detectors it converts; the conversion itself (the keys renamed and dropped, the yaml read)
is :mod:`conversion.regions_converter`, imported once the arguments are read, so that ``--help`` loads no torch.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

BOTTOM_UP = "bottom-up"
"""The bottom-up attention detector of ``unc-nlp/frcnn-vg-finetuned`` (``pytorch_model.bin`` + ``config.yaml``)."""
X152_FPN = "x152-fpn"
"""vilbert-multi-task's ResNeXt-152 FPN detector (``detectron_model.pth`` + ``detectron_config.yaml``)."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--detector", choices=(BOTTOM_UP, X152_FPN), default=BOTTOM_UP,
                        help="bottom-up: unc-nlp/frcnn-vg-finetuned; x152-fpn: vilbert-multi-task's detector")
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="pytorch_model.bin (bottom-up) or detectron_model.pth (x152-fpn)")
    parser.add_argument("--config", type=Path, required=True, help="its config.yaml / detectron_config.yaml")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    from conversion.regions_converter import convert_checkpoint

    dropped = convert_checkpoint(args.checkpoint, args.config, args.out, args.detector)
    print(f"wrote {args.out}; dropped {len(dropped)} checkpoint keys:")
    for pattern in sorted({re.sub(r"\.\d+\.", ".N.", re.sub(r"\.\d+$", ".N", key)) for key in dropped}):
        print(f"  {pattern}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
