"""``capeval score``: any registered metric on a folder of images (or precomputed region features).

It reads the reference repositories' JSON files as they are: candidates ``{"<image id>": "caption"}`` and references
``{"<image id>": ["ref", ...]}`` (a single string is one reference), where an image id is the file stem of an image
in ``--images``, or a key of the region feature file ``--regions`` (region-based metrics). It prints the corpus
scores as the reference scripts do and can write per-item scores keyed by image id, with the result signature, to
``--output``.
"""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from capeval.commands.arguments import family_label, listed, positive_int, region_families
from capeval.inputs import IMAGE_EXTENSIONS, InputError, TextPosition, TruncationWarning, images_by_stem, \
    validate_caption
from capeval.models.regions.detectors import family_detector
from capeval.models.regions.files import read_region_features
from capeval.options import PRECISION_DTYPES
from capeval.outputs import check_output_file
from capeval.registry import FAMILIES, MetricFamily

if TYPE_CHECKING:
    from capeval.scorers.base import Scorer


def _name_keys(keys: Sequence[str], shown: int = 5) -> str:
    """``key 'a'`` or ``keys 'a', 'b' (and 3 more)``."""
    listed_keys = ", ".join(repr(key) for key in keys[:shown])
    more = f" (and {len(keys) - shown} more)" if len(keys) > shown else ""
    return f"key {listed_keys}" if len(keys) == 1 else f"keys {listed_keys}{more}"


