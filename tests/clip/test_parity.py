"""Parity with the original implementations on the same weights and inputs.

The reference side is built independently of capeval: the original model classes (clip-anytorch, open_clip) in
float64, the reference torchvision transform, ``clip.tokenize(..., truncate=True)``, and the score formulas written
out here in float64. capeval runs its converted fp32 model on ``$CAPEVAL_TEST_DEVICE`` (default cpu; the
``capeval_test_device`` fixture), with the tolerances of :data:`SCORE_TOLERANCE`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Sequence

import clip
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from torchvision.transforms import Compose

from capeval import CLIPScore, PACScore
from capeval.inputs import validate_image
from capeval.models.clip.preprocessing import (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform, TextTransform,
                                              clean_text, needs_fixing)
from fixtures.clip_reference import PROMPT, reference_transform

SCORE_TOLERANCE = {"cpu": (2e-6, 1e-6), "cuda": (1e-5, 5e-6)}
"""(per-item, corpus-mean) absolute tolerance of capeval's fp32 scores against the float64 reference, by device type.
cpu: fp32 rounding of the tiny model's forward. cuda: GPU kernels sum in other orders than the CPU ones (split
reductions, fused multiply-adds, algorithms chosen per shape), so a few more fp32 roundings reach the features; TF32
is switched off for these tests (see conftest's ``strict_fp32``), because TF32 rounds matmul and convolution inputs to 10
mantissa bits (about 5e-4 relative), a precision choice rather than a parity question."""


@pytest.fixture(autouse=True)
def _parity_in_fp32(strict_fp32: None) -> None:
    """Every test here runs with IEEE fp32 products on CUDA (conftest's ``strict_fp32``)."""


def _variants(path: Path, directory: Path) -> List[Path]:
    """Grayscale, RGBA, palette and CMYK files made from one image."""
    image = Image.open(path).convert("RGB")
    alpha = Image.linear_gradient("L").resize(image.size)
    made = {
        "gray.jpg": image.convert("L"),
        "rgba.png": Image.merge("RGBA", (*image.split(), alpha)),
        "palette.png": image.quantize(colors=64),
        "cmyk.jpg": image.convert("CMYK"),
    }
    paths = []
    for suffix, variant in made.items():
        target = directory / f"{path.stem}-{suffix}"
        variant.save(target)
        paths.append(target)
    return paths


@pytest.fixture(scope="module")
def image_paths(capeval_test_data: Path, tmp_path_factory: pytest.TempPathFactory) -> List[Path]:
    originals = sorted((capeval_test_data / "flickr8k" / "images_original").glob("*.jpg"))
    examples = sorted((capeval_test_data / "examples").glob("*/images/*.jpg"))
    variant_dir = tmp_path_factory.mktemp("variants")
    variants = [p for path in originals[:12] for p in _variants(path, variant_dir)]
    paths = examples + originals + variants
    assert len(originals) >= 100 and len(paths) >= 150
    modes = {Image.open(p).mode for p in paths}
    assert {"RGB", "L", "RGBA", "P", "CMYK"} <= modes
    return paths


def _flickr8k_captions(data: Path) -> Dict[str, List[str]]:
    """Flickr8k reference captions of each image, by file name."""
    captions: Dict[str, List[str]] = {}
    for line in (data / "flickr8k" / "Flickr8k.token.txt").read_text().splitlines():
        key, caption = line.split("\t")
        captions.setdefault(key.split("#")[0], []).append(caption)
    return captions


@pytest.fixture(scope="module")
def caption_sets(capeval_test_data: Path, image_paths: List[Path]) -> Dict[str, list]:
    """A candidate and references per image: a Flickr8k caption of another image (so scores vary), 1-5 refs."""
    captions = _flickr8k_captions(capeval_test_data)
    pool = [c for caps in captions.values() for c in caps]
    rng = np.random.default_rng(0)
    candidates, references = [], []
    for index, path in enumerate(image_paths):
        candidates.append(pool[int(rng.integers(len(pool)))])
        own = captions.get(path.name.split("-")[0] if "-" in path.name else path.name)
        refs = own if own else [pool[int(rng.integers(len(pool)))] for _ in range(3)]
        references.append(refs[: 1 + index % 5])
    candidates[0] = "a dog &amp; a cat " + "running across the wide green field " * 12  # > 77 tokens, HTML entity
    candidates[1] = "Ein  Café\u2019s “quoted”   caption"
    return {"candidates": candidates, "references": references}


def _reference_scores(
    model: torch.nn.Module,
    tokenize: Callable[[List[str]], torch.Tensor],
    transform: Compose,
    paths: Sequence[Path],
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    weight: float,
) -> Dict[str, np.ndarray]:
    model = model.double()
    with torch.no_grad():
        images = torch.stack([transform(Image.open(p)) for p in paths]).double()
        image_features = model.encode_image(images).numpy()
        text_features = model.encode_text(tokenize([PROMPT + c for c in candidates])).numpy()
        flat_refs = [r for refs in references for r in refs]
        ref_features = model.encode_text(tokenize([PROMPT + r for r in flat_refs])).numpy()
    model.float()
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    image_features, text_features, ref_features = unit(image_features), unit(text_features), unit(ref_features)
    cosine = np.sum(image_features * text_features, axis=1)
    clip_s = weight * np.maximum(cosine, 0)
    owners = np.repeat(np.arange(len(references)), [len(r) for r in references])
    ref_cos = np.array([np.max(ref_features[owners == i] @ text_features[i]) for i in range(len(references))])
    ref_s = np.array([0.0 if a + b == 0 else 2 * a * b / (a + b) for a, b in zip(clip_s, ref_cos)])
    return {"cosine": cosine, "clip_s": clip_s, "ref_cos": ref_cos, "ref_s": ref_s}


def test_image_transform_equals_torchvision_bit_for_bit(image_paths: List[Path]) -> None:
    for mean, std in ((OPENAI_CLIP_MEAN, OPENAI_CLIP_STD), ((0.5,) * 3, (0.5,) * 3)):
        ours, reference = ImageTransform(224, mean, std), reference_transform(mean, std)
        for path in image_paths:
            expected = reference(Image.open(path))
            actual = ours.normalize(ours.to_uint8(validate_image(path, 0).open(), str(path))[None])[0]
            assert torch.equal(actual, expected), path


def test_crop_offset_rounds_half_to_even() -> None:
    transform = ImageTransform(224)
    # 500x334 -> 335x224: the 111 excess pixels give an offset of 55.5, which torchvision rounds to 56
    assert transform.resized_shape(500, 334) == (335, 224)
    assert transform.crop_box(335, 224) == (56, 0, 280, 224)
    assert transform.crop_box(333, 224) == (54, 0, 278, 224)  # 54.5 -> 54 (half to even)


def test_tokenization_equals_clip_tokenize(tiny_openai_clip, caption_sets) -> None:
    from transformers import AutoTokenizer

    text_transform = TextTransform(AutoTokenizer.from_pretrained(tiny_openai_clip.hf_dir))
    texts = caption_sets["candidates"] + [r for refs in caption_sets["references"] for r in refs]
    texts += ["Wow!! a dog!", "&lt;b&gt;bold&lt;/b&gt; &amp;amp; text", "naïve CAFÉ ☕ 東京", "don't  stop\tnow\n", "x" * 300]
    ours = text_transform.tokenize(text_transform.prepare(texts, PROMPT))
    expected = clip.tokenize([PROMPT + t for t in texts], truncate=True)
    for index, ids in enumerate(ours):
        row = expected[index].tolist()  # zero-padded; id 0 is also a real token ("!"), so cut at the end token
        assert ids == row[: row.index(49407) + 1], texts[index]
    assert sum(text_transform.truncated(text_transform.prepare(texts, PROMPT))) == sum(
        len(clip.tokenize(PROMPT + t, truncate=True)[0]) == 77 and clip.tokenize(PROMPT + t, truncate=True)[0, -1] == 49407
        for t in texts
    )
    assert clean_text("  A  &amp;amp;\tB ") == "a & b"


def test_text_cleaning_equals_clips_own_with_ftfy_skipped_on_plain_ascii() -> None:
    """``clean_text`` skips ftfy on printable ASCII without ``&`` (``needs_fixing``); on every printable ASCII
    character and on random strings mixing those with what ftfy does fix, it equals clip's ``basic_clean`` and
    ``whitespace_clean`` (lower-cased, as clip's tokenizer does)."""
    from clip.simple_tokenizer import basic_clean, whitespace_clean

    printable = [chr(code) for code in range(0x20, 0x7F)]
    special = ["&amp;", "&lt;b&gt;", "&#x41;", "\t", "\n", "\r\n", "\x1b[31m", "\x00", "\x7f", "\u00e9", "\u00c3\u00a9",
               "\u201cq\u201d", "\uff21", "\ufb01", "\u0085", "\u2028", "e\u0301", "\u00a0"]
    rng = np.random.default_rng(0)
    texts = printable + ["".join(rng.choice(printable, size=int(rng.integers(1, 80)))) for _ in range(3000)]
    texts += ["".join(rng.choice(printable + special * 4, size=int(rng.integers(1, 40)))) for _ in range(3000)]
    skipped = [text for text in texts if not needs_fixing(text)]
    assert 2000 < len(skipped) < len(texts) - 2000  # both paths taken often
    for text in texts:
        assert clean_text(text) == whitespace_clean(basic_clean(text)).lower(), repr(text)
    assert all(needs_fixing(text) for text in special)


def _check_scores(result: dict, reference: Dict[str, np.ndarray], name: str, device: str) -> None:
    item_tolerance, mean_tolerance = SCORE_TOLERANCE[torch.device(device).type]
    clip_scores = np.array(result[f"{name}s"])
    ref_scores = np.array(result[f"ref_{name}s"])
    assert (reference["clip_s"] > 0).sum() > 20 and (reference["ref_s"] != 0).sum() > 20  # non-vacuous
    np.testing.assert_allclose(clip_scores, reference["clip_s"], rtol=0, atol=item_tolerance)
    np.testing.assert_allclose(ref_scores, reference["ref_s"], rtol=0, atol=item_tolerance)
    assert result[name] == pytest.approx(float(np.mean(reference["clip_s"])), abs=mean_tolerance)
    assert result[f"ref_{name}"] == pytest.approx(float(np.mean(reference["ref_s"])), abs=mean_tolerance)


def test_clip_s_and_ref_clip_s_match_original_clip(tiny_openai_clip, image_paths, caption_sets, monkeypatch,
                                                   capeval_test_device) -> None:
    # OpenAI's LayerNorm subclass upcasts to float32; in float64 the plain LayerNorm does the same arithmetic exactly.
    monkeypatch.setattr(clip.model.LayerNorm, "forward", torch.nn.LayerNorm.forward)
    reference = _reference_scores(
        tiny_openai_clip.model, lambda texts: clip.tokenize(texts, truncate=True),
        reference_transform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD), image_paths,
        caption_sets["candidates"], caption_sets["references"], weight=2.5,
    )
    with pytest.warns(UserWarning, match="^1 text exceeds .* and was truncated"):
        result = CLIPScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device, precision="fp32").score(
            image_paths, caption_sets["candidates"], caption_sets["references"])
    _check_scores(result, reference, "clip_score", capeval_test_device)


