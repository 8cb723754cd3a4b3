"""The reference-style peers: the CLIPScore reference code's way of scoring, per pair (batch 1) and batched as
``clipscore.py``'s loop (DataLoaders, no de-duplication, captions tokenised to 77 tokens, its NumPy arithmetic)."""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Sequence, Tuple

import numpy as np
import torch
from PIL import Image

from _measurement import timed
from _models import random_vit_b32_openai
from _throughput.context import ChildContext, measured
from _throughput.workloads import WARM_UP_CAPTION, Workload, warm_up_image
from capeval.functional.clipscore import clip_s
from capeval.scorers.clipscore import CLIPScore


def _reference_style_parts(model_dir: Path) -> tuple:
    """The HF model, the reference torchvision transform and OpenAI's ``clip.tokenize``, as the reference code has."""
    from torchvision import transforms
    from transformers import CLIPModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clip-anytorch's pkg_resources deprecation notice
        import clip

    model = CLIPModel.from_pretrained(model_dir).eval()
    transform = transforms.Compose([
        transforms.Resize(224, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(224),
        lambda image: image.convert("RGB"),
        transforms.ToTensor(),
        transforms.Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    ])
    return model, transform, clip.tokenize


def _encode(model: torch.nn.Module, pixels: torch.Tensor, tokens: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        images = model.get_image_features(pixel_values=pixels).pooler_output
        texts = model.get_text_features(input_ids=tokens).pooler_output
    return images.double().numpy(), texts.double().numpy()


def run_per_pair(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """The reference cost per pair: open, transform and encode the pair's image, tokenise (77 tokens) and encode its
    caption, batch size 1."""
    start = time.perf_counter()
    model, transform, tokenize = _reference_style_parts(context.model_dir)

    def pair_score(image: Image.Image, caption: str) -> float:
        images, texts = _encode(model, transform(image).unsqueeze(0), tokenize([CLIPScore.prompt + caption],
                                                                                 truncate=True))
        return float(clip_s(images, texts, CLIPScore.weight)[0])

    pair_score(warm_up_image(), WARM_UP_CAPTION)
    load_seconds = time.perf_counter() - start

    def score() -> float:
        total = 0.0
        for path, caption in zip(workload.images, workload.candidates):
            with Image.open(path) as image:
                total += pair_score(image, caption)
        return total / len(workload)

    return measured(timed(score), load_seconds)


class _PathDataset(torch.utils.data.Dataset):
    """One transformed image per pair (no de-duplication), as the reference code's image dataset."""

    def __init__(self, paths: Sequence[str], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.paths = paths
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        with Image.open(self.paths[index]) as image:
            return self.transform(image)


def _reference_clip_s(images: np.ndarray, candidates: np.ndarray, weight: float = CLIPScore.weight) -> np.ndarray:
    """``clipscore.py``'s ``get_clip_score`` arithmetic (NumPy >= 1.21 branch), in the features' own dtype."""
    images = images / np.sqrt(np.sum(images ** 2, axis=1, keepdims=True))
    candidates = candidates / np.sqrt(np.sum(candidates ** 2, axis=1, keepdims=True))
    return weight * np.clip(np.sum(images * candidates, axis=1), 0, None)


class _TokenisedCaptions(torch.utils.data.Dataset):
    """``clipscore.py``'s caption dataset: prompt, then ``clip.tokenize`` to 77 tokens (truncating)."""

    def __init__(self, captions: Sequence[str], tokenize: Callable[..., torch.Tensor]) -> None:
        self.captions, self.tokenize = captions, tokenize

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokenize(CLIPScore.prompt + self.captions[index], truncate=True).squeeze()


def run_reference_batched(context: ChildContext, workload: Workload) -> Dict[str, Any]:
    """``clipscore.py``'s loop without de-duplication: every pair's image through a DataLoader (8 workers, 64 per
    batch, its torchvision transform) into ``clip``'s model (fp16 weights on CUDA, as ``clip.load`` builds it; fp32
    on the CPU), captions through a DataLoader (8 workers, 256 per batch, ``clip.tokenize`` to 77 tokens), then its
    NumPy arithmetic in the features' dtype."""
    from clip.model import convert_weights

    start = time.perf_counter()
    _, transform, tokenize = _reference_style_parts(context.model_dir)
    device = torch.device(context.device)
    model = random_vit_b32_openai()
    if device.type == "cuda":
        convert_weights(model)  # what clip.load does on CUDA (and model.float() on the CPU)
    model = model.to(device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    with torch.no_grad():
        model.encode_image(transform(warm_up_image()).unsqueeze(0).to(device).to(dtype))
        model.encode_text(tokenize([CLIPScore.prompt + WARM_UP_CAPTION]).to(device))
    load_seconds = time.perf_counter() - start

    def score() -> float:
        images = torch.utils.data.DataLoader(_PathDataset(workload.images, transform), batch_size=64, num_workers=8,
                                             shuffle=False)
        captions = torch.utils.data.DataLoader(_TokenisedCaptions(workload.candidates, tokenize), batch_size=256,
                                               num_workers=8, shuffle=False)
        image_rows, text_rows = [], []
        with torch.no_grad():
            for pixels in images:
                image_rows.append(model.encode_image(pixels.to(device).to(dtype)).cpu().numpy())
            for tokens in captions:
                text_rows.append(model.encode_text(tokens.to(device)).cpu().numpy())
        per = _reference_clip_s(np.concatenate(image_rows), np.concatenate(text_rows))
        np.save(context.scores_dir / f"{context.peer}.npy", per.astype(np.float64))
        return float(np.mean(per))

    return measured(timed(score), load_seconds)
