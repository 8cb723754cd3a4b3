"""Publish capeval's converted models and metric Spaces to the Hugging Face hub.

A model repo combines a card folder under ``hub_models/<namespace>/<name>`` (README.md, config.json,
preprocessor_config.json, tokenizer files) with the ``model.safetensors`` of a folder written by
``conversion/convert_clip.py``. A Space repo uploads a metric folder (``metrics/clipscore``, ...) as it is.

    python -m conversion.publish --dry-run \\
        --model hub_models/capeval/pacs-clip-vit-b-32 out/pacs-clip-vit-b-32 checkpoints/clip_ViT-B-32.pth \\
        --space metrics/clipscore --space metrics/pacscore --tag v1.0

``--dry-run`` prints the plan (repo id, repo type, files, sizes, sha256) and touches no network. A real
publish refuses a model whose original checkpoint was not given: its card must record that file's sha256.

torch, transformers, safetensors and huggingface_hub are imported by the functions that check weights and upload,
so that ``--help`` and the plans of Spaces load none of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from capeval.hub import CHECKSUMS_NAME, weights_problem
from capeval.transfers import sha256_of

WEIGHTS_FILE = "model.safetensors"
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


def _json_difference(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Dotted key paths at which two parsed JSON values differ (``transformers_version`` is not compared)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        paths = []
        for key in sorted((set(expected) | set(actual)) - {UNCOMPARED_JSON_KEY}, key=str):
            child = f"{where}.{key}" if where else str(key)
            if key not in expected or key not in actual:
                paths.append(child)
            else:
                paths.extend(_json_difference(expected[key], actual[key], child))
        return paths
    return [] if expected == actual else [where or "<root>"]


def metadata_differences(expected_dir: Path, actual_dir: Path, names: Iterable[str]) -> list[str]:
    """One line per file of ``names`` that is missing from ``actual_dir`` or differs from ``expected_dir``'s copy.

    JSON files are compared parsed, other files byte for byte.
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
            )
            if differing:
                differences.append(f"{actual_file} differs at {', '.join(differing[:10])}")
        elif expected_file.read_bytes() != actual_file.read_bytes():
            differences.append(f"{actual_file} differs")
    return differences


def model_metadata_names(card_dir: Path, weights_dir: Path) -> list[str]:
    """The converted folder's files besides the weights and their checksum record (this machine's; the hub records
    each file's sha256 itself); error unless the card folder holds those plus README.md."""
    converted = sorted(path.name for path in weights_dir.iterdir()
                       if path.is_file() and path.name not in (WEIGHTS_FILE, CHECKSUMS_NAME))
    carded = sorted(path.name for path in card_dir.iterdir() if path.is_file() and path.name != CARD_FILE)
    if converted != carded:
        raise PublishError(
            f"{card_dir} holds {carded} but the converted folder {weights_dir} holds {converted} besides the "
            "weights: regenerate the card folder with hub_models/generate_configs.py"
        )
    return converted


def check_same_metadata(card_dir: Path, weights_dir: Path, names: Iterable[str]) -> None:
    """Error unless the converted folder's config and tokenizer files equal the card folder's."""
    differences = metadata_differences(card_dir, weights_dir, names)
    if differences:
        raise PublishError(
            "; ".join(differences) + f": these weights were converted for another model than {card_dir} describes"
        )


def check_weights_match_config(card_dir: Path, weights_path: Path) -> None:
    """Error unless the safetensors tensors have the names and shapes of a ``CLIPModel`` of the card's config."""
    import torch
    from safetensors import safe_open
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig.from_pretrained(card_dir)
    with torch.device("meta"):
        expected = {name: tuple(tensor.shape) for name, tensor in CLIPModel(config).state_dict().items()}
    with safe_open(str(weights_path), framework="pt") as weights:
        actual = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
    missing = sorted(set(expected) - set(actual))
    unexpected = sorted(set(actual) - set(expected))
    reshaped = sorted(name for name in set(expected) & set(actual) if expected[name] != actual[name])
    if missing or unexpected or reshaped:
        details = []
        for label, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", reshaped)):
            if names:
                more = f" (+{len(names) - 5} more)" if len(names) > 5 else ""
                details.append(f"{label}: {', '.join(names[:5])}{more}")
        raise PublishError(f"{weights_path} does not fit {card_dir / 'config.json'}: " + "; ".join(details))


