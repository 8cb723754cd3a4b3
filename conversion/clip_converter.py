"""The conversion of an original CLIP ViT checkpoint (OpenAI or OpenCLIP format) into a transformers ``CLIPModel``
folder; its command line is ``python -m conversion.convert_clip``, which also holds the choices it offers.

Inputs read (see ``load_original_state_dict``):

* an OpenAI CLIP state dict saved with ``torch.save`` (``visual.conv1.weight``, ``visual.proj``,
  ``transformer.resblocks.N.attn.in_proj_weight``, ``token_embedding.weight``, ``text_projection``, ...);
* an OpenAI TorchScript archive (the files ``clip.load`` downloads), read with ``torch.jit.load``;
* a PAC-S checkpoint ``{"state_dict": {...}}`` in OpenAI or OpenCLIP key names, optionally ``module.``-prefixed;
* an OpenCLIP ``CLIP`` state dict (same key names as OpenAI's for the plain ViT towers);
* a PAC-S++ checkpoint (aimagelab/pacscore ``models/clip_lora``): an OpenAI CLIP ViT ``{"state_dict": ...}`` that
  also holds LoRA factors; ``merge_lora`` folds them into plain CLIP weights the way the reference computes.

The output folder holds ``model.safetensors`` + ``config.json`` (``CLIPModel``), ``preprocessor_config.json``
(``CLIPImageProcessor``: bicubic shortest-side resize and centre crop to the image size, mean/std of the backbone)
and CLIP tokenizer files built from OpenAI's BPE merges file exactly the way OpenAI's ``SimpleTokenizer`` builds
its vocabulary.
"""
from __future__ import annotations

import gzip
import json
import pickle
import re
import warnings
import zipfile
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import torch
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

from capeval.fetch import reading
from capeval.hub import save_weights
from conversion.convert_clip import (ARCHES, DEFAULT_ARCH_FOR_MODEL, DEFAULT_NORMALIZATION, KNOWN_MODELS, LORA_MODES,
                                     NORMALIZATIONS)

HIDDEN_ACT = {"openai": "quick_gelu", "openclip": "gelu"}

HEAD_WIDTH = 64
START_TOKEN = "<|startoftext|>"
END_TOKEN = "<|endoftext|>"
BOS_TOKEN_ID = 49406
EOS_TOKEN_ID = 49407
N_BPE_MERGES = 49152 - 256 - 2

# Entries of original state dicts that are not weights and are skipped:
# scalar ints that OpenAI's TorchScript archives store, and the constant causal text mask buffer (``attn_mask``)
# that some CLIP implementations save.
OPENAI_TORCHSCRIPT_SCALARS = ("input_resolution", "context_length", "vocab_size")
NON_WEIGHT_KEYS = frozenset(OPENAI_TORCHSCRIPT_SCALARS + ("attn_mask",))

_TOP_LEVEL_KEYS = {
    "visual.class_embedding": "vision_model.embeddings.class_embedding",
    "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
    "visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
    "visual.ln_pre.weight": "vision_model.pre_layrnorm.weight",
    "visual.ln_pre.bias": "vision_model.pre_layrnorm.bias",
    "visual.ln_post.weight": "vision_model.post_layernorm.weight",
    "visual.ln_post.bias": "vision_model.post_layernorm.bias",
    "visual.proj": "visual_projection.weight",
    "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
    "positional_embedding": "text_model.embeddings.position_embedding.weight",
    "ln_final.weight": "text_model.final_layer_norm.weight",
    "ln_final.bias": "text_model.final_layer_norm.bias",
    "text_projection": "text_projection.weight",
    "logit_scale": "logit_scale",
}
_TRANSPOSED_KEYS = frozenset({"visual.proj", "text_projection"})
_BLOCK_PARTS = {
    "ln_1": "layer_norm1",
    "ln_2": "layer_norm2",
    "mlp.c_fc": "mlp.fc1",
    "mlp.c_proj": "mlp.fc2",
    "attn.out_proj": "self_attn.out_proj",
}
_TOWER_PREFIXES = {"visual.transformer.resblocks.": "vision_model.encoder.layers.",
                   "transformer.resblocks.": "text_model.encoder.layers."}
