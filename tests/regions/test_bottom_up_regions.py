"""The bottom-up detector against goldens of the reference port, its conversion, its preprocessing and bad input."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from capeval.inputs import InputError, validate_image
from capeval.models.regions.configuration import BottomUpConfig, ExtractionSettings
from capeval.models.regions.extraction import RegionExtractor, extract_to_file
from capeval.models.regions.files import read_region_features
from capeval.models.regions.modeling_bottom_up import BottomUpDetector, cell_anchors
from capeval.models.regions.preprocessing import caffe_scale, cv2_linear_resize
from conversion.regions_converter import CELL_ANCHORS_KEY, bottom_up_config, capeval_key, convert_state_dict
from fixtures.regions_checkpoints import (REGIONS_DATA, assert_conversion_refuses, converted_detector,
                                          detector_folder_and_images, synthetic_reference_state_dict)

TOLERANCE = 1e-4
BOX_RTOL = 1e-6
"""Boxes are pixel coordinates (up to ~500 here), where one float32 step is 6e-5: the detector's products round
in a different order on other CPUs' BLAS kernels, moving a coordinate by a few steps (1.2e-4 at 482 px seen), so
boxes are compared relative to their size (1e-6, about 16 float32 steps)."""


@pytest.fixture(scope="module")
def config() -> BottomUpConfig:
    return bottom_up_config(yaml.safe_load((REGIONS_DATA / "config.yaml").read_text()))


@pytest.fixture(scope="module")
def reference_state(config: BottomUpConfig) -> dict:
    return synthetic_reference_state_dict({CELL_ANCHORS_KEY: cell_anchors(config)})


@pytest.fixture(scope="module")
def detector(config: BottomUpConfig, reference_state: dict) -> BottomUpDetector:
    return converted_detector(BottomUpDetector, reference_state, config)


@pytest.fixture(scope="module")
def goldens() -> dict:
    with np.load(REGIONS_DATA / "goldens.npz") as data:
        return {key: data[key] for key in data.files}


def test_conversion_maps_every_key(config: BottomUpConfig, reference_state: dict) -> None:
    converted, dropped = convert_state_dict(reference_state, config)
    assert set(converted) == set(BottomUpDetector(config).state_dict())
    assert len(converted) + len(dropped) == len(reference_state)
    assert CELL_ANCHORS_KEY in dropped and all(k == CELL_ANCHORS_KEY or k.endswith("num_batches_tracked")
                                               for k in dropped)
    assert capeval_key("backbone.res4.22.conv2.norm.running_var") == "backbone.res4.22.norm2.running_var"
    assert capeval_key("roi_heads.res5.0.shortcut.norm.gamma") == "res5.0.shortcut_norm.weight"
    assert capeval_key("proposal_generator.rpn_head.objectness_logits.bias") == "rpn.objectness.bias"
    assert_conversion_refuses(lambda state: convert_state_dict(state, config), reference_state, CELL_ANCHORS_KEY,
                              "roi_heads.box_predictor.cls_score.bias", "heads.cls_score.bias")


@pytest.mark.parametrize("mode", ["lxmert", "bottom-up"])
def test_parity_with_reference(detector: BottomUpDetector, goldens: dict, golden_images: list, mode: str) -> None:
    """Same boxes and features as the port end to end ("lxmert"), and as the port's network fed the Caffe blob
    with generate_tsv.py's selection ("bottom-up"), on 10 Flickr8k images."""
    paths = golden_images
    settings = ExtractionSettings(preprocessing="caffe", selection="bottom-up") if mode == "bottom-up" else \
        ExtractionSettings(preprocessing="lxmert", selection="lxmert")
    prefix = mode.replace("-", "_")
    results = RegionExtractor(detector, settings, batch_size=2).detections(
        [validate_image(path, index) for index, path in enumerate(paths)])
    for index, result in enumerate(results):
        boxes, features = goldens[f"{prefix}_boxes_{index}"], goldens[f"{prefix}_features_{index}"]
        assert result.boxes.shape == boxes.shape and result.features.shape == features.shape
        np.testing.assert_allclose(result.boxes, boxes, rtol=BOX_RTOL, atol=TOLERANCE)
        np.testing.assert_allclose(result.features, features, rtol=0, atol=TOLERANCE)
        if mode == "lxmert":
            np.testing.assert_array_equal(result.object_ids, goldens[f"lxmert_object_ids_{index}"])
            np.testing.assert_array_equal(result.attribute_ids, goldens[f"lxmert_attribute_ids_{index}"])
        else:
            np.testing.assert_allclose(result.scores, goldens[f"bottom_up_scores_{index}"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("size", [(333, 500), (500, 333), (1, 1), (10, 1000), (1200, 2500), (7, 3)])
def test_resize_matches_opencv(config: BottomUpConfig, size: tuple) -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    image = (rng.random((*size, 3)) * 255 - 120).astype(np.float32)
    scale = caffe_scale(size[0], size[1], config)
    expected = cv2.resize(image, None, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    if expected.ndim == 2:
        expected = expected[:, :, None]
    ours = cv2_linear_resize(torch.from_numpy(image).permute(2, 0, 1), scale).permute(1, 2, 0).numpy()
    assert ours.shape == expected.shape
    # OpenCV <= 4 (the original's) rounds each source position to float32 as we do; OpenCV 5 keeps it in double,
    # which moves the fraction by up to one float32 ulp of the position (~3e-5 px, ~6e-3 on this random data).
    tolerance = 1e-3 if int(cv2.__version__.split(".")[0]) < 5 else 1e-2
    np.testing.assert_allclose(ours, expected, rtol=0, atol=tolerance)


def _encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def test_awkward_images_give_regions_or_named_errors(detector: BottomUpDetector) -> None:
    rng = np.random.default_rng(1)
    rgb = Image.fromarray(rng.integers(0, 255, (40, 60, 3), dtype=np.uint8))
    sixteen = Image.fromarray(rng.integers(0, 65535, (30, 50), dtype=np.uint16))
    images = [
        rgb.convert("L"), rgb.convert("RGBA"), _encoded(rgb.convert("CMYK"), "JPEG"), _encoded(sixteen, "PNG"),
        Image.new("RGB", (1, 1), (200, 10, 10)), Image.new("RGB", (1000, 10)), Image.new("RGB", (2400, 1300)),
    ]
    extractor = RegionExtractor(detector, ExtractionSettings(min_boxes=1, max_boxes=5))
    regions = extractor(images)
    assert [r.image_size for r in regions] == [(60, 40), (60, 40), (60, 40), (50, 30), (1, 1), (1000, 10),
                                               (2400, 1300)]
    for region in regions:
        assert 1 <= region.features.shape[0] <= 5 and region.features.shape[1] == detector.config.pooled_feature_dim
        assert np.isfinite(region.features).all()
        width, height = region.image_size
        assert (region.boxes >= 0).all() and (region.boxes[:, [0, 2]] <= width + 1e-3).all()
        assert (region.boxes[:, [1, 3]] <= height + 1e-3).all()
    # grey and RGBA share the RGB-converted pixels of their source: same regions as the RGB image's conversions
    np.testing.assert_array_equal(regions[1].features, extractor([rgb])[0].features)
    with pytest.raises(InputError, match=r"images\[1\]"):
        extractor([rgb, b"not an image at all"])
    truncated = _encoded(rgb, "JPEG")[:200]
    with pytest.raises(InputError, match=r"images\[0\]"):
        extractor([truncated])


def test_file_is_resumable_and_cache_skips_the_detector(detector: BottomUpDetector, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    paths = {}
    for name in ("a", "b", "c"):
        paths[name] = tmp_path / f"{name}.png"
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(paths[name])
    settings = ExtractionSettings(min_boxes=4, max_boxes=4)
    extractor = RegionExtractor(detector, settings, cache_dir=tmp_path / "cache")
    out = tmp_path / "features.npz"
    assert extract_to_file(extractor, {k: paths[k] for k in ("a", "b")}, out) == 2
    assert extract_to_file(extractor, paths, out) == 1  # a and b are in the file already
    stored = read_region_features(out)
    assert sorted(stored) == ["a", "b", "c"]
    assert stored["c"].features.shape == (4, detector.config.pooled_feature_dim)
    assert stored["c"].image_size == (64.0, 48.0)
    fresh = RegionExtractor(detector, settings, cache_dir=tmp_path / "cache")
    again = fresh([paths["c"], paths["a"]])
    assert fresh.detected == 0  # every row came from the disk cache
    np.testing.assert_array_equal(again[0].features, stored["c"].features)
    np.testing.assert_array_equal(again[1].boxes, stored["a"].boxes)


def test_regions_command(detector: BottomUpDetector, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from capeval.cli import main

    model_dir, images = detector_folder_and_images(detector, tmp_path)
    out = tmp_path / "features.npz"
    assert main(["regions", "--images", str(images), "--out", str(out), "--model", str(model_dir),
                 "--device", "cpu"]) == 0
    stored = read_region_features(out)
    assert sorted(stored) == ["x", "y"] and stored["x"].features.shape == (36, detector.config.pooled_feature_dim)
    assert "CPU" in capsys.readouterr().err
    (images / "x.png").write_bytes((images / "x.jpg").read_bytes())
    assert main(["regions", "--images", str(images), "--out", str(out), "--model", str(model_dir)]) == 2
    assert "share the image id 'x'" in capsys.readouterr().err


def test_hub_folder_config_is_the_full_model() -> None:
    folder = REGIONS_DATA.parents[2] / "hub_models" / "capeval" / "bottom-up-frcnn-r101-vg"
    config = BottomUpConfig.load(folder)
    assert (config.depth, config.pooled_feature_dim, config.num_classes, config.num_attributes) == (101, 2048, 1600, 400)
    assert (config.min_size_test, config.max_size_test, config.rpn_post_nms_topk) == (600, 1000, 300)
    small = bottom_up_config(yaml.safe_load((REGIONS_DATA / "config.yaml").read_text()))
    differing = {k for k, v in small.to_dict().items() if config.to_dict()[k] != v}
    assert differing == {"stem_out_channels", "res2_out_channels", "bottleneck_channels", "rpn_hidden_channels",
                         "num_classes", "num_attributes"}


def test_one_name_per_detector_and_generated_help(capsys: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The detector names of DETECTORS are those the registry's families, the converter and the commands use."""
    from capeval.cli import main
    from capeval.models.regions.detectors import DETECTORS
    from capeval.registry import FAMILIES, MODELS
    from conversion.regions_converter import CONFIG_READERS

    assert sorted(CONFIG_READERS) == sorted(DETECTORS)
    assert sorted(family.detector for family in FAMILIES.values() if family.region_features) == sorted(DETECTORS)
    assert sorted(user for model in MODELS.values() for user in model.default_for if user.startswith("detector:")) \
        == sorted(f"detector:{name}" for name in DETECTORS)
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: argparse wraps at hyphens
    for command in (["regions", "--help"], ["score", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
    shown = capsys.readouterr().out
    assert ("--detector {bottom-up,x152-fpn} bottom-up: the bottom-up attention Faster R-CNN, ResNet-101 on Visual "
            "Genome (TIGEr; 36 regions per image); x152-fpn: vilbert-multi-task's ResNeXt-152 FPN Faster R-CNN on "
            "Visual Genome (ViLBERTScore; 100 regions per image)") in " ".join(shown.split())
    assert ("(default: capeval/bottom-up-frcnn-r101-vg for tigerscore and capeval/vilbert-detector-x152-fpn for "
            "vilbertscore)") in shown
