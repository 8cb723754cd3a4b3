"""What each kind of folder capeval publishes holds, for ``conversion/publish.py``: its weight files, the tensors
each must hold (names and shapes, built from the folder's configs by the family's own modeling code on the meta
device, so nothing is allocated), and the files its card folder does not hold.

A model of :data:`capeval.registry.MODELS` is of the kind its :class:`capeval.originals.ModelSource` resolves its
folder with (:attr:`~capeval.originals.ModelSource.folder`: the family's loader), so the table below is keyed by that.
torch, transformers and the model code are imported by the functions that build the models.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Mapping, Optional, Tuple

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.originals import CLIP_FOLDER, SOURCES

if TYPE_CHECKING:
    from torch import nn

Shapes = Dict[str, Tuple[int, ...]]
"""Tensor name -> shape."""


@dataclass(frozen=True)
class FolderKind:
    """The files of one kind of published folder and how its tensors are known."""

    name: str
    script: str
    """What writes such a folder."""
    weights: Tuple[str, ...]
    """The weight files, as paths inside the folder."""
    shapes: Callable[[Path], Dict[str, Shapes]]
    """The tensors each weight file must hold, from the configs of a folder laid out as the repository will be."""
    from_weights_folder: Tuple[str, ...] = ()
    """Files uploaded as the conversion (or training) wrote them, which the card folder does not hold: copies of
    original files (a vocabulary), or a trained model's own config and run card."""
    compared_keys: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    """JSON files of the card folder that are a generated stand-in for a file the conversion copies from an original
    (whose exact bytes capeval does not reproduce): compared with the converted folder's copy on these keys only;
    the card folder's copy is the one uploaded."""


def module_shapes(module: "nn.Module", skipped: FrozenSet[str] = frozenset()) -> Shapes:
    """The shapes of a module's ``state_dict`` (what its loader loads strictly), but ``skipped``."""
    return {name: tuple(tensor.shape) for name, tensor in module.state_dict().items() if name not in skipped}


def clip_shapes(folder: Path) -> Shapes:
    """A transformers ``CLIPModel`` of the folder's ``config.json`` (what capeval's CLIP loader builds)."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig.from_pretrained(folder)
    with torch.device("meta"):
        return module_shapes(CLIPModel(config))


def clip_folder_shapes(folder: Path) -> Dict[str, Shapes]:
    """A CLIP folder: its ``model.safetensors``."""
    return {WEIGHTS_NAME: clip_shapes(folder)}


def polos_shapes(folder: Path) -> Dict[str, Shapes]:
    """A Polos folder: the head (``scalar_mix.*`` as :class:`ScalarMix` names them, the regressor's linear layers
    from the regressor input ``4 * hidden + 6 * clip_dim`` through ``hidden_sizes`` to one output), the sentence
    encoder (``AutoModel`` of ``encoder/config.json`` without the index buffers the conversion drops) and ``clip/``."""
    import torch
    from transformers import AutoConfig, AutoModel

    from capeval.models.polos.configuration import CLIP_FOLDER as POLOS_CLIP, ENCODER_FOLDER, PolosConfig
    from capeval.models.polos.loading import FEED_FORWARD
    from capeval.models.polos.modeling import ScalarMix
    from conversion.polos_converter import ENCODER_BUFFERS

    config = PolosConfig.load(folder)
    encoder_config = AutoConfig.from_pretrained(folder / ENCODER_FOLDER)
    with torch.device("meta"):
        encoder = module_shapes(AutoModel.from_config(encoder_config), ENCODER_BUFFERS)
        mix = ScalarMix(encoder_config.num_hidden_layers + 1) if config.layer == "mix" else None
    head = {f"scalar_mix.{name}": shape for name, shape in (module_shapes(mix) if mix is not None else {}).items()}
    sizes = [4 * encoder_config.hidden_size + 6 * config.clip_dim, *config.hidden_sizes, 1]
    for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        head[f"{FEED_FORWARD.format(index)}.weight"] = (fan_out, fan_in)
        head[f"{FEED_FORWARD.format(index)}.bias"] = (fan_out,)
    return {WEIGHTS_NAME: head, f"{ENCODER_FOLDER}/{WEIGHTS_NAME}": encoder,
            f"{POLOS_CLIP}/{WEIGHTS_NAME}": clip_shapes(folder / POLOS_CLIP)}


def scan_shapes(folder: Path) -> Dict[str, Shapes]:
    """A :class:`ScanModel` of the folder's ``config.json``."""
    import torch

    from capeval.models.scan.configuration import ScanConfig
    from capeval.models.scan.modeling import ScanModel

    config = ScanConfig.load(folder)
    with torch.device("meta"):
        return {WEIGHTS_NAME: module_shapes(ScanModel(config))}