def test_pac_s_and_ref_pac_s_match_original_open_clip(tiny_openclip, image_paths, caption_sets,
                                                      capeval_test_device) -> None:
    tokenizer = open_clip.get_tokenizer("ViT-L-14")
    reference = _reference_scores(
        tiny_openclip.model, tokenizer, reference_transform((0.5,) * 3, (0.5,) * 3), image_paths,
        caption_sets["candidates"], caption_sets["references"], weight=2.0,
    )
    with pytest.warns(UserWarning, match="^1 text exceeds .* and was truncated"):
        result = PACScore(model=tiny_openclip.hf_dir, device=capeval_test_device, precision="fp32").score(
            image_paths, caption_sets["candidates"], caption_sets["references"])
    _check_scores(result, reference, "pac_score", capeval_test_device)


def test_every_image_input_form_gives_the_same_scores(tiny_openai_clip, image_paths, capeval_test_device) -> None:
    paths = image_paths[-8:] + image_paths[:4]
    captions = [f"a photo number {i}" for i in range(len(paths))]
    scorer = CLIPScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device)
    from_paths = scorer.score(paths, captions)["clip_scores"]
    as_str = scorer.score([str(p) for p in paths], captions)["clip_scores"]
    as_bytes = CLIPScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device).score(
        [p.read_bytes() for p in paths], captions)["clip_scores"]
    as_pil = CLIPScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device).score(
        [Image.open(p) for p in paths], captions)["clip_scores"]
    assert from_paths == as_str == as_bytes == as_pil
    # arrays (RGB and grayscale files only) mixed with paths, so every image sits in the same batch as before
    mixed = [np.asarray(Image.open(p)) if Image.open(p).mode in ("RGB", "L") else p for p in paths]
    assert sum(isinstance(m, np.ndarray) for m in mixed) >= 6
    mixed_scores = CLIPScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device).score(mixed, captions)
    assert mixed_scores["clip_scores"] == from_paths
