"""Convert the bottom-up attention detector of ``unc-nlp/frcnn-vg-finetuned`` into capeval's detector folder.

Inputs: ``pytorch_model.bin`` (a state dict, read with ``torch.load(weights_only=True)``) and the ``config.yaml``
published beside it. Output: ``model.safetensors`` + ``config.json`` for
:class:`capeval.models.regions.modeling_bottom_up.BottomUpDetector`.

Every checkpoint key is either renamed (:func:`capeval_key`) or listed as dropped with the reason:

* ``backbone.stem.conv1.weight`` -> ``backbone.stem.conv.weight``; ``backbone.stem.conv1.norm.*`` ->
  ``backbone.stem.norm.*``;
* ``...{res2,res3,res4}.N.convK.weight`` unchanged; ``...convK.norm.*`` -> ``...normK.*``;
  ``...shortcut.norm.*`` -> ``...shortcut_norm.*``; the same inside ``roi_heads.res5.N`` -> ``res5.N``;
* ``proposal_generator.rpn_head.{conv,objectness_logits,anchor_deltas}.*`` -> ``rpn.{conv,objectness,anchor_deltas}.*``;
* ``roi_heads.box_predictor.*`` -> ``heads.*``;
* Caffe-style ``gamma`` / ``beta`` names are read as ``weight`` / ``bias`` (the reference loader does the same);
* dropped: ``*.num_batches_tracked`` (batch norm counters, unused at test time) and
  ``proposal_generator.anchor_generator.cell_anchors.0`` (recomputed from the config; checked equal first).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import yaml
from safetensors.torch import save_file

from capeval.models.regions.configuration import BottomUpConfig
from capeval.models.regions.modeling_bottom_up import BottomUpDetector, cell_anchors

CELL_ANCHORS_KEY = "proposal_generator.anchor_generator.cell_anchors.0"

_PREFIXES: Tuple[Tuple[str, str], ...] = (
    ("proposal_generator.rpn_head.objectness_logits.", "rpn.objectness."),
    ("proposal_generator.rpn_head.", "rpn."),
    ("roi_heads.box_predictor.", "heads."),
    ("roi_heads.res5.", "res5."),
)
_NORM = re.compile(r"\.conv([123])\.norm\.")


def capeval_key(key: str) -> Optional[str]:
    """The capeval parameter name of a checkpoint key, or ``None`` for keys that are dropped (see module doc)."""
    if key.endswith(".num_batches_tracked") or key == CELL_ANCHORS_KEY:
        return None
    key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key))
    for old, new in _PREFIXES:
        if key.startswith(old):
            key = new + key[len(old):]
            break
    key = key.replace("backbone.stem.conv1.norm.", "backbone.stem.norm.")
    key = key.replace("backbone.stem.conv1.weight", "backbone.stem.conv.weight")
    key = key.replace(".shortcut.norm.", ".shortcut_norm.")
    return _NORM.sub(r".norm\1.", key)


def load_checkpoint(path: Path) -> Dict[str, torch.Tensor]:
    """The checkpoint's state dict; files holding anything but tensors are refused (``weights_only=True``)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} is not a flat state dict of tensors")
    return dict(state)


def convert_state_dict(state: Mapping[str, torch.Tensor], config: BottomUpConfig
                       ) -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """(capeval state dict, dropped checkpoint keys); raises if a key is unknown, missing or of the wrong shape,
    or if the stored cell anchors differ from those the config gives."""
    expected = BottomUpDetector(config).state_dict()
    converted: Dict[str, torch.Tensor] = {}
    dropped: List[str] = []
    unexpected: List[str] = []
    for key, tensor in state.items():
        name = capeval_key(key)
        if name is None:
            dropped.append(key)
            continue
        if name not in expected:
            unexpected.append(key)
            continue
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise ValueError(f"{key} -> {name}: shape {tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
        converted[name] = tensor.detach().to(torch.float32).contiguous()
    missing = sorted(set(expected) - set(converted))
    if unexpected or missing:
        raise ValueError(f"checkpoint does not match the config: unexpected keys {unexpected}, missing {missing}")
    if CELL_ANCHORS_KEY in state and not torch.equal(state[CELL_ANCHORS_KEY].float(), cell_anchors(config)):
        raise ValueError(f"{CELL_ANCHORS_KEY} differs from the anchors of the config's sizes and aspect ratios")
    return converted, dropped


def convert_checkpoint(checkpoint: Path, config_yaml: Path, out_dir: Path) -> List[str]:
    """Write ``model.safetensors`` and ``config.json`` to ``out_dir``; returns the dropped checkpoint keys."""
    config = BottomUpConfig.from_reference_yaml(yaml.safe_load(config_yaml.read_text()))
    converted, dropped = convert_state_dict(load_checkpoint(checkpoint), config)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(converted, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config.save(out_dir / "config.json")
    return dropped


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="pytorch_model.bin of unc-nlp/frcnn-vg-finetuned")
    parser.add_argument("--config", type=Path, required=True, help="its config.yaml")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    dropped = convert_checkpoint(args.checkpoint, args.config, args.out)
    print(f"wrote {args.out}; dropped {len(dropped)} checkpoint keys "
          f"({sum(k.endswith('num_batches_tracked') for k in dropped)} num_batches_tracked, "
          f"{sum(k == CELL_ANCHORS_KEY for k in dropped)} cell anchors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
