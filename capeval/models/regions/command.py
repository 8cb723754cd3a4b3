"""``capeval regions``: region features of a folder of images, written to a resumable ``.npz`` (one key per image id,
the file stem)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict

from capeval.inputs import InputError

DETECTORS = ("bottom-up",)

CPU_SECONDS_PER_IMAGE = 50
"""Rough CPU cost of the full-size detector per image, measured on 2 shared cores (res5 runs on 300 regions of
14x14, about 1.6 TFLOP per image); shown when no GPU is used."""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``regions`` subcommand to the capeval command's subparsers."""
    parser = subparsers.add_parser(
        "regions", help="region features of images (bottom-up attention detector) for TIGEr",
        description="Detect regions in every image of --images and write their features, boxes and image sizes to "
                    "--out, keyed by file stem; rerunning skips the images already written.")
    parser.add_argument("--detector", choices=DETECTORS, default="bottom-up", help="which detector")
    parser.add_argument("--images", type=Path, required=True, help="folder of images")
    parser.add_argument("--out", type=Path, required=True, help="output .npz file")
    parser.add_argument("--model", help="hub id or local folder of the converted detector (default: capeval's "
                                        "conversion of the detector's original weights)")
    parser.add_argument("--adaptive", action="store_true",
                        help="10 to 100 regions per image (confidence >= 0.2) instead of the fixed top 36")
    parser.add_argument("--preprocessing", choices=("caffe", "lxmert"), default="caffe",
                        help="caffe: the original feature files' pipeline (default); lxmert: the transformers port's")
    parser.add_argument("--device", help="torch device (default: Accelerate's device: a GPU when available)")
    parser.add_argument("--batch-size", type=int, default=4, help="images of one size per forward pass")
    parser.add_argument("--cache-dir", type=Path, help="on-disk cache of region features keyed by image content")
    parser.set_defaults(handler=run)
    return parser


def image_files(folder: Path) -> Dict[str, Path]:
    """``{file stem: path}`` of the images in ``folder``; two files with one stem are an error."""
    from capeval.cli import IMAGE_EXTENSIONS

    if not folder.is_dir():
        raise InputError(f"--images {folder} is not a folder")
    found: Dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            if path.stem in found:
                raise InputError(f"{found[path.stem].name} and {path.name} share the image id {path.stem!r}")
            found[path.stem] = path
    if not found:
        raise InputError(f"no images ({', '.join(sorted(IMAGE_EXTENSIONS))}) in {folder}")
    return found


def run(args: argparse.Namespace) -> int:
    # imported here, so that ``capeval --help`` loads no torch
    from capeval.models.regions.configuration import ADAPTIVE, ExtractionSettings
    from capeval.models.regions.extraction import RegionExtractor, extract_to_file
    from capeval.models.regions.loading import DEFAULT_DETECTOR, load_detector
    from capeval.runtime import resolve_device

    images = image_files(args.images)
    device = resolve_device(args.device)
    if device.type == "cpu":
        print(f"capeval regions: running on CPU, roughly {CPU_SECONDS_PER_IMAGE} s per image "
              f"(about {len(images) * CPU_SECONDS_PER_IMAGE / 3600:.1f} h for {len(images)} images); "
              "a GPU is much faster", file=sys.stderr)
    base = ADAPTIVE if args.adaptive else ExtractionSettings()
    settings = ExtractionSettings(preprocessing=args.preprocessing, selection=base.selection,
                                  min_boxes=base.min_boxes, max_boxes=base.max_boxes)
    extractor = RegionExtractor(load_detector(args.model or DEFAULT_DETECTOR, device=device), settings, batch_size=args.batch_size,
                                cache_dir=args.cache_dir)
    detected = extract_to_file(extractor, images, args.out)
    print(f"wrote {args.out}: {len(images)} images ({detected} detected now)")
    return 0