def _load_json_object(path: Path, layout: str) -> Dict[str, Any]:
    """A JSON file holding an object; ``layout`` describes the expected content in errors."""
    def unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        seen: Dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise InputError(f"{path}: key {key!r} appears more than once (JSON keeps only the last value)")
            seen[key] = value
        return seen

    with path.open(encoding="utf-8") as handle:
        try:
            data = json.load(handle, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as error:
            raise InputError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object {layout}, found {type(data).__name__}")
    if not data:
        raise InputError(f"{path} is empty; it must map image ids to captions")
    return data


def read_candidates(path: Path) -> Dict[str, str]:
    """Candidates JSON ``{"<image id>": "caption"}``, checked caption by caption."""
    data = _load_json_object(path, '{"<image id>": "caption", ...}')
    return {key: validate_caption(caption, f"candidate {key!r} in {path}") for key, caption in data.items()}


def read_references(path: Path) -> Dict[str, List[str]]:
    """References JSON ``{"<image id>": ["ref", ...]}``; a string value is one reference, as in CLIPScore's script.

    Warns when every value is a single string: that is the layout of a candidates file.
    """
    data = _load_json_object(path, '{"<image id>": ["reference", ...], ...}')
    if all(isinstance(refs, str) for refs in data.values()):
        warnings.warn(f"every value of the references file {path} is a single string ({len(data)} keys), each read "
                      "as one reference; is it a candidates file?", stacklevel=2)
    references: Dict[str, List[str]] = {}
    for key, refs in data.items():
        refs = [refs] if isinstance(refs, str) else refs
        if not isinstance(refs, list):
            raise InputError(f"references of {key!r} in {path} must be a list of strings, found {type(refs).__name__}")
        if not refs:
            raise InputError(f"references of {key!r} in {path} are empty; give at least one reference")
        references[key] = [validate_caption(ref, f"reference {index} of {key!r} in {path}")
                           for index, ref in enumerate(refs)]
    return references


def check_same_keys(candidates: Dict[str, Any], candidates_path: Path,
                    references: Dict[str, Any], references_path: Path) -> None:
    """Every image id must be in both files."""
    for keys, present, absent in (
        ([key for key in candidates if key not in references], candidates_path, references_path),
        ([key for key in references if key not in candidates], references_path, candidates_path),
    ):
        if keys:
            raise InputError(f"{_name_keys(keys)} in {present} but not in {absent}")


def images_of_keys(folder: Path, keys: Sequence[str]) -> Dict[str, Path]:
    """The image file of each key: ``<folder>/<key>.<ext>`` for one extension in ``IMAGE_EXTENSIONS``."""
    found = images_by_stem(folder)
    missing = [key for key in keys if key not in found]
    if missing:
        raise InputError(f"no image file for {_name_keys(missing)} in {folder} "
                         f"(looked for <image id> with extension {', '.join(sorted(IMAGE_EXTENSIONS))})")
    for key in keys:
        if len(found[key]) > 1:
            names = ", ".join(path.name for path in found[key])
            raise InputError(f"several image files for key {key!r} in {folder}: {names}")
    return {key: found[key][0] for key in keys}


def _images(args: argparse.Namespace, keys: Sequence[str]) -> Dict[str, Any]:
    """The image (a file path, or region features read from ``--regions``) of each key."""
    if (args.images is None) == (args.regions is None):
        raise InputError("give either --images FOLDER or --regions FILE (precomputed region features)")
    if args.detector is not None and args.images is None:
        raise InputError("--detector makes the regions of --images; --regions FILE holds them already")
    if args.images is not None:
        return images_of_keys(args.images, keys)
    regions = read_region_features(args.regions)
    missing = [key for key in keys if key not in regions]
    if missing:
        raise InputError(f"{args.regions} has no region features for {_name_keys(missing)} of {args.candidates}")
    return regions


def _scorer(family: MetricFamily, args: argparse.Namespace) -> "Scorer":
    """The family's scorer with the options given on the command line (the scorer's defaults for the others)."""
    options = {"model": args.model, "revision": args.revision, "device": args.device,
               "batch_size": args.batch_size, "precision": args.precision, "cache_dir": args.cache_dir}
    if args.detector is not None:
        if not family.region_features:
            raise InputError(f"--detector applies to the region-based metrics "
                             f"({listed([family.name for family in region_families()], 'and')}), not {family.name}")
        options["regions"] = args.detector
    return family.scorer_class()(**{name: value for name, value in options.items() if value is not None},
                                 progress=True)


def _score_by_key(scorer: "Scorer", keys: Sequence[str], images: Dict[str, Any], candidates: Dict[str, str],
                  references: Optional[Dict[str, List[str]]]) -> Dict[str, Any]:
    """The scorer's result on every key, in order; truncation warnings name the texts by image id."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        result = scorer.score([images[key] for key in keys], [candidates[key] for key in keys],
                              [references[key] for key in keys] if references is not None else None)
    for warning in caught:
        message = warning.message
        if isinstance(message, TruncationWarning):
            message = message.describe(lambda position: _text_name(keys, position))
        warnings.warn(str(message), stacklevel=1)
    return result


def _text_name(keys: Sequence[str], position: TextPosition) -> str:
    """A text of ``capeval score`` named by its image id: ``candidate 'image1'``, ``reference 2 of 'image1'``."""
    index, reference = position
    return f"candidate {keys[index]!r}" if reference is None else f"reference {reference} of {keys[index]!r}"


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval score``: score every candidate against its image (and references), print and save the
    scores."""
    if args.output is not None:
        check_output_file(args.output)
    candidates = read_candidates(args.candidates)
    references = read_references(args.references) if args.references is not None else None
    if references is not None:
        check_same_keys(candidates, args.candidates, references, args.references)
    keys = list(candidates)
    images = _images(args, keys)
    family = FAMILIES[args.metric]
    result = _score_by_key(_scorer(family, args), keys, images, candidates, references)
    _report(family, result, keys, args.output)
    return 0


def _report(family: MetricFamily, result: Dict[str, Any], keys: Sequence[str], output: Optional[Path]) -> None:
    """Print the corpus scores as the reference code prints them, and the signature; write the corpus and per-item
    scores keyed by image id to ``output`` when given."""
    names = [name for name in family.result_keys if name in result]
    for name in names:
        print(f"{family.result_keys[name]}: {result[name]:.4f}")
    print(f"Signature: {result['signature']}")
    if output is not None:
        report = {
            "metric": family.name,
            "signature": result["signature"],
            **{name: result[name] for name in names},
            "scores": {key: {name: result[f"{name}s"][index] for name in names} for index, key in enumerate(keys)},
        }
        output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    """Add the ``score`` subcommand to the capeval command's subparsers."""
    parser = subparsers.add_parser(
        "score",
        help=f"{listed(family_label(family) for family in FAMILIES.values())} of captions for a folder of images "
             "or region features",
        description="Score candidate captions against their images (and references). Takes the JSON formats of the "
                    "CLIPScore and PAC-S reference repositories: image ids are image file stems.",
    )
    parser.add_argument("--metric", required=True, choices=sorted(FAMILIES), help="which metric")
    parser.add_argument("--images", type=Path, help="folder holding <image id>.<jpg|png|...>")
    parser.add_argument("--regions", type=Path,
                        help="instead of --images, for region-based metrics "
                             f"({', '.join(family.name for family in region_families())}): precomputed region "
                             "features keyed by image id, a .npz (as `capeval regions` writes) or a "
                             "bottom-up-attention .tsv file")
    parser.add_argument("--candidates", required=True, type=Path, help='JSON {"<image id>": "caption", ...}')
    parser.add_argument("--references", type=Path,
                        help='JSON {"<image id>": ["reference", ...], ...}; adds the reference-based score')
    parser.add_argument("--model", help="hub id or local folder of a converted model (default: the metric's own)")
    detectors = listed([f"{family_detector(family).hub_id} for {family.name}" for family in region_families()], "and")
    parser.add_argument("--detector", help="with --images, for region-based metrics: hub id or local folder of the "
                                           "converted region detector that finds the images' regions, as "
                                           f"`capeval regions --model` takes it (default: {detectors})")
    parser.add_argument("--revision", help="hub revision of the model (default: capeval's pinned revision)")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: Accelerate's device)")
    parser.add_argument("--batch-size", type=positive_int, help="images per forward pass (default 64)")
    parser.add_argument("--precision", choices=["auto", *PRECISION_DTYPES],
                        help="model and score arithmetic (default auto: the reference code's own on that device)")
    parser.add_argument("--cache-dir", type=Path, help="folder of the on-disk embedding cache (default: none)")
    parser.add_argument("--output", type=Path, help="write per-item scores keyed by image id to this JSON file")
    parser.set_defaults(handler=run)
    return parser
