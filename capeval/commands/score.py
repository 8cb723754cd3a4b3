"""``capeval score``: any registered metric on a folder of images (or precomputed region features), a folder of videos
(or precomputed frame features), or a JSON lines file of videos and captions.

It reads the reference repositories' JSON files as they are: candidates ``{"<id>": "caption"}`` and references
``{"<id>": ["ref", ...]}`` (a single string is one reference), where an id is the file stem of an image in
``--images`` or of a video or ``.pt`` / ``.npy`` frame feature file in ``--videos``, or a key of the region feature
file ``--regions`` (region-based metrics). A JSON lines file (``--jsonl``) holds one item a line, ``{"video":
"<path>", "candidate": "...", "references": [...]}`` with paths relative to the file's folder, so that one video can
be scored with several candidates. It prints the corpus scores as the reference scripts do and can write the
per-item scores (keyed by id, or in line order), with the result signature, to ``--output``.
"""
from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from capeval.commands.arguments import family_label, listed, option_families, positive_int, region_families, \
    set_handler, video_families
from capeval.inputs import IMAGE_EXTENSIONS, InputError, TextPosition, TruncationWarning, files_by_stem, read_utf8, \
    validate_caption
from capeval.models.regions.detectors import family_detector
from capeval.models.regions.files import read_region_features
from capeval.options import PRECISION_DTYPES
from capeval.outputs import check_output_file
from capeval.registry import FAMILIES, MetricFamily
from capeval.video import FEATURE_SUFFIXES, VIDEO_EXTENSIONS, probe_video_files

if TYPE_CHECKING:
    from capeval.scorers.base import Scorer

JSONL_FIELDS = ("video", "candidate", "references")
"""The fields of a line of a ``--jsonl`` file."""

OPTION_FLAGS: Tuple[Tuple[str, str], ...] = (("num_frames", "--num-frames"), ("idf", "--no-idf"),
                                             ("idf_corpus", "--idf-corpus"))
"""Scorer options of some families (:attr:`capeval.registry.MetricFamily.extra_options`) and their flags."""


@dataclass(frozen=True)
class ScoreInput:
    """What one run scores: the scorer's entries keyword (``images`` or ``videos``) and its values (``None``: the
    references alone), the candidates and references, and each item's id (its image or video id) or, for a JSON lines
    file, its line number and ``video`` as written."""

    entry: str
    values: Optional[List[Any]]
    candidates: List[str]
    references: Optional[List[List[str]]]
    ids: List[str]
    lines: Optional[List[Tuple[int, str]]] = None

    def name(self, index: int) -> str:
        """How messages name item ``index``: ``'image1'``, or ``line 3``."""
        return repr(self.ids[index]) if self.lines is None else f"line {self.lines[index][0]}"


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

    try:
        data = json.loads(read_utf8(path), object_pairs_hook=unique_keys)
    except json.JSONDecodeError as error:
        raise InputError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object {layout}, found {type(data).__name__}")
    if not data:
        raise InputError(f"{path} is empty; it must map ids to captions")
    return data


def read_candidates(path: Path) -> Dict[str, str]:
    """Candidates JSON ``{"<id>": "caption"}``, checked caption by caption."""
    data = _load_json_object(path, '{"<id>": "caption", ...}')
    return {key: validate_caption(caption, f"candidate {key!r} in {path}") for key, caption in data.items()}


def reference_list(refs: Any, where: str) -> List[str]:
    """One item's references, ``where`` naming the item: a list of strings, or one string (one reference, as
    CLIPScore's script reads it)."""
    refs = [refs] if isinstance(refs, str) else refs
    if not isinstance(refs, list):
        raise InputError(f"references of {where} must be a list of strings, found {type(refs).__name__}")
    if not refs:
        raise InputError(f"references of {where} are empty; give at least one reference")
    return [validate_caption(ref, f"reference {index} of {where}") for index, ref in enumerate(refs)]