_BLOCK_KEY = re.compile(r"^(visual\.transformer\.resblocks\.|transformer\.resblocks\.)(\d+)\.(.+)\.(weight|bias)$")
_IN_PROJ_KEY = re.compile(r"^(visual\.transformer\.resblocks\.|transformer\.resblocks\.)(\d+)\.attn\.in_proj_(weight|bias)$")
# PAC-S++ LoRA (aimagelab/pacscore ``models/custom_loralib``): factor names, the layers that carry them, and the
# ``lora_alpha`` all of them use (the reference's default; it is not stored in the checkpoint).
LORA_MARKER = "lora_"
LORA_ALPHA = 1
_LORA_BLOCK = r"(?:visual\.)?transformer\.resblocks\.\d+\."
_CONV_LORA_WEIGHT = re.compile(r"^visual\.conv1\.weight$")
_ATTENTION_LORA_WEIGHT = re.compile(rf"^{_LORA_BLOCK}attn\.(?:in_proj_weight|out_proj\.weight)$")
_MLP_LORA_WEIGHT = re.compile(rf"^{_LORA_BLOCK}mlp\.c_(?:fc|proj)\.weight$")


class CheckpointError(ValueError):
    """The checkpoint cannot be read or does not hold a complete CLIP ViT model."""


def _is_torchscript_archive(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("/constants.pkl") for name in archive.namelist())


def load_original_state_dict(checkpoint: str | Path) -> dict[str, torch.Tensor]:
    """Read the CLIP state dict from a ``torch.save`` file (tensors only) or an OpenAI TorchScript archive.

    ``torch.load`` runs with ``weights_only=True``, so files holding arbitrary pickled objects are refused;
    TorchScript archives go through ``torch.jit.load``, whose deserializer builds only TorchScript types.
    A ``{"state_dict": ...}`` wrapper (PAC-S) is unwrapped and a ``module.`` prefix on every key is removed.
    """
    path = Path(checkpoint)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} is not a file")
    if _is_torchscript_archive(path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit deprecation notice
            return dict(torch.jit.load(str(path), map_location="cpu").state_dict())
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise CheckpointError(
            f"checkpoint {str(path)!r} refused: weights_only=True cannot read it (it holds objects other than "
            f"tensors and plain containers, or is not a torch.save file): {error}"
        ) from error
    if isinstance(loaded, Mapping) and "state_dict" in loaded:
        loaded = loaded["state_dict"]
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"checkpoint {str(path)!r} holds a {type(loaded).__name__}, not a state dict")
    not_tensors = sorted(str(key) for key, value in loaded.items() if not isinstance(value, torch.Tensor))
    if not_tensors:
        raise CheckpointError(f"checkpoint {str(path)!r}: entries that are not tensors: {not_tensors}")
    state_dict = {str(key): value for key, value in loaded.items()}
    if state_dict and all(key.startswith("module.") for key in state_dict):
        state_dict = {key[len("module."):]: value for key, value in state_dict.items()}
    return state_dict


def lora_factor_names(state_dict: Mapping[str, torch.Tensor]) -> list[str]:
    """The keys of ``state_dict`` that are LoRA factors (contain ``lora_``, as loralib names them), sorted."""
    return sorted(key for key in state_dict if LORA_MARKER in key)


def _lora_factor_pair(weight_key: str) -> tuple[str, str]:
    """Names of the (A, B) factors of a weight: ``<module>.lora_A`` for a module's ``weight``, and
    ``in_proj_weight_lora_A`` for the attention's ``in_proj_weight``."""
    stem = weight_key[: -len("weight")] if weight_key.endswith(".weight") else f"{weight_key}_"
    return f"{stem}{LORA_MARKER}A", f"{stem}{LORA_MARKER}B"


def _lora_rank(weight: torch.Tensor, factor_a: torch.Tensor, factor_b: torch.Tensor, conv: bool) -> int | None:
    """The LoRA rank the factor shapes give for ``weight``, or None if they do not fit it.

    Linear layers: A (r, in), B (out, r). loralib's ``Conv2d`` (k x k kernel): A (r k, in k), B (out k, r k).
    """
    if factor_a.dim() != 2 or factor_b.dim() != 2:
        return None
    if conv:
        if weight.dim() != 4 or weight.shape[2] != weight.shape[3]:
            return None
        kernel = weight.shape[-1]
        rank, remainder = divmod(factor_a.shape[0], kernel)
        expected_a, expected_b = (rank * kernel, weight.shape[1] * kernel), (weight.shape[0] * kernel, rank * kernel)
    else:
        if weight.dim() != 2:
            return None
        rank, remainder = factor_a.shape[0], 0
        expected_a, expected_b = (rank, weight.shape[1]), (weight.shape[0], rank)
    if remainder or rank < 1 or tuple(factor_a.shape) != expected_a or tuple(factor_b.shape) != expected_b:
        return None
    return rank


