"""Tiny random-init CLIP models in the original OpenAI (clip-anytorch) and OpenCLIP formats, and their checkpoints.

Every builder is deterministic (fixed seed, private RNG state). LayerNorm weights, all biases and the embeddings
are randomised too, so that a conversion that drops or swaps any of them changes the outputs.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from pathlib import Path

import clip.model
import open_clip.model
import torch
from torch import nn

from conversion.convert_clip import OPENAI_TORCHSCRIPT_SCALARS, convert_checkpoint

SEED = 1234
EMBED_DIM = 64
IMAGE_SIZE = 224
PATCH_SIZE = 32
WIDTH = 128
LAYERS = 2
HEADS = WIDTH // 64
VOCAB_SIZE = 49408
CONTEXT_LENGTH = 77


@dataclass(frozen=True)
class TinyClip:
    """An original-format tiny CLIP model, its state dict file and the converted ``CLIPModel`` folder."""

    model: nn.Module
    checkpoint: Path
    hf_dir: Path
    arch: str


def _randomise_norms_and_biases(model: nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(1.0 + 0.2 * torch.randn(module.weight.shape, generator=generator))
        for name, parameter in model.named_parameters():
            if "embedding" in name:
                parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))


def _finish(model: nn.Module, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed + 1)
    _randomise_norms_and_biases(model, generator)
    return model.float().eval()


def build_tiny_openai_clip(seed: int = SEED) -> clip.model.CLIP:
    """A tiny clip-anytorch ``CLIP`` (QuickGELU, OpenAI key names), fp32, eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = clip.model.CLIP(
            embed_dim=EMBED_DIM, image_resolution=IMAGE_SIZE, vision_layers=LAYERS, vision_width=WIDTH,
            vision_patch_size=PATCH_SIZE, context_length=CONTEXT_LENGTH, vocab_size=VOCAB_SIZE,
            transformer_width=WIDTH, transformer_heads=HEADS, transformer_layers=LAYERS,
        )
    return _finish(model, seed)


def build_tiny_openclip(seed: int = SEED) -> open_clip.model.CLIP:
    """A tiny open_clip ``CLIP`` (exact GELU, OpenCLIP key names), fp32, eval mode."""
    vision_cfg = open_clip.model.CLIPVisionCfg(layers=LAYERS, width=WIDTH, head_width=64, patch_size=PATCH_SIZE,
                                               image_size=IMAGE_SIZE)
    text_cfg = open_clip.model.CLIPTextCfg(context_length=CONTEXT_LENGTH, vocab_size=VOCAB_SIZE, width=WIDTH,
                                           heads=HEADS, layers=LAYERS)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = open_clip.model.CLIP(EMBED_DIM, vision_cfg, text_cfg, quick_gelu=False)
    return _finish(model, seed)


def save_state_dict(model: nn.Module, path: Path) -> Path:
    """Save the plain state dict (``torch.save``)."""
    torch.save(model.state_dict(), path)
    return path


def save_pacs_checkpoint(model: nn.Module, path: Path, module_prefix: bool = False) -> Path:
    """Save a PAC-S style checkpoint ``{"state_dict": ...}``, optionally with DataParallel's ``module.`` prefix."""
    prefix = "module." if module_prefix else ""
    torch.save({"state_dict": {prefix + key: value for key, value in model.state_dict().items()}}, path)
    return path


def save_torchscript_archive(model: clip.model.CLIP, path: Path) -> Path:
    """Save a traced TorchScript archive carrying OpenAI's scalar entries (input_resolution, ...), like the
    archives ``clip.load`` downloads."""
    traced_source = copy.deepcopy(model)
    scalars = {"input_resolution": IMAGE_SIZE, "context_length": CONTEXT_LENGTH, "vocab_size": VOCAB_SIZE}
    for name in OPENAI_TORCHSCRIPT_SCALARS:
        traced_source.__dict__.pop(name, None)  # clip.model.CLIP keeps context_length / vocab_size as plain ints
        traced_source.register_buffer(name, torch.tensor(scalars[name]))
    example_image = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    example_text = torch.zeros(1, CONTEXT_LENGTH, dtype=torch.long)
    example_text[0, 0], example_text[0, 1] = 49406, 49407
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(traced_source, (example_image, example_text), check_trace=False)
        torch.jit.save(traced, str(path))
    return path


def make_tiny_clip(arch: str, directory: Path, fp16_values: bool = False) -> TinyClip:
    """Build the tiny model of ``arch`` ("openai" / "openclip"), save its state dict and convert it. ``fp16_values``:
    every weight rounded to an fp16 value, as in the released OpenAI checkpoints (stored in fp16)."""
    model = build_tiny_openai_clip() if arch == "openai" else build_tiny_openclip()
    if fp16_values:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.copy_(parameter.half().float())
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = save_state_dict(model, directory / f"tiny_{arch}.pt")
    hf_dir = convert_checkpoint(checkpoint, directory / f"tiny_{arch}_hf", arch=arch)
    return TinyClip(model=model, checkpoint=checkpoint, hf_dir=hf_dir, arch=arch)
