"""TIGEr from images: every image gets the 36 regions of the bottom-up rule and a score, through the API, `capeval
regions` files and `capeval score --images --detector`, with what made the regions in the signature."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, Tuple

import pytest

from capeval import TIGErScore
from capeval.cli import main
from capeval.models.regions.configuration import ADAPTIVE, ExtractionSettings
from capeval.models.regions.detectors import DETECTORS, family_detector
from capeval.models.regions.extraction import RegionExtractor
from capeval.models.regions.files import read_region_features
from capeval.registry import FAMILIES
from capeval.scorers.tigerscore import NUM_REGIONS
from fixtures.regions_checkpoints import detector_folder_and_images, small_input_bottom_up_detector
from fixtures.tiger_checkpoints import convert_original, load_goldens, synthetic_state, vocab_words

CAPTIONS = {"image1": ("a dog runs on the grass .", ["a brown dog running across a lawn .", "a dog plays ."]),
            "x": ("a man in a hat", ["a man wearing a hat", "a person outside"]),
            "y": ("a cat", ["a cat sits on a mat"])}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, capeval_test_data: Path) -> Dict[str, Path]:
    """``detector``: the small-input bottom-up detector, converted (its RPN proposes 20 boxes for image1.jpg);
    ``scan``: a converted tiny SCAN reading its 128-d features; ``images``: image1.jpg and two random images;
    ``candidates`` / ``references``: their captions as `capeval score` reads them."""
    root = tmp_path_factory.mktemp("tiger_images")
    detector_dir, images = detector_folder_and_images(small_input_bottom_up_detector(), root)
    shutil.copy(capeval_test_data / "examples" / "clipscore" / "images" / "image1.jpg", images / "image1.jpg")
    dims = load_goldens()["cases"]["models"]["tiny"]
    image_state, text_state = synthetic_state(dims["vocab_size"], dims["word_dim"], dims["embed_size"], 128,
                                              dims["seed"])
    (root / "scan").mkdir()
    words = vocab_words(load_goldens()["cases"]["vocab_words"], dims["vocab_size"])
    scan = convert_original(root / "scan", image_state, text_state, words)
    (root / "cands.json").write_text(json.dumps({key: caption for key, (caption, _) in CAPTIONS.items()}))
    (root / "refs.json").write_text(json.dumps({key: references for key, (_, references) in CAPTIONS.items()}))
    return {"detector": detector_dir, "scan": scan, "images": images, "candidates": root / "cands.json",
            "references": root / "refs.json"}


def _score(folders: Dict[str, Path], output: Path, *inputs: str) -> Tuple[int, dict]:
    code = main(["score", "--metric", "tigerscore", *inputs, "--candidates", str(folders["candidates"]),
                 "--references", str(folders["references"]), "--model", str(folders["scan"]), "--device", "cpu",
                 "--output", str(output)])
    return code, json.loads(output.read_text()) if code == 0 else {}


def test_the_family_detector_keeps_the_regions_tiger_reads() -> None:
    spec = family_detector(FAMILIES["tigerscore"])
    assert spec.name == "bottom-up" and spec.hub_id == "capeval/bottom-up-frcnn-r101-vg"
    assert spec.settings.min_proposals == spec.settings.max_boxes == NUM_REGIONS


def test_regions_files_and_images_give_36_regions_and_one_score_each(
        folders: Dict[str, Path], tmp_path: Path, offline_punkt: None, capsys: pytest.CaptureFixture) -> None:
    regions = tmp_path / "regions.npz"
    assert main(["regions", "--images", str(folders["images"]), "--out", str(regions), "--model",
                 str(folders["detector"]), "--device", "cpu"]) == 0
    stored = read_region_features(regions)
    assert {key: value.features.shape for key, value in stored.items()} == {key: (36, 128) for key in CAPTIONS}
    source = stored["image1"].source
    assert source is not None and source.startswith(f"{folders['detector']}@local-")
    assert source.endswith(f"({DETECTORS['bottom-up'].settings.signature()})") and "min_boxes=36" in source
    code, from_file = _score(folders, tmp_path / "from_file.json", "--regions", str(regions))
    assert code == 0
    code, from_images = _score(folders, tmp_path / "from_images.json", "--images", str(folders["images"]),
                               "--detector", str(folders["detector"]))
    assert code == 0
    assert "warning" not in capsys.readouterr().err
    assert from_images["scores"] == from_file["scores"] and sorted(from_file["scores"]) == sorted(CAPTIONS)
    assert all(0 <= item["tiger_score"] <= 1 for item in from_file["scores"].values())
    assert from_images["signature"] == from_file["signature"]
    assert f"|detector:{source}|" in from_file["signature"]


def test_the_api_detects_images_with_a_named_detector(folders: Dict[str, Path], offline_punkt: None) -> None:
    image = folders["images"] / "image1.jpg"
    inputs = (["a dog", "a cat"], [["a dog runs"], ["a dog runs"]])
    result = TIGErScore(model=folders["scan"], device="cpu", regions=str(folders["detector"])).score([image] * 2,
                                                                                                    *inputs)
    spec = DETECTORS["bottom-up"]
    regions = RegionExtractor(spec.load(folders["detector"]), spec.settings)([image])[0]
    assert regions.features.shape == (36, 128)
    assert TIGErScore(model=folders["scan"], device="cpu").score([regions] * 2, *inputs) == result


@pytest.mark.parametrize("settings", [ADAPTIVE, ExtractionSettings(preprocessing="lxmert", selection="lxmert")])
def test_an_extractor_that_may_keep_other_counts_is_refused(folders: Dict[str, Path],
                                                           settings: ExtractionSettings) -> None:
    extractor = RegionExtractor(small_input_bottom_up_detector(), settings)
    with pytest.raises(ValueError, match=f"TIGEr reads 36 regions per image, and this RegionExtractor keeps "
                                         f"{settings.regions_per_image()} by the '{settings.selection}' selection"):
        TIGErScore(model=folders["scan"], device="cpu", regions=extractor)


def test_cli_names_the_detector_flag(folders: Dict[str, Path], offline_punkt: None,
                                     capsys: pytest.CaptureFixture) -> None:
    common = ["--candidates", str(folders["candidates"]), "--references", str(folders["references"]), "--device",
              "cpu"]
    # the default detector, offline and not cached: the hint is --detector (--model is the SCAN model)
    assert main(["score", "--metric", "tigerscore", "--images", str(folders["images"]), "--model",
                 str(folders["scan"]), *common]) == 2
    error = capsys.readouterr().err
    assert "capeval/bottom-up-frcnn-r101-vg" in error and "pass --detector <local folder>" in error
    assert "--model <" not in error and "regions=" not in error
    assert main(["score", "--metric", "clipscore", "--images", str(folders["images"]), "--detector",
                 str(folders["detector"]), *common]) == 2
    assert "--detector applies to the region-based metrics (tigerscore and vilbertscore), not clipscore" in \
        capsys.readouterr().err
    assert main(["score", "--metric", "tigerscore", "--regions", str(folders["images"] / "none.npz"), "--detector",
                 str(folders["detector"]), *common]) == 2
    assert "--regions FILE holds them already" in capsys.readouterr().err
