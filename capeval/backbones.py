"""Backbone loading: a transformers ``CLIPModel`` from safetensors, once per process.

A model is a hub id or a local folder holding ``model.safetensors``, ``config.json``, ``preprocessor_config.json``
and CLIP tokenizer files (``conversion/convert_clip.py`` writes such folders). Loaded backbones are cached per
(model, revision, device, dtype), so every scorer and every call in a process shares one copy of the weights.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
from accelerate import PartialState
from transformers import AutoTokenizer, CLIPModel

from capeval.preprocessing import ImageTransform, TextTransform
from capeval.towers import pooled_image_states, pooled_text_states

ModelRef = Union[str, "os.PathLike[str]"]

DEFAULT_REVISIONS: Dict[str, str] = {
    "openai/clip-vit-base-patch32": "c7244be81152024ce0e99ac8d2e373a8953d9f9a",
    "capeval/pacs-clip-vit-b-32": "v1.0",
    "capeval/pacs-openclip-vit-l-14": "v1.0",
}
"""Revision used for a known hub model when none is given; the result signature records it."""

PRECISIONS: Dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

_HUB_FILES = ["config.json", "preprocessor_config.json", "model.safetensors", "tokenizer_config.json",
              "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.json"]


def process_state() -> PartialState:
    """Accelerate's process state. Without an accelerator it is created with ``cpu=True``, so that processes started
    by ``torchrun`` or ``accelerate launch --multi_gpu`` on CPU machines are recognised as one multi-CPU job."""
    accelerator = getattr(torch, "accelerator", None)
    has_accelerator = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    return PartialState(cpu=not has_accelerator)


def folder_fingerprint(folder: Path) -> str:
    """Content hash of a model folder's weights, config and vocabulary/tokenizer files (``.json``, ``.txt``,
    ``.safetensors``), identifying the model in on-disk caches."""
    hasher = hashlib.blake2b(digest_size=16)
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in {".json", ".txt", ".safetensors"}):
        hasher.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 24), b""):
                hasher.update(block)
    return hasher.hexdigest()


class ModelNotAvailableError(OSError):
    """The model could not be found locally and cannot be downloaded now."""


@dataclass(frozen=True)
class Backbone:
    """A loaded CLIP model with the exact preprocessing that belongs to it."""

    model: CLIPModel
    image_transform: ImageTransform
    text_transform: TextTransform
    name: str
    revision: Optional[str]
    folder: Path
    device: torch.device
    dtype: torch.dtype
    _fingerprint: Dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def fingerprint(self) -> str:
        """Content hash of the weights, config and tokenizer files (identifies the model in on-disk caches)."""
        if "value" not in self._fingerprint:
            self._fingerprint["value"] = folder_fingerprint(self.folder)
        return self._fingerprint["value"]

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Projected image features (not normalised) of a uint8 batch ``(N, 3, H, W)``."""
        values = self.image_transform.normalize(pixels.to(self.device, non_blocking=True)).to(self.dtype)
        return self.model.visual_projection(pooled_image_states(self.model.vision_model, values))

    @torch.inference_mode()
    def encode_texts(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Projected text features (not normalised), pooled at the first end token, of a zero-padded id batch."""
        pooled = pooled_text_states(self.model.text_model, token_ids.to(self.device), self.text_transform.end_token_id)
        return self.model.text_projection(pooled)


def resolve_model_folder(model: ModelRef, revision: Optional[str], files: Sequence[str] = _HUB_FILES,
                         converter: str = "conversion/convert_clip.py") -> Path:
    """A local folder as-is, or the hub snapshot of ``model`` at ``revision`` (the local cache when offline), holding
    ``files``; ``converter`` is the script named in the error message as the way to build a local folder."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(str(model), revision=revision, allow_patterns=list(files)))
    except LocalEntryNotFoundError as error:
        raise ModelNotAvailableError(
            f"model {model!r} (revision {revision!r}) is not in the local Hugging Face cache and the hub cannot be "
            "reached (HF_HUB_OFFLINE is set or there is no network). Run once with network access to cache it, or "
            f"pass model=<local folder> with a converted model (see {converter}). Cause: {error}"
        ) from None
    except Exception as error:  # repository or revision errors from the hub
        raise ModelNotAvailableError(f"cannot load model {model!r} at revision {revision!r}: {error}") from None


def _image_transform(folder: Path) -> ImageTransform:
    config_path = folder / "preprocessor_config.json"
    if not config_path.is_file():
        raise ModelNotAvailableError(f"{folder} has no preprocessor_config.json; cannot know the image transform")
    config = json.loads(config_path.read_text())
    size = config.get("size", 224)
    size = size.get("shortest_edge", size) if isinstance(size, dict) else size
    crop = config.get("crop_size", size)
    crop = crop.get("height", crop) if isinstance(crop, dict) else crop
    if size != crop:
        raise ValueError(f"{config_path}: resize {size} and crop {crop} differ; CLIP's reference transform uses one size")
    return ImageTransform(int(size), tuple(config["image_mean"]), tuple(config["image_std"]))


_CACHE: Dict[Tuple[str, Optional[str], str, torch.dtype], Backbone] = {}
_LOCK = threading.Lock()


def load_backbone(
    model: ModelRef,
    revision: Optional[str] = None,
    device: Union[str, torch.device, None] = None,
    precision: str = "fp32",
) -> Backbone:
    """Load (or reuse) a CLIP backbone; ``device`` defaults to Accelerate's ``PartialState().device``."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    dtype = PRECISIONS[precision]
    name = str(model)
    if revision is None and not Path(name).expanduser().is_dir():
        revision = DEFAULT_REVISIONS.get(name)
    target = torch.device(device) if device is not None else process_state().device
    key = (name, revision, str(target), dtype)
    with _LOCK:
        if key not in _CACHE:
            folder = resolve_model_folder(name, revision)
            clip = CLIPModel.from_pretrained(folder, use_safetensors=True).to(device=target, dtype=dtype).eval()
            tokenizer = AutoTokenizer.from_pretrained(folder)
            tokenizer.model_max_length = sys.maxsize  # TextTransform truncates as the reference code does
            context_length = clip.config.text_config.max_position_embeddings
            text_transform = TextTransform(tokenizer, context_length, tokenizer.eos_token_id)
            _CACHE[key] = Backbone(clip, _image_transform(folder), text_transform, name, revision, folder, target, dtype)
        return _CACHE[key]
