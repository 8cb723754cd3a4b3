"""Publish capeval's converted models and metric Spaces to the Hugging Face hub.

A model repo combines a card folder under ``hub_models/<namespace>/<name>`` (README.md and the configs, tokenizer
and processor files, in subfolders where the model has them: Polos's ``clip/`` and ``encoder/``) with the weights of
a folder written by the model's conversion (``conversion/convert_<model>.py``, the converter its
:class:`capeval.originals.ModelSource` names; ``capeval train bridge`` for BRIDGE), for every model of
:data:`capeval.registry.MODELS` that capeval publishes. A Space repo uploads a metric folder (``metrics/clipscore``,
...) as it is.

    python -m conversion.publish --dry-run \\
        --model hub_models/capeval/pacs-clip-vit-b-32 out/pacs-clip-vit-b-32 checkpoints/clip_ViT-B-32.pth \\
        --model hub_models/capeval/tiger-scan-coco out/tiger-scan-coco model_best.pth coco_precomp_vocab.json \\
        --space metrics/clipscore --space metrics/pacscore --tag v1.0

After the two folders, ``--model`` takes the model's original files in the order of its card's list (its
``ModelSource``); trailing files for which the converter has a default (OpenAI's BPE merges) may be left out.
Before planning a model it checks, in the card folder and the converted folder, subfolders included:

* the files besides the weights are the same (JSON parsed, others byte for byte; the weights and the converter's
  ``capeval_checksums.json`` and ``capeval_provenance.json`` are not compared and not uploaded); a few files the card
  folder does not hold are taken from the converted folder (copies of original files: Polos's encoder vocabulary,
  ViLBERT's ``vocab.txt``; a trained BRIDGE's config and run card);
* every weight file still has the size and sha256 its ``capeval_checksums.json`` records (:mod:`capeval.hub`), and
  holds exactly the tensors (names and shapes) that the family's modeling code builds from the configs uploaded;
* given the original files, converting them again with the model's own converter gives exactly these tensors and
  files; the card then records the sha256 of the original checkpoint (the first file).

``--dry-run`` prints the plan (repo id, repo type, files, sizes, sha256) and touches no network (but for a BRIDGE
whose backbone is a hub id: its config is read from the Hugging Face cache, or downloaded). A real publish
refuses a model with original files that were not given: its card must record the checkpoint's sha256.

torch, transformers, safetensors and huggingface_hub are imported by the functions that check weights and upload,
so that ``--help`` and the plans of Spaces load none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from capeval.configuration import CONFIG_NAME
from capeval.hub import CHECKSUMS_NAME, PROVENANCE_NAME, weights_problem
from capeval.originals import SOURCES, OriginalFile
from capeval.transfers import sha256_of
from conversion.published_folders import FolderKind, folder_kind

CARD_FILE = "README.md"
SPACE_SDK = "gradio"
# Written by the transformers version in use: not part of what a config means.
UNCOMPARED_JSON_KEY = "transformers_version"
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
ORIGINAL_SHA256_PATTERN = re.compile(r"(<!--original-sha256-->)(.*?)(<!--/original-sha256-->)", re.DOTALL)


class PublishError(ValueError):
    """A folder cannot be published as asked; the message names the repo and the file."""


@dataclass(frozen=True)
class PlannedFile:
    """One file of a repo commit: taken from ``source`` on disk, or ``content`` generated here."""

    path_in_repo: str
    size: int
    sha256: str
    source: Path | None = None
    content: bytes | None = None

    @property
    def payload(self) -> Path | bytes:
        """What ``CommitOperationAdd`` uploads."""
        return self.content if self.content is not None else self.source


@dataclass(frozen=True)
class RepoPlan:
    """Everything one repo receives: its id, type, files and optional revision tag."""

    repo_id: str
    repo_type: str
    files: tuple[PlannedFile, ...]
    space_sdk: str | None = None
    tag: str | None = None
    original_sha256: str | None = None
    """Of a model: the sha256 of its original checkpoint (the first of its original files), once given."""
    originals: tuple[tuple[str, str], ...] = ()
    """Of a model: the name and sha256 of each original file given."""
    needs_original: bool = True
    """Of a model: whether it has original files (capeval's own trained models have none)."""


def planned_file_from_disk(path_in_repo: str, source: Path) -> PlannedFile:
    """A file uploaded as it is on disk."""
    return PlannedFile(path_in_repo, source.stat().st_size, sha256_of(source), source=source)


def planned_file_from_bytes(path_in_repo: str, content: bytes) -> PlannedFile:
    """A file whose content is generated at publish time."""
    return PlannedFile(path_in_repo, len(content), hashlib.sha256(content).hexdigest(), content=content)


def repo_id_of_model_folder(card_dir: Path) -> str:
    """``hub_models/<namespace>/<name>`` -> ``<namespace>/<name>``."""
    return f"{card_dir.parent.name}/{card_dir.name}"


def read_front_matter(card_path: Path) -> dict:
    """The YAML front matter of a README.md; error if it is missing or not a mapping."""
    text = card_path.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    if match is None:
        raise PublishError(f"{card_path}: no YAML front matter (the file must start with '---')")
    metadata = yaml.safe_load(match.group(1))
    if not isinstance(metadata, dict):
        raise PublishError(f"{card_path}: YAML front matter is not a mapping")
    return metadata


def _json_difference(expected: Any, actual: Any, where: str = "", keys: Sequence[str] | None = None) -> list[str]:
    """Dotted key paths at which two parsed JSON values differ (``transformers_version`` is not compared; with
    ``keys``, only those top-level keys are)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        compared = (set(expected) | set(actual)) - {UNCOMPARED_JSON_KEY} if keys is None else set(keys)
        paths = []
        for key in sorted(compared, key=str):
            child = f"{where}.{key}" if where else str(key)
            if key not in expected or key not in actual:
                paths.append(child)
            else:
                paths.extend(_json_difference(expected[key], actual[key], child))
        return paths
    return [] if expected == actual else [where or "<root>"]


def metadata_differences(expected_dir: Path, actual_dir: Path, names: Iterable[str],
                         compared_keys: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """One line per file of ``names`` (paths inside the folders) that is missing from ``actual_dir`` or differs from
    ``expected_dir``'s copy.

    JSON files are compared parsed (those of ``compared_keys`` on the keys it gives them only), other files byte for
    byte.
    """
    differences = []
    for name in names:
        expected_file, actual_file = Path(expected_dir) / name, Path(actual_dir) / name
        if not actual_file.is_file():
            differences.append(f"{actual_file} is missing")
        elif name.endswith(".json"):
            differing = _json_difference(
                json.loads(expected_file.read_text(encoding="utf-8")),
                json.loads(actual_file.read_text(encoding="utf-8")),
                keys=(compared_keys or {}).get(name),
            )
            if differing:
                differences.append(f"{actual_file} differs at {', '.join(differing[:10])}")
        elif expected_file.read_bytes() != actual_file.read_bytes():
            differences.append(f"{actual_file} differs")
    return differences


def folder_files(folder: Path) -> list[str]:
    """The paths (POSIX, relative to ``folder``) of every file under ``folder``, subfolders included, but hidden
    files and caches."""
    return sorted(path.relative_to(folder).as_posix() for path in Path(folder).rglob("*")
                  if path.is_file() and not _is_build_or_hidden(path.relative_to(folder)))


def converted_files(folder: Path, kind: FolderKind) -> list[str]:
    """The files of a converted folder besides its weights and the records of this machine's conversion (the
    weights' checksums, the provenance of a folder built by the fetcher; the hub records each file's sha256 itself)."""
    return [name for name in folder_files(folder)
            if name not in kind.weights and Path(name).name not in (CHECKSUMS_NAME, PROVENANCE_NAME)]


def model_metadata_names(card_dir: Path, weights_dir: Path, kind: FolderKind) -> list[str]:
    """The card folder's files besides README.md; error unless they are the converted folder's besides the weights,
    their checksum records and the files uploaded from the converted folder, which it must hold."""
    converted = [name for name in converted_files(weights_dir, kind) if name not in kind.from_weights_folder]
    carded = [name for name in folder_files(card_dir) if name != CARD_FILE]
    if converted != carded:
        only_converted = sorted(set(converted) - set(carded))
        only_carded = sorted(set(carded) - set(converted))
        raise PublishError(
            f"{card_dir} and the converted folder {weights_dir} hold different files besides the weights (only in "
            f"the converted folder: {only_converted}; only in the card folder: {only_carded}): regenerate the card "
            "folder with hub_models/generate_configs.py, or convert the model again"
        )
    missing = [str(weights_dir / name) for name in kind.from_weights_folder if not (weights_dir / name).is_file()]
    if missing:
        raise PublishError(f"{', '.join(missing)} missing: the {kind.name} files uploaded from the converted folder")
    return carded


def check_same_metadata(card_dir: Path, weights_dir: Path, names: Iterable[str], kind: FolderKind) -> None:
    """Error unless the converted folder's config and tokenizer files equal the card folder's."""
    differences = metadata_differences(card_dir, weights_dir, names, kind.compared_keys)
    if differences:
        raise PublishError(
            "; ".join(differences) + f": these weights were converted for another model than {card_dir} describes"
        )


def check_weights_intact(repo_id: str, weights_dir: Path, kind: FolderKind) -> None:
    """Error unless every weight file exists and has the size and sha256 its folder's checksum record holds."""
    again = ("convert the original checkpoint again" if SOURCES[repo_id].files
             else f"write it again with {kind.script}")
    for name in kind.weights:
        path = weights_dir / name
        if not path.is_file():
            raise PublishError(f"{repo_id}: {path} does not exist; run {kind.script} first")
        damage = weights_problem(path.parent, [path.name])
        if damage is not None:
            raise PublishError(f"{repo_id}: {damage}; {again}")


