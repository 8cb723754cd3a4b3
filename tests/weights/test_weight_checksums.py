"""Converted weights record their sha256 (``capeval_checksums.json``) and every loader checks it: damaged or truncated
bytes are refused naming the file and what to do, a folder with no record loads as it is, and a copy is hashed once."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Dict

import pytest
import torch

from capeval import hub
from capeval.hub import CHECKSUMS_NAME, DamagedWeightsError, LoadedModels, check_weights, weights_problem
from capeval.models.bridge.loading import load_bridge
from capeval.models.clip import loading as clip_loading
from capeval.models.regions.detectors import load_detector
from capeval.models.scan.loading import load_scan_model
from capeval.models.vilbert.loading import load_vilbert_folder
from capeval.transfers import sha256_of
from fixtures.bridge_models import make_tiny_bridge, tiny_bridge_config
from fixtures.stand_in_originals import DIRECT_CONVERSIONS

WEIGHTS = "model.safetensors"

def load_clip(folder: Path) -> object:
    """The backbone read from ``folder`` (not the one the loader keeps per process)."""
    clip_loading._LOADED.clear()
    return clip_loading.load_backbone(folder, device="cpu")


LOADERS: Dict[str, Callable[[Path], object]] = {
    "capeval/pacs-clip-vit-b-32": load_clip,
    "capeval/tiger-scan-coco": load_scan_model,
    "capeval/vilbert-multi-task": lambda folder: load_vilbert_folder(folder, torch.device("cpu"), torch.float32),
    "capeval/bottom-up-frcnn-r101-vg": load_detector,
    "capeval/vilbert-detector-x152-fpn": load_detector,
}
"""One model per converter (CLIP, SCAN, ViLBERT and both region detectors) -> its loader from a folder."""


@pytest.fixture(autouse=True)
def fresh_clip_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's kept backbones are this test's alone."""
    monkeypatch.setattr(clip_loading, "_LOADED", LoadedModels())


def damage(path: Path, offset_from_end: int = 1000) -> None:
    """Flip one byte inside the tensor data of ``path`` (its size unchanged)."""
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def recorded(folder: Path) -> Dict[str, Dict[str, object]]:
    return json.loads((folder / CHECKSUMS_NAME).read_text(encoding="utf-8"))["files"]


@pytest.mark.parametrize("model", sorted(LOADERS))
def test_every_converter_records_the_checksum_and_every_loader_refuses_damaged_bytes(
        model: str, stand_ins: Path, tmp_path: Path) -> None:
    folder = tmp_path / "converted"
    DIRECT_CONVERSIONS[model](stand_ins, folder)
    weights = folder / WEIGHTS
    assert list(recorded(folder)) == [WEIGHTS]
    assert recorded(folder)[WEIGHTS]["sha256"] == sha256_of(weights)
    assert recorded(folder)[WEIGHTS]["size"] == weights.stat().st_size
    LOADERS[model](folder)

    original = weights.read_bytes()
    damage(weights)
    with pytest.raises(DamagedWeightsError) as raised:
        LOADERS[model](folder)
    message = str(raised.value)
    assert f"{weights} has sha256 {sha256_of(weights)}, not the {hashlib.sha256(original).hexdigest()} recorded" in message
    assert "its bytes are damaged or were changed. Do not use these weights" in message
    assert "re-run the conversion of conversion/convert_<model>.py" in message

    weights.write_bytes(original[:-1000])
    with pytest.raises(DamagedWeightsError, match=f"has {len(original) - 1000:,} bytes, not the {len(original):,} "
                                                  "recorded in capeval_checksums.json when it was written"):
        LOADERS[model](folder)

    weights.write_bytes(original)  # the same bytes again (a new modification time): hashed and loaded
    LOADERS[model](folder)


def test_a_folder_without_a_record_loads_and_an_unreadable_record_is_named(stand_ins: Path, tmp_path: Path) -> None:
    folder = tmp_path / "scan"
    DIRECT_CONVERSIONS["capeval/tiger-scan-coco"](stand_ins, folder)
    (folder / CHECKSUMS_NAME).unlink()  # as a folder written by hand or by an older capeval
    damage(folder / WEIGHTS)
    assert weights_problem(folder) is None  # nothing to check against: the bytes load as they are
    load_scan_model(folder)
    (folder / CHECKSUMS_NAME).write_text("{not json", encoding="utf-8")
    with pytest.raises(DamagedWeightsError, match=f"{folder / CHECKSUMS_NAME} is not a readable record of weight "
                                                  "checksums .JSONDecodeError"):
        check_weights(folder)


