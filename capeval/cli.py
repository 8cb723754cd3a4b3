"""The ``capeval`` command: ``capeval score`` (any registered metric on a folder of images), ``capeval benchmark`` and
``capeval train bridge``.

``capeval score`` reads the reference repositories' JSON files as they are: candidates ``{"<image id>": "caption"}``
and references ``{"<image id>": ["ref", ...]}`` (a single string is one reference), where an image id is the file
stem of an image in ``--images``, or a key of the region feature file ``--regions`` (region-based metrics). It
prints the corpus scores as the reference scripts do and can write per-item scores keyed by image id, with the
result signature, to ``--output``.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from capeval.benchmarks import command as benchmark_command
from capeval.benchmarks.baselines import BaselineUnavailableError
from capeval.benchmarks.datasets import BenchmarkFormatError
from capeval.inputs import InputError, TextPosition, TruncationWarning, validate_caption
from capeval.models.bridge import train_command as bridge_command
from capeval.models.regions import command as regions_command
from capeval.models.regions.files import read_region_features
from capeval.options import PRECISION_DTYPES
from capeval.outputs import check_output_file
from capeval.registry import FAMILIES
from capeval.version import __version__

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
"""File extensions (any case) searched for in the image folder."""


def _name_keys(keys: Sequence[str], shown: int = 5) -> str:
    """``key 'a'`` or ``keys 'a', 'b' (and 3 more)``."""
    listed = ", ".join(repr(key) for key in keys[:shown])
    more = f" (and {len(keys) - shown} more)" if len(keys) > shown else ""
    return f"key {listed}" if len(keys) == 1 else f"keys {listed}{more}"


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


def find_images(folder: Path, keys: Sequence[str]) -> Dict[str, Path]:
    """The image file of each key: ``<folder>/<key>.<ext>`` for one extension in ``IMAGE_EXTENSIONS``."""
    if not folder.is_dir():
        raise InputError(f"image folder not found: {folder}")
    by_stem: Dict[str, List[Path]] = {}
    for path in folder.iterdir():
        if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file():
            by_stem.setdefault(path.stem, []).append(path)
    missing = [key for key in keys if key not in by_stem]
    if missing:
        raise InputError(f"no image file for {_name_keys(missing)} in {folder} "
                         f"(looked for <image id> with extension {', '.join(sorted(IMAGE_EXTENSIONS))})")
    for key in keys:
        if len(by_stem[key]) > 1:
            names = ", ".join(sorted(path.name for path in by_stem[key]))
            raise InputError(f"several image files for key {key!r} in {folder}: {names}")
    return {key: by_stem[key][0] for key in keys}


def run_score(args: argparse.Namespace) -> int:
    """``capeval score``: score every candidate against its image (and references), print and save the scores."""
    if args.output is not None:
        check_output_file(args.output)
    candidates = read_candidates(args.candidates)
    references = read_references(args.references) if args.references is not None else None
    if references is not None:
        check_same_keys(candidates, args.candidates, references, args.references)
    keys = list(candidates)
    if (args.images is None) == (args.regions is None):
        raise InputError("give either --images FOLDER or --regions FILE (precomputed region features)")
    if args.regions is not None:
        regions = read_region_features(args.regions)
        missing = [key for key in keys if key not in regions]
        if missing:
            raise InputError(f"{args.regions} has no region features for {_name_keys(missing)} of {args.candidates}")
        images: Dict[str, Any] = regions
    else:
        images = find_images(args.images, keys)

    options = {"model": args.model, "revision": args.revision, "device": args.device,
               "batch_size": args.batch_size, "precision": args.precision, "cache_dir": args.cache_dir}
    family = FAMILIES[args.metric]
    scorer = family.scorer_class()(**{name: value for name, value in options.items() if value is not None},
                                   progress=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        result = scorer.score([images[key] for key in keys], [candidates[key] for key in keys],
                              [references[key] for key in keys] if references is not None else None)
    for warning in caught:
        message = warning.message
        if isinstance(message, TruncationWarning):
            message = message.describe(lambda position: _text_name(keys, position))
        warnings.warn(str(message), stacklevel=1)

    names = [name for name in family.result_keys if name in result]
    for name in names:
        print(f"{family.result_keys[name]}: {result[name]:.4f}")
    print(f"Signature: {result['signature']}")
    if args.output is not None:
        report = {
            "metric": args.metric,
            "signature": result["signature"],
            **{name: result[name] for name in names},
            "scores": {key: {name: result[f"{name}s"][index] for name in names} for index, key in enumerate(keys)},
        }
        args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def _text_name(keys: Sequence[str], position: TextPosition) -> str:
    """A text of ``capeval score`` named by its image id: ``candidate 'image1'``, ``reference 2 of 'image1'``."""
    index, reference = position
    return f"candidate {keys[index]!r}" if reference is None else f"reference {reference} of {keys[index]!r}"


def _add_score_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "score",
        help="CLIP-S / RefCLIP-S, PAC-S / RefPAC-S or TIGEr of captions for a folder of images or region features",
        description="Score candidate captions against their images (and references). Takes the JSON formats of the "
                    "CLIPScore and PAC-S reference repositories: image ids are image file stems.",
    )
    parser.add_argument("--metric", required=True, choices=sorted(FAMILIES), help="which metric")
    parser.add_argument("--images", type=Path, help="folder holding <image id>.<jpg|png|...>")
    parser.add_argument("--regions", type=Path,
                        help="instead of --images, for region-based metrics (tigerscore, vilbertscore): precomputed "
                             "region features keyed by image id, a .npz (as `capeval regions` writes) or a "
                             "bottom-up-attention .tsv file")
    parser.add_argument("--candidates", required=True, type=Path, help='JSON {"<image id>": "caption", ...}')
    parser.add_argument("--references", type=Path,
                        help='JSON {"<image id>": ["reference", ...], ...}; adds the reference-based score')
    parser.add_argument("--model", help="hub id or local folder of a converted model (default: the metric's own)")
    parser.add_argument("--revision", help="hub revision of the model (default: capeval's pinned revision)")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: Accelerate's device)")
    parser.add_argument("--batch-size", type=benchmark_command.positive_int, help="images per forward pass (default 64)")
    parser.add_argument("--precision", choices=["auto", *PRECISION_DTYPES],
                        help="model and score arithmetic (default auto: the reference code's own on that device)")
    parser.add_argument("--cache-dir", type=Path, help="folder of the on-disk embedding cache (default: none)")
    parser.add_argument("--output", type=Path, help="write per-item scores keyed by image id to this JSON file")
    parser.set_defaults(handler=run_score)


def build_parser() -> argparse.ArgumentParser:
    """The ``capeval`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(prog="capeval", description="Faithful image-caption evaluation metrics.")
    parser.add_argument("--version", action="version", version=f"capeval {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="also show the progress bars of transformers and huggingface_hub (model loading)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_score_parser(subparsers)
    benchmark_command.register(subparsers)
    regions_command.register(subparsers)
    train = subparsers.add_parser("train", help="train a learned metric (bridge)",
                                  description="Train the learned parts of a metric.")
    bridge_command.register(train.add_subparsers(dest="model", required=True, metavar="MODEL"))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; bad input or a missing file prints one line to stderr and returns 2.

    Warnings print as one line each (``capeval score: warning: ...``), without source locations.
    """
    args = build_parser().parse_args(argv)
    prefix = f"capeval {args.command}"

    def show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"{prefix}: warning: {' '.join(str(message).split())}", file=sys.stderr)

    group_before = _process_group_initialized()
    try:
        with warnings.catch_warnings(), _third_party_bars(shown=args.verbose):
            warnings.showwarning = show_warning
            return args.handler(args)
    except (InputError, BenchmarkFormatError, BaselineUnavailableError, OSError) as error:
        message = " ".join(str(error).split())
        print(f"{prefix}: error: {benchmark_command.in_flags(message)}", file=sys.stderr)
        return 2
    finally:
        if not group_before and _process_group_initialized():
            _leave_process_group()


def _process_group_initialized() -> bool:
    """Whether this process is in a torch.distributed process group (without importing torch)."""
    distributed = sys.modules.get("torch.distributed")
    return distributed is not None and distributed.is_available() and distributed.is_initialized()


def _leave_process_group() -> None:
    """Destroy the process group that the command joined (under ``accelerate launch``), so that every process exits
    cleanly: a gloo group left to the interpreter's exit can abort it. A failure here is only warned about."""
    import torch.distributed

    try:
        torch.distributed.destroy_process_group()
    except Exception as error:  # the command's own result or error matters more
        print(f"capeval: warning: could not leave the process group ({error})", file=sys.stderr)


@contextmanager
def _third_party_bars(shown: bool) -> Iterator[None]:
    """Hide huggingface_hub's and transformers' progress bars (downloads, "Loading weights") unless ``shown``;
    their previous setting is restored afterwards."""
    if shown:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    hub_was_enabled = not are_progress_bars_disabled()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    transformers_was_enabled = (transformers_logging.is_progress_bar_enabled() if transformers_logging is not None
                                else hub_was_enabled)  # transformers reads the hub's setting when first imported
    disable_progress_bars()
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if hub_was_enabled:
            enable_progress_bars()
        transformers_logging = sys.modules.get("transformers.utils.logging")
        if transformers_logging is not None and transformers_was_enabled:
            transformers_logging.enable_progress_bar()


if __name__ == "__main__":
    sys.exit(main())