def _misfit(expected: Mapping[str, tuple[int, ...]], actual: Mapping[str, tuple[int, ...]]) -> str | None:
    """``missing: ...; unexpected: ...; wrong shape: ...`` (five names of each, and how many more), or ``None``."""
    missing = sorted(set(expected) - set(actual))
    unexpected = sorted(set(actual) - set(expected))
    reshaped = sorted(name for name in set(expected) & set(actual) if tuple(expected[name]) != tuple(actual[name]))
    details = []
    for label, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", reshaped)):
        if names:
            more = f" (+{len(names) - 5} more)" if len(names) > 5 else ""
            details.append(f"{label}: {', '.join(names[:5])}{more}")
    return "; ".join(details) or None


def check_weights_match_config(card_dir: Path, weights_dir: Path, names: Sequence[str], kind: FolderKind) -> None:
    """Error unless each weight file holds exactly the tensors (names and shapes) that the family's modeling code
    builds from the configs the repository will hold (the card folder's, and those taken from the converted
    folder)."""
    from safetensors import safe_open

    with tempfile.TemporaryDirectory() as scratch:
        staged = Path(scratch)
        for folder, files in ((card_dir, names), (weights_dir, kind.from_weights_folder)):
            for name in files:
                (staged / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / name, staged / name)
        try:
            expected = kind.shapes(staged)
        except (ValueError, TypeError, KeyError, OSError) as error:  # configuration errors name the field
            raise PublishError(f"the configs of {card_dir} do not describe a {kind.name} model: {error}") from error
    for name in kind.weights:
        weights_path = weights_dir / name
        with safe_open(str(weights_path), framework="pt") as weights:
            actual = {tensor: tuple(weights.get_slice(tensor).get_shape()) for tensor in weights.keys()}
        misfit = _misfit(expected[name], actual)
        if misfit is not None:
            config = (Path(name).parent / CONFIG_NAME).as_posix()
            raise PublishError(f"{weights_path} does not fit {(card_dir if config in names else weights_dir) / config}: "
                               + misfit)


