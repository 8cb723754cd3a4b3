"""What a model folder holds, told from its files and ``config.json`` before anything is loaded from it, and the
one-line refusal of a folder of another kind than a loader reads.

Each loader names the kind it reads (a key of :data:`KINDS`: the ``model_type`` its ``config.json`` carries, or
``vilbert`` and ``bridge``, whose configs carry none) and calls :func:`check_folder_kind` on its folder before it
reads anything else from it, so that a Polos folder given to CLIP-S, or a CLIP folder given to TIGEr, is refused in
one line naming the folder, what it holds and what is needed, never by a third-party traceback or transformers'
load report. :func:`load_transformers_model` loads a transformers model of a checked folder with that report
silenced, and refuses weights that are not those of the model its config describes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.hub import ModelNotAvailableError, without_loading_bars
from capeval.options import CHECKPOINT_SUFFIXES
from capeval.originals import SOURCES

ORIGINAL_SUFFIXES = (CHECKPOINT_SUFFIXES - {".safetensors"}) | {".zip", ".pkl", ".caffemodel"}
"""File name endings of the checkpoints that authors publish (a converted folder holds ``.safetensors``)."""


class WrongModelFolderError(ModelNotAvailableError):
    """A model folder of another kind than the loader reads, or of its kind but lacking a file: the message names
    the folder, what it holds, what is needed and how to get it."""


@dataclass(frozen=True)
class FolderKind:
    """One kind of model folder that a capeval loader reads."""

    description: str
    """What it is, in a few words (``a converted CLIP model``)."""
    download: str
    """A model of :data:`capeval.registry.MODELS` of this kind, for ``capeval download``."""
    writer: str
    """What else makes one (``convert a checkpoint with conversion/convert_clip.py``)."""
    config_keys: Tuple[str, ...] = ()
    """For a kind whose ``config.json`` carries no ``model_type``: the fields that only its config has; empty: the
    config's ``model_type`` is the kind's key in :data:`KINDS`."""
    files: Tuple[str, ...] = (CONFIG_NAME, WEIGHTS_NAME)
    """The files the loader reads, as paths inside the folder."""
    parts: Tuple[Tuple[str, str], ...] = ()
    """Subfolders that are model folders of their own: (name, kind)."""

    @property
    def how(self) -> str:
        """How to get a folder of this kind."""
        return f"`capeval download {self.download}` fetches one, or {self.writer}"


KINDS: Dict[str, FolderKind] = {
    "clip": FolderKind("a converted CLIP model", "openai/clip-vit-base-patch32",
                       "convert a checkpoint with conversion/convert_clip.py",
                       files=(CONFIG_NAME, WEIGHTS_NAME, "preprocessor_config.json", "vocab.json", "merges.txt")),
    "polos": FolderKind("a converted Polos model", "capeval/polos-clip-vit-b-32",
                        "convert the authors' reprod.zip with conversion/convert_polos.py",
                        files=(CONFIG_NAME, WEIGHTS_NAME, f"encoder/{CONFIG_NAME}", f"encoder/{WEIGHTS_NAME}",
                               "encoder/vocab.json", "encoder/merges.txt"),
                        parts=(("clip", "clip"),)),
    "scan": FolderKind("a converted SCAN model (TIGEr's)", "capeval/tiger-scan-coco",
                       "convert a checkpoint with conversion/convert_scan.py",
                       files=(CONFIG_NAME, WEIGHTS_NAME, "vocab.json")),
    "vilbert": FolderKind("a converted ViLBERT model", "capeval/vilbert-multi-task",
                          "convert a checkpoint with conversion/convert_vilbert.py",
                          config_keys=("v_biattention_id", "t_biattention_id"),
                          files=(CONFIG_NAME, WEIGHTS_NAME, "vocab.txt")),
    "bridge": FolderKind("a BRIDGE model", "capeval/bridge-clip-vit-b-32", "train one with `capeval train bridge`",
                         config_keys=("backbone", "templates")),
    "bottom-up-frcnn": FolderKind("a converted bottom-up Faster R-CNN region detector (TIGEr's)",
                                  "capeval/bottom-up-frcnn-r101-vg",
                                  "convert a checkpoint with conversion/convert_regions.py"),
    "x152-fpn-frcnn": FolderKind("a converted X152-FPN Faster R-CNN region detector (ViLBERTScore's)",
                                 "capeval/vilbert-detector-x152-fpn",
                                 "convert a checkpoint with conversion/convert_regions.py"),
    "blip": FolderKind("a BLIP captioner (transformers BlipForConditionalGeneration)",
                       "Salesforce/blip-image-captioning-large",
                       "write one with BlipForConditionalGeneration.save_pretrained"),
}
"""Kind key -> :class:`FolderKind`: every kind of folder that a capeval loader reads."""


def _config(folder: Path) -> Tuple[Optional[Mapping[str, Any]], str]:
    """The folder's ``config.json`` as a dict (``None`` when it has none or it is not a JSON object), and why not."""
    path = folder / CONFIG_NAME
    if not path.is_file():
        return None, "no config.json"
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        return None, f"a config.json that is not JSON ({type(error).__name__}: {error})"
    if not isinstance(values, dict):
        return None, f"a config.json holding a JSON {type(values).__name__}, not an object"
    return values, ""