def read_references(path: Path) -> Dict[str, List[str]]:
    """References JSON ``{"<id>": ["ref", ...]}``; a string value is one reference, as in CLIPScore's script.

    Warns when every value is a single string: that is the layout of a candidates file.
    """
    data = _load_json_object(path, '{"<id>": ["reference", ...], ...}')
    if all(isinstance(refs, str) for refs in data.values()):
        warnings.warn(f"every value of the references file {path} is a single string ({len(data)} keys), each read "
                      "as one reference; is it a candidates file?", stacklevel=2)
    return {key: reference_list(refs, f"{key!r} in {path}") for key, refs in data.items()}


def check_same_keys(candidates: Dict[str, Any], candidates_path: Path,
                    references: Dict[str, Any], references_path: Path) -> None:
    """Every id must be in both files."""
    for keys, present, absent in (
        ([key for key in candidates if key not in references], candidates_path, references_path),
        ([key for key in references if key not in candidates], references_path, candidates_path),
    ):
        if keys:
            raise InputError(f"{_name_keys(keys)} in {present} but not in {absent}")


def files_of_keys(folder: Path, keys: Sequence[str], kind: str, extensions: AbstractSet[str]) -> Dict[str, Path]:
    """The file of each key: ``<folder>/<key>.<ext>`` for one extension in ``extensions``; ``kind`` (``"image"``,
    ``"video"``) names the files in errors."""
    found = files_by_stem(folder, extensions, kind)
    missing = [key for key in keys if key not in found]
    if missing:
        raise InputError(f"no {kind} file for {_name_keys(missing)} in {folder} "
                         f"(looked for <{kind} id> with extension {', '.join(sorted(extensions))})")
    for key in keys:
        if len(found[key]) > 1:
            names = ", ".join(path.name for path in found[key])
            raise InputError(f"several {kind} files for key {key!r} in {folder}: {names}")
    return {key: found[key][0] for key in keys}


def read_jsonl(path: Path) -> ScoreInput:
    """A JSON lines file of ``{"video": "<path>", "candidate": "...", "references": [...]}`` (references optional,
    on every line or on none; blank lines skipped); video paths are relative to the file's folder."""
    videos: List[Path] = []
    candidates: List[str] = []
    references: List[Optional[List[str]]] = []
    lines: List[Tuple[int, str]] = []
    for number, line in enumerate(read_utf8(path).split("\n"), 1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        where = f"line {number} of {path}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where} is not valid JSON: {error}") from None
        if not isinstance(record, dict):
            raise InputError(f'{where} must hold a JSON object {{"video": ..., "candidate": ..., "references": '
                             f"[...]}}, found {type(record).__name__}")
        unknown = [field for field in record if field not in JSONL_FIELDS]
        if unknown:
            raise InputError(f"{where} has the unknown field {unknown[0]!r}; the fields are "
                             f"{listed(JSONL_FIELDS, 'and')}")
        video = record.get("video")
        if not isinstance(video, str) or not video.strip():
            raise InputError(f'{where}: "video" must be the path of a video or frame feature file, found {video!r}')
        candidates.append(validate_caption(record.get("candidate"), f"the candidate of {where}"))
        refs = record.get("references")
        references.append(None if refs is None else reference_list(refs, where))
        videos.append(path.parent / video)
        lines.append((number, video))
    if not lines:
        raise InputError(f"{path} holds no line; each line is one JSON object {{\"video\": ..., \"candidate\": ...}}")
    given = [refs is not None for refs in references]
    if any(given) and not all(given):
        raise InputError(f"line {lines[given.index(False)][0]} of {path} has no references while line "
                         f"{lines[given.index(True)][0]} has; give references on every line or on none")
    return ScoreInput("videos", videos, candidates, references if all(given) else None,
                      [str(number) for number, _ in lines], lines)


def _entry_flags(family: MetricFamily) -> List[str]:
    """The flags that give ``family`` what its captions describe."""
    flags = []
    if family.inputs == "images":
        flags.append("--images FOLDER")
        if family.region_features:
            flags.append("--regions FILE (precomputed region features)")
    if "videos" in family.entries:
        flags += ["--videos FOLDER", "--jsonl FILE"]
    return flags