def fill_original_sha256(card_text: str, original_sha256: str, card_path: Path) -> str:
    """The card with its original-checkpoint sha256 marker filled in."""
    if len(ORIGINAL_SHA256_PATTERN.findall(card_text)) != 1:
        raise PublishError(
            f"{card_path}: needs exactly one '<!--original-sha256-->...<!--/original-sha256-->' marker"
        )
    return ORIGINAL_SHA256_PATTERN.sub(
        lambda match: f"{match.group(1)}`{original_sha256}`{match.group(3)}", card_text
    )


def model_kind(repo_id: str) -> FolderKind:
    """The kind of folder of a registry model capeval publishes; error for any other."""
    kind = folder_kind(repo_id)
    if kind is None:
        source = SOURCES.get(repo_id)
        why = ("not a model of capeval.registry.MODELS" if source is None
               else f"published by {source.published_by}, not by capeval")
        raise PublishError(f"{repo_id}: capeval publishes no such model ({why})")
    return kind


def original_files(repo_id: str, originals: Sequence[Path]) -> list[tuple[OriginalFile, Path]]:
    """The given original files paired with the model's :class:`OriginalFile` rows, in the card's order; error for
    too many, a missing file, or a left-out file that the converter needs (it has no default for it)."""
    source = SOURCES[repo_id]
    expected = ", ".join(f"{file.name} ({file.argument})" for file in source.files)
    if not source.files and originals:
        raise PublishError(f"{repo_id} has no original files ({source.no_original}); give none")
    if len(originals) > len(source.files):
        raise PublishError(f"{repo_id}: {len(originals)} original files given; it has {len(source.files)}: {expected}")
    if originals:
        import inspect

        module, function = (source.converter or "").split(":")
        parameters = inspect.signature(getattr(importlib.import_module(module), function)).parameters
        needed = [file for file in source.files[len(originals):]
                  if parameters[file.argument].default is inspect.Parameter.empty]
        if needed:
            raise PublishError(f"{repo_id}: give its original files in this order: {expected} "
                               f"(missing: {', '.join(file.name for file in needed)})")
    pairs = list(zip(source.files, map(Path, originals)))
    for file, path in pairs:
        if not path.is_file():
            raise PublishError(f"{repo_id}: original {'checkpoint' if file is source.files[0] else 'file'} {path} "
                               "does not exist")
    return pairs