def fill_original_sha256(card_text: str, original_sha256: str, card_path: Path) -> str:
    """The card with its original-checkpoint sha256 marker filled in."""
    if len(ORIGINAL_SHA256_PATTERN.findall(card_text)) != 1:
        raise PublishError(
            f"{card_path}: needs exactly one '<!--original-sha256-->...<!--/original-sha256-->' marker"
        )
    return ORIGINAL_SHA256_PATTERN.sub(
        lambda match: f"{match.group(1)}`{original_sha256}`{match.group(3)}", card_text
    )


def plan_model(card_dir: Path, weights_dir: Path, original: Path | None, tag: str | None) -> RepoPlan:
    """Plan the model repo for a card folder, a converted-weights folder and the original checkpoint (if given)."""
    card_dir, weights_dir = Path(card_dir), Path(weights_dir)
    repo_id = repo_id_of_model_folder(card_dir)
    card_path = card_dir / CARD_FILE
    if not card_path.is_file():
        raise PublishError(f"{repo_id}: {card_path} does not exist")
    read_front_matter(card_path)
    weights_path = weights_dir / WEIGHTS_FILE
    if not weights_path.is_file():
        raise PublishError(f"{repo_id}: {weights_path} does not exist; run conversion/convert_clip.py first")
    damage = weights_problem(weights_dir, [WEIGHTS_FILE])
    if damage is not None:
        raise PublishError(f"{repo_id}: {damage}; convert the original checkpoint again")
    names = model_metadata_names(card_dir, weights_dir)
    check_same_metadata(card_dir, weights_dir, names)
    check_weights_match_config(card_dir, weights_path)

    card_text = card_path.read_text(encoding="utf-8")
    original_sha256 = None
    if original is not None:
        original = Path(original)
        if not original.is_file():
            raise PublishError(f"{repo_id}: original checkpoint {original} does not exist")
        check_original_matches_weights(original, weights_path, card_dir)
        original_sha256 = sha256_of(original)
        card_text = fill_original_sha256(card_text, original_sha256, card_path)
    files = [planned_file_from_bytes(CARD_FILE, card_text.encode("utf-8"))]
    files += [planned_file_from_disk(name, card_dir / name) for name in names]
    files.append(planned_file_from_disk(WEIGHTS_FILE, weights_path))
    return RepoPlan(repo_id, "model", tuple(files), tag=tag, original_sha256=original_sha256)


def check_original_matches_weights(original: Path, weights_path: Path, card_dir: Path) -> None:
    """Error unless converting ``original`` gives exactly the tensors in ``weights_path`` (compared in fp32)."""
    import torch
    from safetensors import safe_open
    from transformers import CLIPConfig

    from conversion.clip_converter import CheckpointError, convert_state_dict, load_original_state_dict, merge_lora

    try:
        converted = convert_state_dict(merge_lora(load_original_state_dict(original)), CLIPConfig.from_pretrained(card_dir))
    except CheckpointError as error:
        raise PublishError(f"original checkpoint {original}: {error}") from error
    with safe_open(str(weights_path), framework="pt") as weights:
        differing = [
            name for name, tensor in converted.items() if not torch.equal(tensor.float(), weights.get_tensor(name))
        ]
    if differing:
        raise PublishError(
            f"{weights_path} was not converted from {original}: {len(differing)} tensors differ, "
            f"e.g. {', '.join(differing[:5])}"
        )


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
        if plan.repo_type == "model":
            lines.append(f"  original checkpoint sha256: {plan.original_sha256 or 'UNKNOWN (give the original file)'}")
        for planned in plan.files:
            origin = "generated" if planned.source is None else str(planned.source)
            lines.append(f"  {planned.path_in_repo}\t{planned.size}\t{planned.sha256}\t{origin}")
        lines.append(f"  total {sum(planned.size for planned in plan.files)} bytes in {len(plan.files)} files")
    return "\n".join(lines)


def check_publishable(plans: Iterable[RepoPlan]) -> None:
    """Error for any model plan whose card lacks the original checkpoint's sha256."""
    for plan in plans:
        if plan.repo_type == "model" and plan.original_sha256 is None:
            raise PublishError(
                f"{plan.repo_id}: refusing to publish without the original checkpoint "
                "(its sha256 must be recorded in the card); pass it after the weights folder"
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
        help="CARD_DIR WEIGHTS_DIR [ORIGINAL_CHECKPOINT]: a hub_models folder, the convert_clip.py output "
        "for it, and the original checkpoint it was converted from (required unless --dry-run)",
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
        if len(values) not in (2, 3):
            raise SystemExit(f"--model takes CARD_DIR WEIGHTS_DIR [ORIGINAL_CHECKPOINT], got {values}")
        original = Path(values[2]) if len(values) == 3 else None
        plans.append(plan_model(Path(values[0]), Path(values[1]), original, args.tag))
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