def test_a_copy_is_hashed_once_and_a_read_only_folder_on_every_load(stand_ins: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    converted = tmp_path / "converted"
    DIRECT_CONVERSIONS["capeval/tiger-scan-coco"](stand_ins, converted)
    hashed = []
    real_sha256_of = sha256_of

    def counting(path: Path) -> str:
        hashed.append(Path(path).name)
        return real_sha256_of(path)

    monkeypatch.setattr("capeval.transfers.sha256_of", counting)
    check_weights(converted)
    assert hashed == []  # the converter hashed what it wrote and recorded the file's modification time
    copy = tmp_path / "copy"
    shutil.copytree(converted, copy, copy_function=shutil.copy)  # new modification times
    check_weights(copy)
    check_weights(copy)
    assert hashed == [WEIGHTS]
    assert recorded(copy)[WEIGHTS]["checked_mtime_ns"] == (copy / WEIGHTS).stat().st_mtime_ns

    read_only = tmp_path / "read-only"
    shutil.copytree(converted, read_only, copy_function=shutil.copy)

    def unwritable(folder: Path, files: object) -> None:
        raise PermissionError(13, "Permission denied", str(folder / CHECKSUMS_NAME))

    monkeypatch.setattr(hub, "_write_checksums", unwritable)
    check_weights(read_only)
    check_weights(read_only)
    assert hashed == [WEIGHTS] * 3


def test_a_saved_bridge_model_records_its_checksum(tiny_openai_clip, tmp_path: Path) -> None:
    folder = make_tiny_bridge(tmp_path / "bridge", tiny_bridge_config(tiny_openai_clip.hf_dir, tmp_path / "blip"))
    assert recorded(folder)[WEIGHTS]["sha256"] == sha256_of(folder / WEIGHTS)
    load_bridge(folder, device="cpu")
    damage(folder / WEIGHTS, 10)
    with pytest.raises(DamagedWeightsError, match="capeval train bridge"):
        load_bridge(folder, device="cpu")


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_converted_folders_and_their_records_follow_the_umask(umask: int, stand_ins: Path, tmp_path: Path) -> None:
    """Every file a converter writes, weights and checksum records included, and a record written again on a load,
    has the mode of any new file under the process's umask (a cache shared between users)."""
    previous = os.umask(umask)
    try:
        folder = tmp_path / "polos"  # a folder with weights of its own and two subfolders with theirs
        DIRECT_CONVERSIONS["capeval/polos-clip-vit-b-32"](stand_ins, folder)
        copy = tmp_path / "copy"
        shutil.copytree(folder, copy, copy_function=shutil.copy)
        check_weights(copy)  # new modification times: the record is written again
    finally:
        os.umask(previous)
    modes = {str(path.relative_to(tmp_path)): stat.S_IMODE(path.stat().st_mode) for path in tmp_path.rglob("*")}
    assert {name for name in modes if name.endswith(CHECKSUMS_NAME)} == {
        f"{top}/{sub}{CHECKSUMS_NAME}" for top in ("polos", "copy") for sub in ("", "clip/", "encoder/")}
    assert {name: mode for name, mode in modes.items() if mode != (0o777 if (tmp_path / name).is_dir() else 0o666)
            & ~umask} == {}


@pytest.mark.parametrize("umask", [0o022, 0o007])
def test_new_file_mode_without_proc_status(umask: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``/proc/self/status`` cannot be read, the mode of a new file comes from the umask set and put back."""
    def no_status(*args: object, **kwargs: object) -> None:
        raise FileNotFoundError("/proc/self/status")

    previous = os.umask(umask)
    try:
        monkeypatch.setattr(hub, "open", no_status, raising=False)
        assert hub._new_file_mode() == 0o666 & ~umask
        assert os.umask(umask) == umask  # put back as it was
    finally:
        os.umask(previous)