def vilbert_shapes(folder: Path) -> Dict[str, Shapes]:
    """A :class:`VilbertModel` of the folder's ``config.json``."""
    import torch

    from capeval.models.vilbert.configuration import VilbertConfig
    from capeval.models.vilbert.modeling import VilbertModel

    config = VilbertConfig.load(folder)
    with torch.device("meta"):
        return {WEIGHTS_NAME: module_shapes(VilbertModel(config))}


def detector_shapes(folder: Path) -> Dict[str, Shapes]:
    """The region detector the folder's ``config.json`` names by its ``model_type``."""
    import torch

    from capeval.models.regions.detectors import build_detector

    with torch.device("meta"):
        return {WEIGHTS_NAME: module_shapes(build_detector(folder)[1])}


def bridge_shapes(folder: Path) -> Dict[str, Shapes]:
    """A :class:`BridgeModel` of the folder's ``config.json`` on a CLIP model of its backbone's config (a local
    folder, or the hub model at the config's revision, else capeval's pinned one)."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    from capeval.hub import pinned_revision
    from capeval.models.bridge.configuration import BridgeConfig
    from capeval.models.bridge.modeling import BridgeModel

    config = BridgeConfig.load(folder)
    backbone = CLIPConfig.from_pretrained(config.backbone,
                                          revision=pinned_revision(config.backbone, config.backbone_revision))
    with torch.device("meta"):
        return {WEIGHTS_NAME: module_shapes(BridgeModel(config, CLIPModel(backbone)))}


POLOS_ENCODER_ARCHITECTURE_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                   "num_attention_heads", "intermediate_size", "hidden_act", "max_position_embeddings",
                                   "type_vocab_size", "layer_norm_eps", "pad_token_id", "bos_token_id",
                                   "eos_token_id")
"""The values of the Polos sentence encoder's ``config.json`` that decide its computation: the card folder's copy is
the architecture ``hub_models/generate_configs.py`` writes, a conversion copies the SimCSE model's own file."""

KINDS: Dict[str, FolderKind] = {
    CLIP_FOLDER: FolderKind("CLIP", "conversion/convert_clip.py", (WEIGHTS_NAME,), clip_folder_shapes),
    "capeval.models.polos.loading:model_folder": FolderKind(
        "Polos", "conversion/convert_polos.py", (WEIGHTS_NAME, f"encoder/{WEIGHTS_NAME}", f"clip/{WEIGHTS_NAME}"), polos_shapes,
        from_weights_folder=("encoder/vocab.json", "encoder/merges.txt"),
        compared_keys={f"encoder/{CONFIG_NAME}": POLOS_ENCODER_ARCHITECTURE_KEYS}),
    "capeval.models.scan.loading:model_folder": FolderKind("SCAN", "conversion/convert_scan.py", (WEIGHTS_NAME,),
                                                           scan_shapes),
    "capeval.models.vilbert.loading:model_folder": FolderKind(
        "ViLBERT", "conversion/convert_vilbert.py", (WEIGHTS_NAME,), vilbert_shapes, from_weights_folder=("vocab.txt",)),
    "capeval.models.regions.detectors:detector_folder": FolderKind(
        "region detector", "conversion/convert_regions.py", (WEIGHTS_NAME,), detector_shapes),
    "capeval.models.bridge.loading:model_folder": FolderKind(
        "BRIDGE", "capeval train bridge", (WEIGHTS_NAME,), bridge_shapes, from_weights_folder=(CONFIG_NAME, "run_card.json")),
}
""":attr:`ModelSource.folder` -> the kind of folder capeval publishes for the models resolved by it."""


def folder_kind(repo_id: str) -> Optional[FolderKind]:
    """The kind of folder of registry model ``repo_id``; ``None`` for a model capeval does not know or does not
    publish (one its authors publish on the hub)."""
    source = SOURCES.get(repo_id)
    return KINDS.get(source.folder) if source is not None else None
