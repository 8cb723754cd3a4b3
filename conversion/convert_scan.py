"""Convert the original SCAN checkpoint that TIGEr uses into a capeval SCAN folder.

    python -m conversion.convert_scan --checkpoint model_best.pth --vocab coco_precomp_vocab.json --out DIR

The command line; the conversion itself (the formats read and written) is :mod:`conversion.scan_converter`, imported
once the arguments are read, so that ``--help`` loads no torch.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List


def main(argv: List[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="original SCAN model_best.pth")
    parser.add_argument("--vocab", type=Path, required=True, help="SCAN vocabulary JSON (coco_precomp_vocab.json)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    from conversion.scan_converter import CheckpointError, convert

    try:
        names = convert(args.checkpoint, args.vocab, args.out)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {len(names)} weights, config.json and vocab.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
