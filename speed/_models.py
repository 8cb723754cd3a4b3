"""A full-size OpenAI CLIP ViT-B/32 with random weights, as a converted model folder, for the speed scripts.

Random weights cost exactly what the real ones cost (same shapes, same operations), so timings measured with this
model hold for ``openai/clip-vit-base-patch32`` and the PAC-S ViT-B/32 backbone. The folder is built once under a
work directory and reused; nothing is downloaded and nothing is written into the repository.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from conversion.convert_clip import convert_checkpoint  # noqa: E402

VIT_B_32_ARGS = (512, 224, 12, 768, 32, 77, 49408, 512, 8, 12)
"""``clip.model.CLIP`` arguments of ViT-B/32: embed dim, image size, vision layers, vision width, patch size,
context length, vocabulary size, text width, text heads, text layers."""

SEED = 0


def random_vit_b32_openai() -> torch.nn.Module:
    """The seeded random-init ``clip.model.CLIP`` ViT-B/32 (fp32, eval mode), every weight an fp16 value as in the
    released OpenAI checkpoints (so that ``clip.load``'s fp16 conversion loses nothing, as with the real weights)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clip-anytorch's pkg_resources deprecation notice
        from clip.model import CLIP
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = CLIP(*VIT_B_32_ARGS).float().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.half().float())
    return model


def random_vit_b32_folder(work_dir: Path) -> Path:
    """The converted folder of :func:`random_vit_b32_openai` under ``work_dir`` (built on first use)."""
    folder = work_dir / f"random-clip-vit-b-32-seed{SEED}-fp16-values"
    if (folder / "model.safetensors").is_file() and (folder / "tokenizer_config.json").is_file():
        return folder
    model = random_vit_b32_openai()
    work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = work_dir / f"random-clip-vit-b-32-seed{SEED}.pt"
    torch.save(model.state_dict(), checkpoint)
    convert_checkpoint(checkpoint, folder, arch="openai", model_name="ViT-B-32")
    checkpoint.unlink()
    return folder
