"""``capeval regions``: region features of a folder of images, written to a resumable ``.npz`` (one key per image id,
the file stem)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict

from capeval.commands.arguments import detector_users, family_label, listed, positive_float, positive_int, \
    region_families, set_handler
from capeval.inputs import IMAGE_EXTENSIONS, InputError, images_by_stem
from capeval.models.regions.configuration import ADAPTIVE, SAVE_SECONDS
from capeval.models.regions.detectors import DETECTORS


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``regions`` subcommand to the capeval command's subparsers."""
    metrics = listed([family_label(family) for family in region_families()], last="and")
    parser = subparsers.add_parser(
        "regions", help=f"region features of images for the region-based metrics ({metrics})",
        description="Detect regions in every image of --images and write their features, boxes and image sizes to "
                    "--out, keyed by file stem; progress is saved every 64 images or about every --save-seconds, "
                    "whichever comes first, and rerunning skips the images already written (an interrupted run "
                    f"loses at most that). The features stand in for the images of {metrics} (`capeval score "
                    "--regions`, `capeval benchmark --regions`).")
    detectors = "; ".join(f"{spec.name}: {spec.description} ({listed(detector_users(spec.name), last='and')}; "
                          f"{spec.settings.regions_per_image()} regions per image)" for spec in DETECTORS.values())
    parser.add_argument("--detector", choices=sorted(DETECTORS), default="bottom-up", help=detectors)
    parser.add_argument("--images", type=Path, required=True, help="folder of images")
    parser.add_argument("--out", type=Path, required=True, help="output .npz file")
    defaults = listed([f"{spec.hub_id} for {spec.name}" for spec in DETECTORS.values()], last="and")
    parser.add_argument("--model", help=f"hub id or local folder of the converted detector (default: {defaults})")
    parser.add_argument("--adaptive", action="store_true",
                        help=f"bottom-up only: {ADAPTIVE.regions_per_image()} regions per image (confidence >= "
                             f"{ADAPTIVE.confidence_threshold:g}) instead of "
                             f"{DETECTORS['bottom-up'].settings.regions_per_image()}; such files are not TIGEr's")
    parser.add_argument("--preprocessing", choices=("caffe", "lxmert"), default="caffe",
                        help="caffe: the original feature files' pipeline (default); lxmert (bottom-up only): the "
                             "transformers port's")
    parser.add_argument("--device", help="torch device (default: Accelerate's device: a GPU when available)")
    parser.add_argument("--batch-size", type=positive_int, default=4, help="images of one size per forward pass")
    parser.add_argument("--cache-dir", type=Path, help="on-disk cache of region features keyed by image content")
    parser.add_argument("--save-seconds", type=positive_float, default=SAVE_SECONDS, metavar="SECONDS",
                        help=f"save progress (to <out>.parts) at least about this often, besides every 64 images "
                             f"(default {SAVE_SECONDS:g}; a CPU run takes seconds per image)")
    set_handler(parser, run)
    return parser


def image_files(folder: Path) -> Dict[str, Path]:
    """``{file stem: path}`` of the images in ``folder``; two files with one stem are an error."""
    found = images_by_stem(folder)
    for stem, paths in found.items():
        if len(paths) > 1:
            raise InputError(f"{paths[0].name} and {paths[1].name} share the image id {stem!r}")
    if not found:
        raise InputError(f"no images ({', '.join(sorted(IMAGE_EXTENSIONS))}) in {folder}")
    return {stem: paths[0] for stem, paths in found.items()}


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval regions``."""
    # imported here, so that ``capeval --help`` loads no torch
    from capeval.models.regions.extraction import RegionExtractor, extract_to_file
    from capeval.runtime import resolve_device

    spec = DETECTORS[args.detector]
    if spec.name != "bottom-up" and (args.adaptive or args.preprocessing != "caffe"):
        raise InputError(f"--adaptive and --preprocessing lxmert apply to the bottom-up detector only, "
                         f"not {spec.name}")
    images = image_files(args.images)
    device = resolve_device(args.device)
    if device.type == "cpu":
        seconds = spec.cpu_seconds_per_image
        print(f"capeval regions: running on CPU, roughly {seconds:g} s per image "
              f"(about {len(images) * seconds / 3600:.1f} h for {len(images)} images); "
              "a GPU is much faster", file=sys.stderr)
    base = ADAPTIVE if args.adaptive else spec.settings
    settings = replace(base, preprocessing=args.preprocessing)
    extractor = RegionExtractor(spec.load(args.model, device=device), settings, batch_size=args.batch_size,
                                cache_dir=args.cache_dir)
    detected = extract_to_file(extractor, images, args.out, save_seconds=args.save_seconds)
    if extractor.engine.state.is_main_process:
        print(f"wrote {args.out}: {len(images)} images ({detected} detected now)")
    return 0
