"""Every model with original files, fetched by its registry name from the loopback server (the hub answering 404),
converted, loaded or scored with; then the same call offline needs no network."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch
from safetensors import safe_open

import capeval
from capeval.fetch import PROVENANCE_NAME, converted_folder, read_provenance
from capeval.hub import CHECKSUMS_NAME, loaded_revision
from capeval.models.regions.detectors import load_detector
from capeval.models.scan.loading import load_scan_model
from capeval.models.scan.loading import model_folder as scan_folder
from capeval.originals import SOURCES
from capeval.transfers import sha256_of
from capeval.version import __version__
from fixtures.originals_server import OriginalsServer
from fixtures.paths import REPO_ROOT
from fixtures.polos_checkpoints import ITEMS, parity_images
from fixtures.stand_in_originals import DIRECT_CONVERSIONS
from fixtures.vilbert_checkpoints import load_items, load_regions

EXAMPLES = REPO_ROOT / "examples" / "pacscore"


Used = Tuple[object, Optional[str]]
"""Scores (or weights) computed through capeval from a model reference, and the revision the model recorded."""


def signature_revision(signature: str) -> str:
    return dict(field.split(":", 1) for field in signature.split("|")[1:])["revision"]


def clip_scores(scorer: type) -> Callable[[str], Used]:
    def score(model: str) -> Used:
        captions = json.loads((EXAMPLES / "good_captions.json").read_text())
        images = [EXAMPLES / "images" / f"{key}.jpg" for key in captions]
        result = scorer(model=model, device="cpu").score(images, list(captions.values()))
        return result[f"{scorer.family.main_result}s"], signature_revision(result["signature"])
    return score


def polos_scores(model: str) -> Used:
    images = parity_images()
    result = capeval.Polos(model=model, device="cpu", num_workers=0).score(
        images, [candidate for candidate, _ in ITEMS], [references for _, references in ITEMS])
    return result["polos_scores"], signature_revision(result["signature"])


def vilbert_scores(model: str) -> Used:
    items = load_items()[:3]
    regions = [load_regions()[item["image"]] for item in items]
    result = capeval.ViLBERTScore(model=model, device="cpu", num_regions=100).score(
        regions, [item["candidate"] for item in items], [item["references"] for item in items])
    return result["vilbert_f1s"], signature_revision(result["signature"])


def scan_weights(model: str) -> Used:
    folder = scan_folder(model)
    return weights_of(load_scan_model(folder)), loaded_revision(folder, None)


def detector_weights(model: str) -> Used:
    detector = load_detector(model)
    return weights_of(detector), detector.revision


def weights_of(module: torch.nn.Module) -> Dict[str, np.ndarray]:
    return {key: value.numpy() for key, value in module.state_dict().items()}


def same_safetensors(first: Path, second: Path) -> bool:
    """Same tensors and metadata (the header's metadata order may differ between processes)."""
    with safe_open(str(first), "pt") as one, safe_open(str(second), "pt") as two:
        return one.metadata() == two.metadata() and sorted(one.keys()) == sorted(two.keys()) and all(
            torch.equal(one.get_tensor(key), two.get_tensor(key)) for key in one.keys())


def files_below(folder: Path) -> List[str]:
    """The files of ``folder`` and its subfolders (a Polos folder holds its encoder's and CLIP's), relative, sorted."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def resolved_folder(model: str) -> Path:
    """The folder of ``model`` as its loader resolves it (the table's folder function)."""
    module, function = SOURCES[model].folder.split(":")
    return getattr(importlib.import_module(module), function)(model)


USE: Dict[str, Callable[[str], object]] = {
    "openai/clip-vit-base-patch32": clip_scores(capeval.CLIPScore),
    "capeval/pacs-clip-vit-b-32": clip_scores(capeval.PACScore),
    "capeval/pacs-openclip-vit-l-14": clip_scores(capeval.PACScore),
    "capeval/pacspp-clip-vit-b-32": clip_scores(capeval.PACScore),
    "capeval/pacspp-clip-vit-l-14": clip_scores(capeval.PACScore),
    "capeval/tiger-scan-coco": scan_weights,
    "capeval/vilbert-multi-task": vilbert_scores,
    "capeval/bottom-up-frcnn-r101-vg": detector_weights,
    "capeval/vilbert-detector-x152-fpn": detector_weights,
    "capeval/polos-clip-vit-b-32": polos_scores,
}
"""Model -> what capeval computes with a model reference (a name or a folder), and the revision it records."""


def test_every_model_with_originals_has_a_stand_in() -> None:
    assert sorted(DIRECT_CONVERSIONS) == sorted(USE) == sorted(name for name, source in SOURCES.items()
                                                               if source.files)


@pytest.mark.parametrize("model", sorted(DIRECT_CONVERSIONS))
def test_fetched_by_name_converted_used_then_offline(model: str, online: OriginalsServer, stand_ins: Path,
                                                     tmp_path: Path, go_offline: Callable[[], None]) -> None:
    used, revision = USE[model](model)
    folder = converted_folder(model)
    assert resolved_folder(model) == folder == tmp_path / "hf-home" / "capeval" / "models" / model.replace("/", "--")
    assert any(path.startswith("/api/models/") for _, path, _ in online.requests), "the hub was asked first"
    files = SOURCES[model].files
    for file in files:
        assert online.requests_for(file.name) == [None]  # one whole transfer per file
    provenance = read_provenance(folder)
    assert provenance["model"] == model and provenance["capeval"] == __version__
    assert [(record["name"], record["size"], record["sha256"], record["url"], record["sha256_checked"])
            for record in provenance["originals"]] == [
        (file.name, file.size, file.sha256, f"{online.url}/{file.name}", True) for file in files]
    direct = tmp_path / "direct"
    DIRECT_CONVERSIONS[model](stand_ins, direct)
    written = files_below(folder)
    assert written == sorted(files_below(direct) + [PROVENANCE_NAME])
    for name in written:
        if name.endswith(".safetensors"):
            assert same_safetensors(folder / name, direct / name)
        elif Path(name).name == CHECKSUMS_NAME:  # each folder's record of its own weights (headers may differ in order)
            weights = (folder / name).parent / "model.safetensors"
            assert {file: record["sha256"] for file, record in json.loads((folder / name).read_text())[
                "files"].items()} == {"model.safetensors": sha256_of(weights)}
        elif name != PROVENANCE_NAME:
            assert (folder / name).read_bytes() == (direct / name).read_bytes(), name
    assert revision == f"original-{files[0].sha256[:12]}"  # what result signatures show
    expected, _ = USE[model](str(direct))
    if isinstance(used, dict):
        assert sorted(used) == sorted(expected)
        for key in used:
            np.testing.assert_array_equal(used[key], expected[key])
    else:
        assert list(used) == list(expected)
    assert not (tmp_path / "hf-home" / "capeval" / "downloads" / model.replace("/", "--")).exists()

    online.requests.clear()
    go_offline()
    assert resolved_folder(model) == folder
    assert online.requests == []