def check_original_matches_weights(repo_id: str, originals: Sequence[tuple[OriginalFile, Path]], weights_dir: Path,
                                   kind: FolderKind) -> None:
    """Error unless converting the original files with the model's own converter (its ``ModelSource``'s call, into
    a temporary folder) gives exactly the tensors of every weight file of ``weights_dir`` and its other files."""
    import torch
    from safetensors import safe_open

    source = SOURCES[repo_id]
    label = (f"original checkpoint {originals[0][1]}" if len(originals) == 1
             else f"original files {', '.join(str(path) for _, path in originals)}")
    module, function = (source.converter or "").split(":")
    converter = getattr(importlib.import_module(module), function)
    with tempfile.TemporaryDirectory() as scratch:
        again = Path(scratch) / "converted"
        arguments: dict[str, Any] = {file.argument: path for file, path in originals}
        arguments.update(dict(source.arguments))
        arguments[source.output_argument] = again
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the converters' reports are not part of the plan
                converter(**arguments)
        except Exception as error:  # the converters' own errors name the key or file at fault
            raise PublishError(f"{label}: {error}") from error
        for name in kind.weights:
            weights_path = weights_dir / name
            with safe_open(str(again / name), framework="pt") as converted, \
                    safe_open(str(weights_path), framework="pt") as weights:
                misfit = _misfit({key: () for key in converted.keys()}, {key: () for key in weights.keys()})
                if misfit is not None:
                    raise PublishError(f"{weights_path} was not converted from {label}: {misfit}")
                differing = [key for key in converted.keys() if not torch.equal(
                    converted.get_tensor(key).float(), weights.get_tensor(key).float())]
            if differing:
                raise PublishError(
                    f"{weights_path} was not converted from {label}: {len(differing)} tensors differ, "
                    f"e.g. {', '.join(differing[:5])}"
                )
        names = converted_files(again, kind)
        differences = metadata_differences(again, weights_dir, names)
        extra = sorted(set(converted_files(weights_dir, kind)) - set(names))
        differences += [f"{weights_dir / name} is not written by the conversion" for name in extra]
        if differences:
            raise PublishError("; ".join(differences) + f": {weights_dir} is not what converting {label} gives")


