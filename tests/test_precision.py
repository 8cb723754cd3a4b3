"""``precision="fp16"``: the published CLIP-S arithmetic (fp16 model, fp16 NumPy scoring)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import List, Tuple

import clip
import numpy as np
import pytest
import torch
from PIL import Image

from capeval import CLIPScore
from capeval.inputs import validate_image
from capeval.models.clip.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from reference import PROMPT, reference_transform


@pytest.fixture(scope="module")
def flickr(capeval_test_data: Path) -> Tuple[List[Path], List[str], List[List[str]]]:
    """24 original Flickr8k images, 24 Flickr8k captions as candidates, and 1-3 of them as references per item."""
    folder = capeval_test_data / "flickr8k"
    paths = sorted((folder / "images_original").glob("*.jpg"))[:24]
    captions = [line.split("\t")[1] for line in (folder / "Flickr8k.token.txt").read_text().splitlines()[:400:7]][:24]
    references = [captions[(i + 3) % 24: (i + 3) % 24 + 1 + i % 3] or [captions[0]] for i in range(24)]
    return paths, captions, references


def _script_arithmetic(images: np.ndarray, candidates: np.ndarray, references: list, weight: float = 2.5):
    """The CLIPScore script's NumPy steps (numpy >= 1.21 branch), written out literally."""
    images = images / np.sqrt(np.sum(images ** 2, axis=1, keepdims=True))
    candidates = candidates / np.sqrt(np.sum(candidates ** 2, axis=1, keepdims=True))
    per = weight * np.clip(np.sum(images * candidates, axis=1), 0, None)
    best = []
    for cand, refs in zip(candidates, references):
        refs = refs / np.sqrt(np.sum(refs ** 2, axis=1, keepdims=True))
        best.append(np.max(cand.dot(refs.transpose())))
    ref = 2 * per * best / (per + best)
    return per, ref


def test_fp16_scores_follow_the_reference_fp16_arithmetic_exactly(tiny_openai_clip, flickr) -> None:
    paths, captions, references = flickr
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu", precision="fp16")
    result = scorer.score(paths, captions, references)
    images = scorer.engine.image_features([validate_image(p, i) for i, p in enumerate(paths)])
    prepare = scorer.backbone.text_transform.prepare
    candidates = scorer.engine.text_features(prepare(captions, PROMPT))
    references = [scorer.engine.text_features(prepare(refs, PROMPT)) for refs in references]
    assert images.dtype == candidates.dtype == np.float16
    per, ref = _script_arithmetic(images, candidates, references)
    assert per.dtype == np.float16
    assert result["clip_scores"] == [float(v) for v in per]
    assert result["ref_clip_scores"] == [float(v) for v in ref]
    assert result["clip_score"] == float(np.mean(per))
    assert sum(v > 0 for v in result["clip_scores"]) >= 5
    assert "precision:fp16" in result["signature"]


def test_fp16_features_match_openai_clip_in_half_precision(tiny_openai_clip, flickr) -> None:
    paths, captions, _ = flickr
    model = copy.deepcopy(tiny_openai_clip.model)
    clip.model.convert_weights(model)  # what clip.load does on CUDA: fp16 weights, LayerNorm computed in fp32
    transform = reference_transform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
    with torch.no_grad():
        expected_images = model.encode_image(torch.stack([transform(Image.open(p)) for p in paths]).half()).numpy()
        expected_texts = model.encode_text(clip.tokenize([PROMPT + c for c in captions], truncate=True)).numpy()
    expected, _ = _script_arithmetic(expected_images, expected_texts, [expected_texts[:1]] * len(paths))
    fp16 = CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu", precision="fp16").score(paths, captions)["clip_scores"]
    fp32 = CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu").score(paths, captions)["clip_scores"]
    # fp16 kernels differ in rounding between implementations: agreement to fp16 resolution, and fp16 is not fp32
    np.testing.assert_allclose(fp16, expected.astype(np.float64), rtol=0, atol=4e-3)
    assert fp16 != fp32


def test_auto_precision_is_the_reference_codes_own_on_each_device(tiny_openai_clip) -> None:
    from capeval.runtime import resolve_precision
    from capeval.scorers.clipscore import CLIP_S, PAC_S

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_precision("auto", CLIP_S, cpu) == resolve_precision("auto", PAC_S, cpu) == "fp32"
    assert resolve_precision("auto", CLIP_S, cuda) == "fp16"  # clip.load on CUDA
    assert resolve_precision("auto", PAC_S, cuda) == "fp32"  # PAC-S calls model.float()
    assert resolve_precision("bf16", CLIP_S, cuda) == "bf16"
    assert "precision:fp32" in CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu").signature