def merge_lora(state_dict: Mapping[str, torch.Tensor], mode: str = "merge") -> dict[str, torch.Tensor]:
    """A plain CLIP state dict: ``state_dict`` unchanged if it holds no LoRA factors, else its PAC-S++ LoRA merged.

    PAC-S++ (``compute_correlations_pac++.py``) builds ``clip_lora`` with ``build_model(..., lora=4)``, whose last
    step is ``eval()``, then ``load_state_dict(checkpoint["state_dict"])`` (strict) and scores. Every factor pair
    has rank r (read from the shapes; r = 4 in the released files) and scaling ``LORA_ALPHA / r``. What the
    reference forward computes, as merged weights:

    * ``visual.conv1.weight`` + ``(lora_B @ lora_A).view(weight.shape) * scaling``: loralib's ``Conv2d`` merges
      only in its own ``eval()``, which ``Module.eval()`` of the parent never calls, so its forward adds the update;
    * every ``attn.in_proj_weight`` + ``in_proj_weight_lora_B @ in_proj_weight_lora_A * scaling`` (before the
      q/k/v split; ``in_proj_bias`` unchanged) and ``attn.out_proj.weight`` + ``lora_B @ lora_A * scaling``: the
      LoRA attention adds both updates inside its attention function;
    * every ``mlp.c_fc.weight`` and ``mlp.c_proj.weight`` as stored, with no update: these loralib ``Linear``
      layers (``merge_weights=True``) are marked merged by the ``eval()`` inside ``build_model``, which runs before
      the checkpoint is loaded (when ``lora_B`` is still zero); loading does not reset the flag, so the forward
      never adds their factors.

    Every factor is then dropped. Each update is computed in float64 from the stored values and the merged weight
    rounded to float32 once (float32 is what the reference runs in, after its ``model.float()``): barring
    vanishingly rare ties, the result is the float32 nearest to the exact ``W + scaling * B @ A`` whatever the
    BLAS summation order, which a float32 product would not be, so re-converting a checkpoint (as
    ``conversion/publish.py`` does to check weights) gives the same bytes on any machine. ``mode="refuse"`` raises
    instead of merging. Raises ``CheckpointError`` listing every unexpected or missing factor, every factor pair
    whose shapes do not fit its weight, and every weight whose rank differs from the most common one.
    """
    if mode not in LORA_MODES:
        raise CheckpointError(f"lora mode must be one of {LORA_MODES}, got {mode!r}")
    factor_names = lora_factor_names(state_dict)
    if not factor_names:
        return dict(state_dict)
    if mode == "refuse":
        raise CheckpointError(f"checkpoint holds {len(factor_names)} LoRA factors (e.g. {factor_names[:3]}) and "
                              "lora='refuse'")
    targets = _lora_targets(state_dict)
    _check_lora_factors(factor_names, targets)
    scaling = LORA_ALPHA / _lora_common_rank(state_dict, targets)
    merged = {key: value for key, value in state_dict.items() if LORA_MARKER not in key}
    for key, (_, applied) in targets.items():
        if applied:
            name_a, name_b = _lora_factor_pair(key)
            update = state_dict[name_b].double() @ state_dict[name_a].double()
            weight = state_dict[key]
            merged[key] = (weight.double() + update.reshape(weight.shape) * scaling).float()
    return merged


def _lora_targets(state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[bool, bool]]:
    """Weight key -> (is the patch convolution, is the update applied) of every weight PAC-S++'s LoRA CLIP adapts."""
    targets: dict[str, tuple[bool, bool]] = {}
    for key in state_dict:
        if _CONV_LORA_WEIGHT.match(key):
            targets[key] = (True, True)
        elif _ATTENTION_LORA_WEIGHT.match(key):
            targets[key] = (False, True)
        elif _MLP_LORA_WEIGHT.match(key):
            targets[key] = (False, False)
    return targets