def _keyed_input(args: argparse.Namespace, family: MetricFamily) -> ScoreInput:
    """The items of ``--candidates`` (and ``--references``) with the image, region features or video of each id."""
    sources = [flag for flag, value in (("--images", args.images), ("--regions", args.region_features),
                                        ("--videos", args.videos)) if value is not None]
    if len(sources) > 1:
        raise InputError(f"{listed(sources, 'and')} exclude each other: give one of them")
    if sources == ["--videos"] and "videos" not in family.entries:
        raise InputError(f"{family.label} scores images, not videos; the metrics of videos are "
                         f"{listed([family.name for family in video_families()], 'and')}")
    if sources and sources != ["--videos"] and family.inputs != "images":
        raise InputError(f"{family.label} scores videos: give {listed(_entry_flags(family))}")
    if args.candidates is None:
        raise InputError(f"give --candidates FILE{' or --jsonl FILE' if 'videos' in family.entries else ''}")
    candidates = read_candidates(args.candidates)
    references = read_references(args.references) if args.references is not None else None
    if references is not None:
        check_same_keys(candidates, args.candidates, references, args.references)
    keys = list(candidates)
    texts = [candidates[key] for key in keys]
    refs = [references[key] for key in keys] if references is not None else None
    if not sources:
        if family.inputs != "videos":
            raise InputError(f"give {listed(_entry_flags(family))}")
        if references is None:
            raise InputError(f"{family.label} needs --videos FOLDER, --references FILE or both (or --jsonl FILE)")
        return ScoreInput("videos", None, texts, refs, keys)
    entries: Mapping[str, Any]
    if args.videos is not None:
        entries = files_of_keys(args.videos, keys, "video", VIDEO_EXTENSIONS | FEATURE_SUFFIXES)
    elif args.images is not None:
        entries = files_of_keys(args.images, keys, "image", IMAGE_EXTENSIONS)
    else:
        entries = read_region_features(args.region_features)
        missing = [key for key in keys if key not in entries]
        if missing:
            raise InputError(f"{args.region_features} has no region features for {_name_keys(missing)} of "
                             f"{args.candidates}")
    return ScoreInput("images" if args.videos is None else "videos", [entries[key] for key in keys], texts, refs, keys)


def _jsonl_input(args: argparse.Namespace, family: MetricFamily) -> ScoreInput:
    """The items of the ``--jsonl`` file, which then holds every input."""
    if "videos" not in family.entries:
        raise InputError(f"--jsonl holds videos, and {family.label} scores images; the metrics of videos are "
                         f"{listed([family.name for family in video_families()], 'and')}")
    others = [flag for flag, value in (("--candidates", args.candidates), ("--references", args.references),
                                       ("--images", args.images), ("--regions", args.region_features),
                                       ("--videos", args.videos)) if value is not None]
    if others:
        raise InputError(f"--jsonl FILE holds the videos, candidates and references: give it without {listed(others)}")
    return read_jsonl(args.jsonl)


def read_sentences(path: Path) -> List[str]:
    """A text file of one sentence a line (blank lines skipped), as ``--idf-corpus`` takes it."""
    sentences = [line.rstrip("\r") for line in read_utf8(path).split("\n") if line.strip()]
    if not sentences:
        raise InputError(f"{path} holds no sentence; give one sentence a line")
    return sentences