def _kind_of(config: Mapping[str, Any]) -> Optional[str]:
    """The key of the kind a folder with this config is, ``None`` for none of :data:`KINDS`."""
    for key, kind in KINDS.items():
        if ((all(name in config for name in kind.config_keys) and "model_type" not in config) if kind.config_keys
                else config.get("model_type") == key):
            return key
    return None


def _folder_kind(folder: Path) -> Optional[str]:
    """The key of the kind ``folder`` is, ``None`` for none of :data:`KINDS` (or no folder)."""
    config = _config(folder)[0] if folder.is_dir() else None
    return _kind_of(config) if config is not None else None


def _listing(names: List[str]) -> str:
    """The first few of ``names``, and how many more."""
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def folder_holds(folder: Path) -> str:
    """What ``folder`` holds, in words: a kind of :data:`KINDS`, a transformers model of another type, a model's
    original files, other model folders, nothing, ..."""
    if not folder.is_dir():
        return "nothing (no such folder)"
    config, problem = _config(folder)
    if config is not None:
        key = _kind_of(config)
        if key is not None:
            return KINDS[key].description
        if isinstance(config.get("model_type"), str):
            architectures = config.get("architectures")
            named = (f" ({', '.join(map(str, architectures))})" if isinstance(architectures, list) and architectures
                     else "")
            return f"a transformers {config['model_type']!r} model{named}"
        return f"a config.json of no model that capeval knows (no model_type; keys {_listing(sorted(config))})"
    names = sorted(path.name for path in folder.iterdir() if not path.name.startswith("."))
    if not names:
        return "nothing (an empty folder)"
    if (folder / CONFIG_NAME).is_file():
        return problem
    for model, source in SOURCES.items():
        originals = [file.name for file in source.files if file.argument == "checkpoint" and file.name in names]
        if originals:
            return (f"the original files of {model} ({_listing(originals)}; `capeval download {model} --original "
                    f"<each of its original files>` converts them)")
    checkpoints = [name for name in names if Path(name).suffix.lower() in ORIGINAL_SUFFIXES]
    if checkpoints:
        return f"unconverted checkpoint files ({_listing(checkpoints)})"
    models = [name for name in names if (folder / name / CONFIG_NAME).is_file()]
    if models:
        return f"model folders ({_listing(models)}), not a model of its own"
    return f"no config.json, only {_listing(names)}"


def check_folder_kind(folder: Path, *needed: str) -> None:
    """Refuse ``folder`` with :class:`WrongModelFolderError` unless it is a folder of one of the kinds ``needed``
    (keys of :data:`KINDS`) holding every file of its kind, its subfolders included; reads nothing but file names
    and ``config.json``."""
    folder = Path(folder)
    kinds = [KINDS[key] for key in needed]
    key = _folder_kind(folder)
    if key not in needed:
        wanted = " or ".join(kind.description for kind in kinds)
        inside = [path.name for path in sorted(folder.iterdir()) if _folder_kind(path) in needed] \
            if folder.is_dir() else []
        hint = f" (its subfolder {inside[0]} is one)" if inside else ""
        raise WrongModelFolderError(f"model folder {folder} holds {folder_holds(folder)}, where {wanted} is "
                                    f"needed{hint}: {'; '.join(kind.how for kind in kinds)}")
    kind = KINDS[key]
    missing = ([name for name in kind.files if not (folder / name).is_file()]
               + [f"{name}/" for name, _ in kind.parts if not (folder / name).is_dir()])
    if missing:
        raise WrongModelFolderError(f"model folder {folder} is {kind.description} but lacks {', '.join(missing)}: "
                                    f"copy or write the folder again ({kind.how})")
    for name, part in kind.parts:
        check_folder_kind(folder / name, part)


def load_transformers_model(model_class: Any, folder: Path) -> Any:
    """``model_class`` (a transformers model class, or ``AutoModel``) from the weights of ``folder`` (checked by
    :func:`check_folder_kind`), with transformers' progress bar and load report silenced; :class:`WrongModelFolderError`
    naming the weight file when its tensors are not exactly those of the model that the folder's config describes
    (transformers would start the missing ones from random values)."""
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with without_loading_bars():
            model, report = model_class.from_pretrained(folder, use_safetensors=True, output_loading_info=True)
    finally:
        transformers_logging.set_verbosity(verbosity)
    wrong = [f"{len(report[key])} {what} (such as {sorted(map(str, report[key]))[0]})"
             for key, what in (("missing_keys", "missing"), ("unexpected_keys", "unexpected"),
                               ("mismatched_keys", "of another shape")) if report.get(key)]
    if wrong:
        raise WrongModelFolderError(f"{folder / WEIGHTS_NAME} does not hold the weights of the "
                                    f"{model.config.model_type!r} model its config.json describes: tensors "
                                    f"{', '.join(wrong)}; convert or copy the folder again")
    return model
