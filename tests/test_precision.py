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
from capeval.models.clip.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from checkpoints import make_tiny_clip
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


def test_fp16_features_and_scores_equal_clip_load_fp16_model_bit_for_bit(tmp_path_factory, flickr,
                                                                        capeval_test_device) -> None:
    """With fp16-valued weights (as every released OpenAI checkpoint), capeval's fp16 image and text features equal
    those of clip's fp16 model (``convert_weights``, as ``clip.load`` on CUDA) fed as clipscore.py feeds it: the
    torchvision transform in float32 on the host, then ``.to(device)`` and the fp16 cast. So per-item CLIP-S does."""
    paths, captions, _ = flickr
    tiny = make_tiny_clip("openai", tmp_path_factory.mktemp("fp16_valued_clip"), fp16_values=True)
    model = copy.deepcopy(tiny.model)
    clip.model.convert_weights(model)
    model = model.to(capeval_test_device)
    transform = reference_transform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
    with torch.no_grad():
        pixels = torch.stack([transform(Image.open(p)) for p in paths]).to(capeval_test_device).to(torch.float16)
        expected_images = model.encode_image(pixels).cpu().numpy()
        tokens = clip.tokenize([PROMPT + c for c in captions], truncate=True).to(capeval_test_device)
        expected_texts = model.encode_text(tokens).cpu().numpy()
    scorer = CLIPScore(model=tiny.hf_dir, device=capeval_test_device, precision="fp16", batch_size=len(paths),
                       text_batch_size=len(paths))
    images = scorer.engine.image_features([validate_image(p, i) for i, p in enumerate(paths)])
    texts = scorer.engine.text_features(scorer.backbone.text_transform.prepare(captions, PROMPT))
    assert images.dtype == np.float16
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(texts, expected_texts)
    expected_scores, _ = _script_arithmetic(expected_images, expected_texts, [expected_texts[:1]] * len(paths))
    assert scorer.score(paths, captions)["clip_scores"] == [float(v) for v in expected_scores]


def test_pixel_table_equals_torchvision_normalisation_then_cast() -> None:
    """The look-up table gives, on any device, torchvision's float32 host normalisation, cast as the reference casts
    it; CUDA's division by a Python scalar (a multiplication by the float32 reciprocal) would move fp16 values."""
    from torchvision.transforms.functional import normalize, to_tensor

    transform = ImageTransform()
    array = np.random.default_rng(3).integers(0, 256, size=(2, 40, 40, 3), dtype=np.uint8)
    array[0, 0, :3 * 256 // 40 + 1] = np.arange(256).repeat(3)[: (3 * 256 // 40 + 1) * 3].reshape(-1, 3)[: 40]
    expected = torch.stack([normalize(to_tensor(Image.fromarray(a)), OPENAI_CLIP_MEAN, OPENAI_CLIP_STD) for a in array])
    pixels = torch.from_numpy(array).permute(0, 3, 1, 2).contiguous()
    assert torch.equal(transform.normalize_by_table(pixels, torch.float32), expected)
    assert torch.equal(transform.normalize_by_table(pixels, torch.float16), expected.half())
    values = torch.arange(256, dtype=torch.float32)
    reciprocal = values * torch.tensor(1 / 255, dtype=torch.float32)
    mean = torch.tensor(OPENAI_CLIP_MEAN).view(-1, 1)
    std = torch.tensor(OPENAI_CLIP_STD).view(-1, 1)
    moved = ((values.div(255) - mean) / std).half() != ((reciprocal - mean) / std).half()
    assert int(moved.sum()) == 3  # the fp16 values of 3 (channel, value) pairs differ by one ulp


def test_auto_precision_is_the_reference_codes_own_on_each_device(tiny_openai_clip) -> None:
    from capeval.runtime import resolve_precision
    from capeval.scorers.clipscore import CLIP_S, PAC_S

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_precision("auto", CLIP_S, cpu) == resolve_precision("auto", PAC_S, cpu) == "fp32"
    assert resolve_precision("auto", CLIP_S, cuda) == "fp16"  # clip.load on CUDA
    assert resolve_precision("auto", PAC_S, cuda) == "fp32"  # PAC-S calls model.float()
    assert resolve_precision("bf16", CLIP_S, cuda) == "bf16"
    assert "precision:fp32" in CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu").signature