def plan_model(card_dir: Path, weights_dir: Path, originals: Sequence[Path], tag: str | None) -> RepoPlan:
    """Plan the model repo for a card folder, a converted-weights folder and the original files (if given)."""
    card_dir, weights_dir = Path(card_dir), Path(weights_dir)
    repo_id = repo_id_of_model_folder(card_dir)
    kind = model_kind(repo_id)
    card_path = card_dir / CARD_FILE
    if not card_path.is_file():
        raise PublishError(f"{repo_id}: {card_path} does not exist")
    read_front_matter(card_path)
    check_weights_intact(repo_id, weights_dir, kind)
    names = model_metadata_names(card_dir, weights_dir, kind)
    check_same_metadata(card_dir, weights_dir, names, kind)
    check_weights_match_config(card_dir, weights_dir, names, kind)

    card_text = card_path.read_text(encoding="utf-8")
    pairs = original_files(repo_id, originals)
    hashes = tuple((path.name, sha256_of(path)) for _, path in pairs)
    if pairs:
        check_original_matches_weights(repo_id, pairs, weights_dir, kind)
        card_text = fill_original_sha256(card_text, hashes[0][1], card_path)
    files = [planned_file_from_bytes(CARD_FILE, card_text.encode("utf-8"))]
    files += [planned_file_from_disk(name, card_dir / name) for name in names]
    files += [planned_file_from_disk(name, weights_dir / name) for name in (*kind.from_weights_folder, *kind.weights)]
    return RepoPlan(repo_id, "model", tuple(files), tag=tag,
                    original_sha256=hashes[0][1] if hashes else None, originals=hashes,
                    needs_original=bool(SOURCES[repo_id].files))


def plan_space(space_dir: Path, namespace: str, tag: str | None) -> RepoPlan:
    """Plan the Space repo ``<namespace>/<folder name>`` holding every file of a metric folder."""
    space_dir = Path(space_dir)
    repo_id = f"{namespace}/{space_dir.name}"
    if not space_dir.is_dir():
        raise PublishError(f"{repo_id}: {space_dir} is not a folder")
    card_path = space_dir / CARD_FILE
    if not card_path.is_file():
        raise PublishError(f"{repo_id}: {card_path} does not exist (a Space needs a README.md with its sdk)")
    sdk = read_front_matter(card_path).get("sdk")
    if sdk != SPACE_SDK:
        raise PublishError(f"{card_path}: front matter has sdk {sdk!r}, expected {SPACE_SDK!r}")
    files = []
    for path in sorted(space_dir.rglob("*")):
        relative = path.relative_to(space_dir)
        if not path.is_file() or _is_build_or_hidden(relative):
            continue
        if path.name.endswith(WEIGHT_SUFFIXES):
            raise PublishError(f"{repo_id}: {path} is a weights file; Spaces load weights from model repos")
        files.append(planned_file_from_disk(relative.as_posix(), path))
    return RepoPlan(repo_id, "space", tuple(files), space_sdk=SPACE_SDK, tag=tag)


def _is_build_or_hidden(relative: Path) -> bool:
    """True for caches and hidden files, which never go to a Space."""
    return any(part.startswith(".") or part == "__pycache__" for part in relative.parts) or relative.suffix == ".pyc"