def _family_options(family: MetricFamily, args: argparse.Namespace) -> Dict[str, Any]:
    """The family's own scorer options given by flags (:data:`OPTION_FLAGS`, and ``--detector`` as ``regions`` for
    the region-based families), checked before any input is read; a flag of another family's option is refused,
    naming the families that take it."""
    given = {"num_frames": args.num_frames, "idf": False if args.no_idf else None, "idf_corpus": args.idf_corpus}
    for option, flag in OPTION_FLAGS:
        if given[option] is not None and option not in family.extra_options:
            hint = ""
            if family.also_videos:
                hint = (f"; video {family.label} with other settings is --metric {_owners(option)} --model "
                        f"{family.default_model}")
            raise InputError(f"{flag} is an option of {_owners(option)}, not of {family.name}{hint}")
    if args.no_idf and args.idf_corpus is not None:
        raise InputError("--idf-corpus and --no-idf exclude each other: drop one of them")
    if args.idf_corpus is not None:
        given["idf_corpus"] = read_sentences(args.idf_corpus)
    if args.regions is not None:
        if not family.region_features:
            raise InputError(f"--detector applies to the region-based metrics "
                             f"({listed([family.name for family in region_families()], 'and')}), not {family.name}")
        if args.images is None:
            raise InputError("--detector makes the regions of --images; --regions FILE holds them already")
        given["regions"] = args.regions
    return {name: value for name, value in given.items() if value is not None}


def _scorer(family: MetricFamily, args: argparse.Namespace, family_options: Dict[str, Any]) -> "Scorer":
    """The family's scorer with the options given on the command line (the scorer's defaults for the others)."""
    options = {"model": args.model, "revision": args.revision, "device": args.device,
               "batch_size": args.batch_size, "precision": args.precision, "cache_dir": args.cache_dir}
    return family.scorer_class()(**{name: value for name, value in options.items() if value is not None},
                                 **family_options, progress=True)