def _check_lora_factors(factor_names: Sequence[str], targets: Mapping[str, tuple[bool, bool]]) -> None:
    """Refuse factors that no target weight has, and target weights without their two factors."""
    expected = {name for key in targets for name in _lora_factor_pair(key)}
    unexpected = [name for name in factor_names if name not in expected]
    missing = sorted(expected.difference(factor_names))
    if unexpected or missing:
        raise CheckpointError(
            "LoRA factors do not match PAC-S++'s LoRA CLIP (visual.conv1 and every block's attn.in_proj_weight, "
            f"attn.out_proj, mlp.c_fc, mlp.c_proj): unexpected factors {unexpected}, missing factors {missing}")


def _lora_common_rank(state_dict: Mapping[str, torch.Tensor], targets: Mapping[str, tuple[bool, bool]]) -> int:
    """The one rank of every factor pair; refuses pairs whose shapes do not fit their weight, and mixed ranks."""
    ranks: dict[str, int] = {}
    misfits = []
    for key, (conv, _) in targets.items():
        name_a, name_b = _lora_factor_pair(key)
        rank = _lora_rank(state_dict[key], state_dict[name_a], state_dict[name_b], conv)
        if rank is None:
            misfits.append(f"{name_a} {tuple(state_dict[name_a].shape)}, {name_b} {tuple(state_dict[name_b].shape)} "
                           f"for {key} {tuple(state_dict[key].shape)}")
        else:
            ranks[key] = rank
    if misfits:
        raise CheckpointError(f"LoRA factor shapes do not fit their weights: {misfits}")
    counts = Counter(ranks.values())
    rank = counts.most_common(1)[0][0]
    if len(counts) > 1:
        others = {key: other for key, other in ranks.items() if other != rank}
        raise CheckpointError(f"LoRA factors of different ranks: {counts[rank]} weights have rank {rank}, "
                              f"these others: {others}")
    return rank


def _require(state_dict: Mapping[str, torch.Tensor], keys: Sequence[str]) -> None:
    missing = [key for key in keys if key not in state_dict]
    if missing:
        if "visual.proj" in missing and "visual.attnpool.c_proj.weight" in state_dict:
            raise CheckpointError("ResNet CLIP checkpoints are not supported, only ViT ones")
        raise CheckpointError(f"checkpoint is missing keys: {missing}")


def _count_blocks(state_dict: Mapping[str, torch.Tensor], prefix: str) -> int:
    indices = {int(match.group(2)) for key in state_dict
               if (match := _BLOCK_KEY.match(key)) is not None and match.group(1) == prefix}
    if not indices:
        raise CheckpointError(f"checkpoint has no transformer blocks under {prefix!r}")
    return max(indices) + 1


def _heads(width: int, tower: str) -> int:
    if width % HEAD_WIDTH != 0:
        raise CheckpointError(f"{tower} width {width} is not a multiple of the head width {HEAD_WIDTH}")
    return width // HEAD_WIDTH


def clip_config_from_state_dict(state_dict: Mapping[str, torch.Tensor], arch: str) -> CLIPConfig:
    """Infer the ``CLIPConfig`` of an original CLIP ViT state dict from its tensor shapes (heads = width // 64)."""
    if arch not in ARCHES:
        raise CheckpointError(f"arch must be one of {ARCHES}, got {arch!r}")
    _require(state_dict, ["visual.conv1.weight", "visual.positional_embedding", "visual.proj",
                          "visual.transformer.resblocks.0.mlp.c_fc.weight", "transformer.resblocks.0.mlp.c_fc.weight",
                          "token_embedding.weight", "positional_embedding", "ln_final.weight", "text_projection"])
    patch_embedding = state_dict["visual.conv1.weight"]
    vision_width, num_channels, patch_size = (patch_embedding.shape[0], patch_embedding.shape[1],
                                              patch_embedding.shape[-1])
    n_patches = state_dict["visual.positional_embedding"].shape[0] - 1
    grid_size = round(n_patches ** 0.5)
    if grid_size * grid_size != n_patches:
        raise CheckpointError(f"visual.positional_embedding has {n_patches} patch positions, not a square grid")
    projection_dim = state_dict["text_projection"].shape[1]
    if state_dict["visual.proj"].shape[1] != projection_dim:
        raise CheckpointError(f"visual.proj projects to {state_dict['visual.proj'].shape[1]} dims, "
                              f"text_projection to {projection_dim}")
    text_width = state_dict["ln_final.weight"].shape[0]
    vision_config = {
        "hidden_size": vision_width,
        "intermediate_size": state_dict["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        "num_hidden_layers": _count_blocks(state_dict, "visual.transformer.resblocks."),
        "num_attention_heads": _heads(vision_width, "vision"),
        "num_channels": num_channels,
        "image_size": patch_size * grid_size,
        "patch_size": patch_size,
        "projection_dim": projection_dim,
        "hidden_act": HIDDEN_ACT[arch],
        "layer_norm_eps": 1e-5,
    }
    text_config = {
        "vocab_size": state_dict["token_embedding.weight"].shape[0],
        "hidden_size": text_width,
        "intermediate_size": state_dict["transformer.resblocks.0.mlp.c_fc.weight"].shape[0],
        "num_hidden_layers": _count_blocks(state_dict, "transformer.resblocks."),
        "num_attention_heads": _heads(text_width, "text"),
        "max_position_embeddings": state_dict["positional_embedding"].shape[0],
        "projection_dim": projection_dim,
        "hidden_act": HIDDEN_ACT[arch],
        "layer_norm_eps": 1e-5,
        "bos_token_id": BOS_TOKEN_ID,
        # eos != 2 selects transformers' "first end token" pooling, which is OpenAI's argmax pooling for
        # clip.tokenize outputs; padding with the end token (as the tokenizer does) keeps that position.
        "eos_token_id": EOS_TOKEN_ID,
        "pad_token_id": EOS_TOKEN_ID,
    }
    return CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=projection_dim)