def format_plan(plans: Sequence[RepoPlan]) -> str:
    """Human-readable plan: one block per repo, one line per file."""
    lines = []
    for plan in plans:
        header = f"{plan.repo_type} {plan.repo_id}"
        if plan.space_sdk:
            header += f" (sdk {plan.space_sdk})"
        header += f", tag {plan.tag}" if plan.tag else ", no tag"
        lines.append(header)
        if plan.repo_type == "model" and not plan.needs_original:
            lines.append("  no original files (a model of capeval's own)")
        elif plan.repo_type == "model":
            lines.append(f"  original checkpoint sha256: {plan.original_sha256 or 'UNKNOWN (give the original file)'}")
            lines += [f"  original {name} sha256: {sha256}" for name, sha256 in plan.originals[1:]]
        for planned in plan.files:
            origin = "generated" if planned.source is None else str(planned.source)
            lines.append(f"  {planned.path_in_repo}\t{planned.size}\t{planned.sha256}\t{origin}")
        lines.append(f"  total {sum(planned.size for planned in plan.files)} bytes in {len(plan.files)} files")
    return "\n".join(lines)


def check_publishable(plans: Iterable[RepoPlan]) -> None:
    """Error for any model plan whose card lacks the original checkpoint's sha256."""
    for plan in plans:
        if plan.repo_type == "model" and plan.needs_original and plan.original_sha256 is None:
            raise PublishError(
                f"{plan.repo_id}: refusing to publish without the original checkpoint "
                "(its sha256 must be recorded in the card); pass the original files after the weights folder"
            )


def publish(plans: Sequence[RepoPlan], api: Any, commit_message: str) -> list[str]:
    """Create or update every planned repo in one commit each, delete stale files, tag; returns the commit ids."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    check_publishable(plans)
    commit_ids = []
    for plan in plans:
        api.create_repo(plan.repo_id, repo_type=plan.repo_type, space_sdk=plan.space_sdk, exist_ok=True)
        planned_paths = {planned.path_in_repo for planned in plan.files}
        stale = [
            path
            for path in api.list_repo_files(plan.repo_id, repo_type=plan.repo_type)
            if path not in planned_paths and path != ".gitattributes"
        ]
        operations = [CommitOperationAdd(planned.path_in_repo, planned.payload) for planned in plan.files]
        operations += [CommitOperationDelete(path) for path in stale]
        commit = api.create_commit(plan.repo_id, operations, commit_message=commit_message, repo_type=plan.repo_type)
        if plan.tag:
            api.create_tag(plan.repo_id, tag=plan.tag, revision=commit.oid, repo_type=plan.repo_type)
        commit_ids.append(commit.oid)
    return commit_ids


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        nargs="+",
        action="append",
        default=[],
        metavar="PATH",
        help="CARD_DIR WEIGHTS_DIR [ORIGINAL ...]: a hub_models folder, the converted folder for it (written by "
        "its conversion/convert_<model>.py), and the original files it was converted from, in the order of the "
        "card's list (required unless --dry-run or the model has none)",
    )
    parser.add_argument("--space", action="append", default=[], type=Path, help="a metric folder to publish as a Space")
    parser.add_argument("--namespace", default="capeval", help="hub namespace of the Spaces (default: capeval)")
    parser.add_argument("--tag", default=None, help="revision tag put on each new commit, e.g. v1.0")
    parser.add_argument("--message", default="Publish with capeval conversion/publish.py", help="commit message")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; no network access")
    return parser


def main(argv: Sequence[str] | None = None) -> list[RepoPlan]:
    """Build the plan, print it, and publish it unless ``--dry-run``; returns the plan."""
    args = build_parser().parse_args(argv)
    if not args.model and not args.space:
        raise SystemExit("nothing to publish: give --model and/or --space")
    plans = []
    for values in args.model:
        if len(values) < 2:
            raise SystemExit(f"--model takes CARD_DIR WEIGHTS_DIR [ORIGINAL ...], got {values}")
        plans.append(plan_model(Path(values[0]), Path(values[1]), [Path(value) for value in values[2:]], args.tag))
    plans += [plan_space(space_dir, args.namespace, args.tag) for space_dir in args.space]
    print(format_plan(plans))
    if not args.dry_run:
        from huggingface_hub import HfApi

        for plan, commit_id in zip(plans, publish(plans, HfApi(), args.message)):
            print(f"published {plan.repo_type} {plan.repo_id} at {commit_id}")
    return plans


if __name__ == "__main__":
    try:
        main()
    except PublishError as error:
        sys.exit(f"error: {error}")