def _score_by_key(scorer: "Scorer", items: ScoreInput) -> Dict[str, Any]:
    """The scorer's result on every item, in order; truncation warnings name the texts by id or line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        result = scorer.score(**{items.entry: items.values}, candidates=items.candidates, references=items.references)
    for warning in caught:
        message = warning.message
        if isinstance(message, TruncationWarning):
            message = message.describe(lambda position: _text_name(items, position))
        warnings.warn(str(message), stacklevel=1)
    return result


def _text_name(items: ScoreInput, position: TextPosition) -> str:
    """A text of ``capeval score`` named by its id or line: ``candidate 'image1'``, ``the candidate of line 3``,
    ``reference 2 of line 3``."""
    index, reference = position
    if reference is not None:
        return f"reference {reference} of {items.name(index)}"
    return f"candidate {items.name(index)}" if items.lines is None else f"the candidate of {items.name(index)}"


def run(args: argparse.Namespace) -> int:
    """Handler of ``capeval score``: score every candidate against its image or video (and references), print and
    save the scores."""
    if args.output is not None:
        check_output_file(args.output)
    family = FAMILIES[args.metric]
    family_options = _family_options(family, args)
    items = _jsonl_input(args, family) if args.jsonl is not None else _keyed_input(args, family)
    if items.entry == "videos" and items.values is not None:
        probe_video_files(items.values)  # a corrupt video fails before the model loads
    result = _score_by_key(_scorer(family, args, family_options), items)
    from capeval.runtime import process_state

    if process_state().is_main_process:  # under accelerate launch, one process prints and writes
        _report(family, result, items, args.output)
    return 0


def _report(family: MetricFamily, result: Dict[str, Any], items: ScoreInput, output: Optional[Path]) -> None:
    """Print the corpus scores as the reference code prints them, and the signature; write the corpus and per-item
    scores (keyed by id, or a list in line order with each line's number and video) to ``output`` when given."""
    names = [name for name in family.result_keys if name in result]
    for name in names:
        print(f"{family.result_keys[name]}: {result[name]:.4f}")
    print(f"Signature: {result['signature']}")
    if output is None:
        return
    rows = [{name: result[f"{name}s"][index] for name in names} for index in range(len(items.ids))]
    report = {
        "metric": family.name,
        "signature": result["signature"],
        **{name: result[name] for name in names},
        "scores": dict(zip(items.ids, rows)) if items.lines is None else
        [{"line": number, "video": video, **row} for (number, video), row in zip(items.lines, rows)],
    }
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _owners(option: str) -> str:
    """The names of the families that take ``option``, for help texts: ``emscore``."""
    return listed([family.name for family in option_families(option)])


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> argparse.ArgumentParser:
    """Add the ``score`` subcommand to the capeval command's subparsers."""
    videos = listed([family.name for family in video_families()], "and")
    parser = subparsers.add_parser(
        "score",
        help=f"{listed(family_label(family) for family in FAMILIES.values())} of captions for a folder of images "
             "or region features, or of videos",
        description="Score candidate captions against their images or videos (and references). Takes the JSON "
                    "formats of the CLIPScore and PAC-S reference repositories: ids are image (or video) file "
                    f"stems. Metrics of videos ({videos}) also read a JSON lines file of videos and captions.",
    )
    parser.add_argument("--metric", required=True, choices=sorted(FAMILIES), help="which metric")
    parser.add_argument("--images", type=Path, help="folder holding <image id>.<jpg|png|...>")
    parser.add_argument("--regions", type=Path, dest="region_features", metavar="FILE",
                        help="instead of --images, for region-based metrics "
                             f"({', '.join(family.name for family in region_families())}): precomputed region "
                             "features keyed by image id, a .npz (as `capeval regions` writes) or a "
                             "bottom-up-attention .tsv file")
    parser.add_argument("--videos", type=Path, metavar="FOLDER",
                        help=f"for metrics of videos ({videos}): folder holding <video id>.<mp4|webm|mkv|avi|mov|...> "
                             "video files (decoded with PyAV: pip install \"capeval[video]\") or <video id>.<pt|npy> "
                             "precomputed (frames, dim) frame features")
    parser.add_argument("--candidates", type=Path, metavar="FILE", help='JSON {"<id>": "caption", ...}')
    parser.add_argument("--references", type=Path, metavar="FILE",
                        help='JSON {"<id>": ["reference", ...], ...}; adds the reference-based scores')
    parser.add_argument("--jsonl", type=Path, metavar="FILE",
                        help=f"instead of --candidates, --references and --videos, for metrics of videos ({videos}): "
                             "JSON lines "
                             '{"video": "<path>", "candidate": "...", "references": ["...", ...]} (references '
                             "optional), video paths relative to the file's folder")
    parser.add_argument("--model", help="hub id or local folder of a converted model (default: the metric's own)")
    detectors = listed([f"{family_detector(family).hub_id} for {family.name}" for family in region_families()], "and")
    parser.add_argument("--detector", dest="regions",
                        help="with --images, for region-based metrics: hub id or local folder of the converted region "
                             "detector that finds the images' regions, as `capeval regions --model` takes it "
                             f"(default: {detectors})")
    parser.add_argument("--revision", help="hub revision of the model (default: capeval's pinned revision)")
    parser.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: Accelerate's device)")
    parser.add_argument("--batch-size", type=positive_int, help="images or video frames per forward pass (default 64)")
    parser.add_argument("--precision", choices=["auto", *PRECISION_DTYPES],
                        help="model and score arithmetic (default auto: the reference code's own on that device)")
    parser.add_argument("--cache-dir", type=Path, help="folder of the on-disk embedding cache (default: none)")
    parser.add_argument("--num-frames", type=positive_int, metavar="N",
                        help=f"{_owners('num_frames')}: frames sampled from each video, uniformly as VATEX-EVAL "
                             "samples them (default: every frame)")
    parser.add_argument("--no-idf", action="store_true",
                        help=f"{_owners('idf')}: weigh every token 1 instead of by IDF")
    parser.add_argument("--idf-corpus", type=Path, metavar="FILE",
                        help=f"{_owners('idf_corpus')}: text file of sentences, one a line, to compute the IDF weights "
                             "from (default: the references, else the candidates)")
    parser.add_argument("--output", type=Path, help="write per-item scores keyed by id (or in line order for "
                                                    "--jsonl) to this JSON file")
    set_handler(parser, run)
    return parser
