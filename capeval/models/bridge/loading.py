"""BRIDGE models: a folder (or hub repository) of ``config.json`` (:class:`BridgeConfig`) and ``model.safetensors``
(the trained parts, :class:`BridgeModel`'s ``state_dict``), on top of a CLIP backbone loaded by capeval's CLIP
loader."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from safetensors.torch import load_file

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.folder_kinds import check_folder_kind
from capeval.hub import (ModelRef, check_weights, folder_fingerprint, model_name, pinned_model_folder, pinned_revision,
                         save_weights)
from capeval.models.bridge.configuration import BridgeConfig
from capeval.models.bridge.modeling import BridgeModel
from capeval.models.clip.loading import Backbone, load_backbone
from capeval.runtime import DeviceLike, resolve_device


@dataclass(frozen=True)
class LoadedBridge:
    """A BRIDGE model in eval mode with its backbone, configuration and provenance."""

    model: BridgeModel
    backbone: Backbone
    config: BridgeConfig
    name: str
    revision: Optional[str]
    fingerprint: str
    """Content hash of ``config.json`` and ``model.safetensors``."""


def save_bridge(model: BridgeModel, folder: Union[str, Path]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (the trained parts, float32) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save(folder)
    save_weights({name: tensor.detach().float().cpu().contiguous() for name, tensor in model.state_dict().items()},
                 folder, WEIGHTS_NAME)
    return folder


def model_folder(model: ModelRef, revision: Optional[str] = None) -> Path:
    """The folder of a BRIDGE model (hub id at ``revision``, else capeval's pinned one, or local folder) holding the
    files :func:`load_bridge` reads."""
    return pinned_model_folder(model, revision, [CONFIG_NAME, WEIGHTS_NAME], "capeval train bridge")


def load_bridge(model: ModelRef, revision: Optional[str] = None, device: DeviceLike = None,
                precision: str = "fp32", backbone: Optional[ModelRef] = None) -> LoadedBridge:
    """Load a BRIDGE model (a hub id, at ``revision`` or else capeval's pinned one, or a local folder); its CLIP
    backbone is the one its config names, or ``backbone`` (a local copy of it)."""
    name = model_name(model)
    revision = pinned_revision(name, revision)
    folder = model_folder(name, revision)
    check_folder_kind(folder, "bridge")
    config = BridgeConfig.load(folder)
    target = resolve_device(device)
    clip_backbone = load_backbone(backbone if backbone is not None else config.backbone,
                                  config.backbone_revision if backbone is None else None, target, precision)
    bridge = BridgeModel(config, clip_backbone.model)
    check_weights(folder, [WEIGHTS_NAME])
    state = load_file(str(folder / WEIGHTS_NAME))
    missing, unexpected = bridge.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{folder / WEIGHTS_NAME} does not match the BRIDGE config: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")
    bridge = bridge.to(device=target, dtype=clip_backbone.dtype).eval()
    return LoadedBridge(bridge, clip_backbone, config, name, revision,
                        folder_fingerprint(Path(folder), suffixes=(".json", ".safetensors")))