def original_key_names(config: CLIPConfig) -> list[str]:
    """Every weight key an original CLIP ViT state dict of this configuration holds."""
    keys = list(_TOP_LEVEL_KEYS)
    for prefix, n_layers in (("visual.transformer.resblocks.", config.vision_config.num_hidden_layers),
                             ("transformer.resblocks.", config.text_config.num_hidden_layers)):
        for index in range(n_layers):
            keys += [f"{prefix}{index}.attn.in_proj_weight", f"{prefix}{index}.attn.in_proj_bias"]
            keys += [f"{prefix}{index}.{part}.{kind}" for part in _BLOCK_PARTS for kind in ("weight", "bias")]
    return keys


def _convert_key(key: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    if key in _TOP_LEVEL_KEYS:
        return {_TOP_LEVEL_KEYS[key]: tensor.t().contiguous() if key in _TRANSPOSED_KEYS else tensor}
    in_proj = _IN_PROJ_KEY.match(key)
    if in_proj is not None:
        prefix = f"{_TOWER_PREFIXES[in_proj.group(1)]}{in_proj.group(2)}.self_attn."
        query, key_, value = tensor.chunk(3, dim=0)
        return {f"{prefix}{name}_proj.{in_proj.group(3)}": part.clone()
                for name, part in (("q", query), ("k", key_), ("v", value))}
    block = _BLOCK_KEY.match(key)
    if block is None or block.group(3) not in _BLOCK_PARTS:
        raise CheckpointError(f"no mapping for key {key!r}")
    tower, index, part, kind = block.groups()
    return {f"{_TOWER_PREFIXES[tower]}{index}.{_BLOCK_PARTS[part]}.{kind}": tensor}


def convert_state_dict(state_dict: Mapping[str, torch.Tensor], config: CLIPConfig) -> dict[str, torch.Tensor]:
    """Map an original CLIP ViT state dict to ``CLIPModel`` key names and layouts, checking keys and shapes.

    Raises ``CheckpointError`` listing every missing and unexpected key (skipping ``NON_WEIGHT_KEYS``), or every
    tensor whose shape disagrees with ``config``.
    """
    expected = original_key_names(config)
    expected_set = set(expected)
    missing = [key for key in expected if key not in state_dict]
    unexpected = sorted(key for key in state_dict if key not in expected_set and key not in NON_WEIGHT_KEYS)
    if missing or unexpected:
        raise CheckpointError(f"checkpoint does not match a CLIP ViT model: missing keys {missing}, "
                              f"unexpected keys {unexpected}")
    with torch.device("meta"):
        target_shapes = {name: tensor.shape for name, tensor in CLIPModel(config).state_dict().items()}
    converted: dict[str, torch.Tensor] = {}
    wrong_shapes = []
    for key in expected:
        for name, tensor in _convert_key(key, state_dict[key]).items():
            if tensor.shape != target_shapes[name]:
                wrong_shapes.append(f"{key} -> {name}: {tuple(tensor.shape)} instead of {tuple(target_shapes[name])}")
            converted[name] = tensor
    if wrong_shapes:
        raise CheckpointError(f"tensor shapes disagree with the inferred configuration: {wrong_shapes}")
    if set(converted) != set(target_shapes):
        raise CheckpointError(f"conversion left CLIPModel weights unset: {sorted(set(target_shapes) - set(converted))}")
    return converted


def _known_model_name(config: CLIPConfig) -> str | None:
    dims = {"projection_dim": config.projection_dim, "vision_width": config.vision_config.hidden_size,
            "vision_layers": config.vision_config.num_hidden_layers, "patch_size": config.vision_config.patch_size,
            "image_size": config.vision_config.image_size, "text_width": config.text_config.hidden_size,
            "text_layers": config.text_config.num_hidden_layers}
    return next((name for name, known in KNOWN_MODELS.items() if known == dims), None)


def resolve_arch(state_dict: Mapping[str, torch.Tensor], arch: str | None, model_name: str | None) -> str:
    """Pick the architecture: ``openai`` for PAC-S++ LoRA checkpoints (the reference's ``clip_lora`` is OpenAI's
    QuickGELU CLIP; another ``arch`` is an error); else ``arch`` if given; ``openai`` for OpenAI TorchScript
    archives (they carry ``input_resolution``/``context_length``/``vocab_size``); else the default of
    ``model_name`` (ViT-B-32 -> openai, ViT-L-14 -> openclip). OpenAI and OpenCLIP ViT key names are identical,
    so otherwise it is an error."""
    if arch is not None and arch not in ARCHES:
        raise CheckpointError(f"arch must be one of {ARCHES}, got {arch!r}")
    if lora_factor_names(state_dict):
        if arch not in (None, "openai"):
            raise CheckpointError(f"the checkpoint holds LoRA factors: PAC-S++ LoRA models are OpenAI CLIP "
                                  f"(QuickGELU), so arch='openai', not arch={arch!r}")
        return "openai"
    if arch is not None:
        return arch
    if any(key in state_dict for key in OPENAI_TORCHSCRIPT_SCALARS):
        return "openai"
    if model_name is not None:
        if model_name not in DEFAULT_ARCH_FOR_MODEL:
            raise CheckpointError(f"model name must be one of {sorted(DEFAULT_ARCH_FOR_MODEL)}, got {model_name!r}")
        return DEFAULT_ARCH_FOR_MODEL[model_name]
    raise CheckpointError("OpenAI and OpenCLIP checkpoints have the same key names: pass arch='openai' (QuickGELU) "
                          "or arch='openclip' (exact GELU), or model_name=<backbone> (ViT-B-32 is openai, ViT-L-14 "
                          "openclip)")


def default_bpe_path() -> Path:
    """OpenAI's ``bpe_simple_vocab_16e6.txt.gz`` shipped inside the installed ``open_clip`` or ``clip`` package."""
    for package in ("open_clip", "clip"):
        try:
            module = __import__(package)
        except ImportError:
            continue
        candidate = Path(module.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
        if candidate.is_file():
            return candidate
    raise CheckpointError("bpe_simple_vocab_16e6.txt.gz not found in open_clip or clip; pass bpe_path=<file>")


def _byte_symbols() -> list[str]:
    """The 256 printable characters OpenAI's byte-level BPE uses for bytes 0..255, in vocabulary order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    remaining = [byte for byte in range(256) if byte not in printable]
    code_points = printable + [256 + offset for offset in range(len(remaining))]
    return [chr(code_point) for code_point in code_points]


def clip_bpe_vocabulary(bpe_path: str | Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """OpenAI's CLIP vocabulary and merges: byte symbols, byte symbols + ``</w>``, one token per merge, then
    the start and end tokens (49,408 entries for the standard merges file)."""
    lines = gzip.open(bpe_path, "rt", encoding="utf-8").read().split("\n")
    merges = [tuple(line.split()) for line in lines[1:1 + N_BPE_MERGES]]
    if len(merges) != N_BPE_MERGES or any(len(merge) != 2 for merge in merges):
        raise CheckpointError(f"{str(bpe_path)!r} is not OpenAI's BPE merges file")
    symbols = _byte_symbols()
    tokens = symbols + [symbol + "</w>" for symbol in symbols] + ["".join(merge) for merge in merges]
    tokens += [START_TOKEN, END_TOKEN]
    return {token: index for index, token in enumerate(tokens)}, merges


def write_tokenizer(out_dir: Path, bpe_path: str | Path, context_length: int) -> None:
    """Write vocab.json, merges.txt and the transformers CLIP tokenizer files into ``out_dir``."""
    with reading(bpe_path):
        vocab, merges = clip_bpe_vocabulary(bpe_path)
        if vocab[START_TOKEN] != BOS_TOKEN_ID or vocab[END_TOKEN] != EOS_TOKEN_ID:
            raise CheckpointError(f"{str(bpe_path)!r} gives start/end ids {vocab[START_TOKEN]}/{vocab[END_TOKEN]}, "
                                  f"not {BOS_TOKEN_ID}/{EOS_TOKEN_ID}")
    tokenizer = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=context_length)
    tokenizer.save_pretrained(str(out_dir))
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    merge_lines = ["#version: 0.2"] + [" ".join(merge) for merge in merges]
    (out_dir / "merges.txt").write_text("\n".join(merge_lines) + "\n", encoding="utf-8")
    special_tokens = {"bos_token": START_TOKEN, "eos_token": END_TOKEN, "unk_token": END_TOKEN, "pad_token": END_TOKEN}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_tokens, indent=2), encoding="utf-8")


def write_image_processor(out_dir: Path, image_size: int, normalization: str) -> None:
    """Write preprocessor_config.json: bicubic shortest-side resize, centre crop, the given normalisation."""
    mean, std = NORMALIZATIONS[normalization]
    processor = CLIPImageProcessor(
        do_resize=True, size={"shortest_edge": image_size}, resample=3,
        do_center_crop=True, crop_size={"height": image_size, "width": image_size},
        do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=list(mean), image_std=list(std),
        do_convert_rgb=True,
    )
    processor.save_pretrained(str(out_dir))


def convert_checkpoint(checkpoint: str | Path, out_dir: str | Path, arch: str | None = None,
                       model_name: str | None = None, bpe_path: str | Path | None = None,
                       normalization: str | None = None, lora: str = "merge") -> Path:
    """Convert ``checkpoint`` into a ``CLIPModel`` folder at ``out_dir`` and return that folder.

    ``arch`` ("openai": QuickGELU, "openclip": exact GELU) is resolved by ``resolve_arch``; ``model_name``
    (ViT-B-32 / ViT-L-14), when given, must match the checkpoint's dimensions. ``normalization`` ("openai" /
    "inception") defaults to the arch's: OpenAI constants for openai, 0.5 for openclip. ``lora`` is
    ``merge_lora``'s mode: "merge" folds PAC-S++ LoRA factors in when the checkpoint holds them, "refuse" stops.
    """
    with reading(checkpoint):
        original = load_original_state_dict(checkpoint)
    return convert_original_state_dict(original, out_dir, arch, model_name, bpe_path, normalization, lora)


def convert_original_state_dict(original: Mapping[str, torch.Tensor], out_dir: str | Path, arch: str | None = None,
                                model_name: str | None = None, bpe_path: str | Path | None = None,
                                normalization: str | None = None, lora: str = "merge") -> Path:
    """:func:`convert_checkpoint` of a state dict already read (OpenAI or OpenCLIP key names)."""
    state_dict = merge_lora(original, lora)
    resolved_arch = resolve_arch(original, arch, model_name)
    config = clip_config_from_state_dict(state_dict, resolved_arch)
    if model_name is not None and _known_model_name(config) != model_name:
        raise CheckpointError(f"checkpoint dimensions are not those of {model_name}")
    if normalization is not None and normalization not in NORMALIZATIONS:
        raise CheckpointError(f"normalization must be one of {sorted(NORMALIZATIONS)}, got {normalization!r}")
    weights = convert_state_dict(state_dict, config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config.architectures = ["CLIPModel"]
    config.dtype = "float32"
    config.save_pretrained(str(out))
    # float32 like PAC-S's model.float(); upcasting OpenAI's fp16 archives is exact
    save_weights({name: tensor.float().contiguous() for name, tensor in weights.items()}, out,
                 metadata={"format": "pt"})
    write_image_processor(out, config.vision_config.image_size,
                          normalization or DEFAULT_NORMALIZATION[resolved_arch])
    write_tokenizer(out, bpe_path or default_bpe_path(), config.text_config.max_position_embeddings)
    return out
