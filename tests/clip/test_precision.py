"""``precision="fp16"``: the published CLIP-S arithmetic (fp16 model, fp16 NumPy scoring)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable, List, Tuple

import clip
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from capeval import CLIPScore
from capeval.inputs import validate_image
from capeval.models.clip.loading import load_backbone
from capeval.models.clip.preprocessing import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform
from fixtures.clip_checkpoints import make_tiny_clip
from fixtures.clip_reference import PROMPT, reference_transform


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


class ShapeDependentKernels(TorchDispatchMode):
    """Records every dispatched operation whose kernel, hence rounding, can depend on its operands' shapes and
    strides (products, convolution, attention, layer norm), with each operand's shape, stride and dtype."""

    KINDS = ("mm", "matmul", "linear", "conv", "scaled_dot_product", "layer_norm")

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[str, tuple]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if any(kind in name for kind in self.KINDS):
            operands, _ = tree_flatten((args, kwargs or {}))
            self.calls.append((name, tuple((tuple(o.shape), o.stride(), o.dtype) if isinstance(o, torch.Tensor)
                                           else o for o in operands)))
        return func(*args, **(kwargs or {}))


def _shape_dependent_kernels(run: Callable[[], Any]) -> List[Tuple[str, tuple]]:
    """The calls :class:`ShapeDependentKernels` records while ``run()`` runs in inference mode (as the backbone's
    encoders do: there the mode sees composite operations, ``linear``, ``layer_norm``..., before they decompose)."""
    with torch.inference_mode(), ShapeDependentKernels() as recorder:
        run()
    return recorder.calls


def test_fp16_towers_dispatch_the_kernels_of_clip_load_fp16_model(tiny_openai_clip) -> None:
    """Kernels are chosen per operation from its operands' shapes, strides and dtypes: on any device, the same
    operations on the same operands as clip's fp16 model select the same kernels, so CUDA rounds as the reference
    does. (Separate q/k/v products, ``is_causal`` instead of the additive mask, or layer norms on other strides
    each show here.)"""
    model = copy.deepcopy(tiny_openai_clip.model)
    clip.model.convert_weights(model)
    backbone = load_backbone(str(tiny_openai_clip.hf_dir), None, torch.device("cpu"), "fp16")
    pixels = torch.randint(0, 256, (3, 3, 224, 224), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    tokens = clip.tokenize([PROMPT + "a dog.", PROMPT + "two cats asleep on a red mat"])
    expected_image = _shape_dependent_kernels(lambda: model.encode_image(pixels.half()))
    expected_text = _shape_dependent_kernels(lambda: model.encode_text(tokens))
    assert [name for name, _ in expected_text].count("linear") == 4 * 2  # in, out, fc1, fc2 per layer
    assert _shape_dependent_kernels(lambda: backbone.encode_images(pixels)) == expected_image
    assert _shape_dependent_kernels(lambda: backbone.encode_texts(tokens)) == expected_text


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
    from capeval.registry import FAMILIES
    from capeval.runtime import resolve_precision

    CLIP_S, PAC_S = FAMILIES["clipscore"], FAMILIES["pacscore"]
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_precision("auto", CLIP_S, cpu) == resolve_precision("auto", PAC_S, cpu) == "fp32"
    assert resolve_precision("auto", CLIP_S, cuda) == "fp16"  # clip.load on CUDA
    assert resolve_precision("auto", PAC_S, cuda) == "fp32"  # PAC-S calls model.float()
    assert resolve_precision("bf16", CLIP_S, cuda) == "bf16"
    assert "precision:fp32" in CLIPScore(model=tiny_openai_clip.hf_dir, device="cpu").signature
