"""CLIP backbone loading: a transformers ``CLIPModel`` from safetensors, once per process.

A model is a hub id or a local folder holding ``model.safetensors``, ``config.json``, ``preprocessor_config.json``
and CLIP tokenizer files (``conversion/convert_clip.py`` writes such folders). Loaded backbones are cached per
(model, revision, device, dtype), so every scorer and every call in a process shares one copy of the weights.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from capeval.configuration import WEIGHTS_NAME
from capeval.folder_kinds import check_folder_kind, load_transformers_model
from capeval.hub import (LoadedModels, ModelNotAvailableError, ModelRef, check_weights, folder_fingerprint,
                         loaded_revision, model_name, pinned_model_folder, pinned_revision)
from capeval.models.clip.modeling import pooled_image_states, pooled_text_states, project, text_token_states
from capeval.models.clip.preprocessing import ImageTransform, TextTransform
from capeval.runtime import DeviceLike, precision_dtype, resolve_device

if TYPE_CHECKING:  # transformers is imported by the loading, not by this module
    from transformers import CLIPModel

_HUB_FILES = ["config.json", "preprocessor_config.json", WEIGHTS_NAME, "tokenizer_config.json",
              "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.json"]


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

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of the weights, config and tokenizer files (identifies the model in on-disk caches)."""
        return folder_fingerprint(self.folder)

    @torch.inference_mode()
    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """Projected image features (not normalised) of a uint8 batch ``(N, 3, H, W)``."""
        values = self.image_transform.normalize_by_table(pixels.to(self.device, non_blocking=True), self.dtype)
        return project(pooled_image_states(self.model.vision_model, values), self.model.visual_projection)

    @torch.inference_mode()
    def encode_texts(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Projected text features (not normalised), pooled at the first end token, of a zero-padded id batch."""
        pooled = pooled_text_states(self.model.text_model, token_ids.to(self.device), self.text_transform.end_token_id)
        return project(pooled, self.model.text_projection)

    @torch.inference_mode()
    def encode_text_tokens(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Projected text features (not normalised) at every position ``(N, length, dim)`` of a zero-padded id batch:
        EMScore's ``encode_text(local=True)``; a row's end-token position holds its :meth:`encode_texts` feature."""
        return project(text_token_states(self.model.text_model, token_ids.to(self.device)), self.model.text_projection)


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


def model_folder(model: ModelRef, revision: Optional[str] = None) -> Path:
    """The folder of a CLIP model (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_backbone` reads, downloaded or converted now if need be."""
    return pinned_model_folder(model, revision, _HUB_FILES, "conversion/convert_clip.py")


_LOADED: LoadedModels[Backbone] = LoadedModels()
"""The backbones loaded in this process, by (model, revision, device, dtype)."""


def load_backbone(
    model: ModelRef,
    revision: Optional[str] = None,
    device: DeviceLike = None,
    precision: str = "fp32",
) -> Backbone:
    """Load (or reuse) a CLIP backbone; ``device`` defaults to Accelerate's ``PartialState().device``."""
    dtype = precision_dtype(precision)
    name = model_name(model)
    revision = pinned_revision(name, revision)
    target = resolve_device(device)

    def build() -> Backbone:
        from transformers import AutoTokenizer, CLIPModel

        folder = model_folder(name, revision)
        check_folder_kind(folder, "clip")
        check_weights(folder, [WEIGHTS_NAME])
        clip = load_transformers_model(CLIPModel, folder).to(device=target, dtype=dtype).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        tokenizer.model_max_length = sys.maxsize  # TextTransform truncates as the reference code does
        context_length = clip.config.text_config.max_position_embeddings
        text_transform = TextTransform(tokenizer, context_length, tokenizer.eos_token_id)
        return Backbone(clip, _image_transform(folder), text_transform, name, loaded_revision(folder, revision),
                        folder, target, dtype)

    return _LOADED.get((name, revision, str(target), dtype), build)
