"""Backbone loading: one copy per process, offline-first hub resolution, clear errors."""
from __future__ import annotations

import shutil
import socket

import huggingface_hub.constants
import pytest
import torch

from capeval import ModelNotAvailableError, PACScore
from capeval.hub import LoadedModels
from capeval.registry import MODELS
from capeval.models.clip.loading import load_backbone
from capeval.options import PRECISION_DTYPES
from capeval.runtime import precision_dtype



def test_a_backbone_is_loaded_once_per_model_device_and_precision(tiny_openai_clip) -> None:
    first = load_backbone(tiny_openai_clip.hf_dir, device="cpu")
    assert load_backbone(str(tiny_openai_clip.hf_dir), device="cpu") is first
    half = load_backbone(tiny_openai_clip.hf_dir, device="cpu", precision="fp16")
    assert half is not first and next(half.model.parameters()).dtype.itemsize == 2


def test_loading_prints_no_progress_bar_and_keeps_the_setting(tiny_openai_clip, monkeypatch, capfd) -> None:
    from transformers.utils import logging as transformers_logging

    from capeval.models.clip import loading

    monkeypatch.setattr(loading, "_LOADED", LoadedModels())  # load again
    transformers_logging.enable_progress_bar()
    load_backbone(tiny_openai_clip.hf_dir, device="cpu")
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # the user's setting is back


def test_each_precision_name_resolves_to_its_dtype() -> None:
    assert {name: precision_dtype(name) for name in PRECISION_DTYPES} == {
        "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def test_unknown_precision_is_refused(tiny_openai_clip) -> None:
    with pytest.raises(ValueError, match="precision must be one of"):
        load_backbone(tiny_openai_clip.hf_dir, precision="fp8")


def test_a_model_missing_offline_says_how_to_fix_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match="not in the local Hugging Face cache.*Run once with network "
                                                     "access.*pass model=<local folder>"):
        load_backbone("capeval/not-a-cached-model")


def _block_network(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_default_model_loads_from_a_populated_cache_without_network(tiny_openai_clip, tmp_path, monkeypatch,
                                                                    capeval_test_data) -> None:
    """A hub cache holding the pinned revision of the default PAC-S model, as a first online run leaves it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--capeval--pacs-clip-vit-b-32"
    shutil.copytree(tiny_openai_clip.hf_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / MODELS["capeval/pacs-clip-vit-b-32"].revision).write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    _block_network(monkeypatch)
    scorer = PACScore(device="cpu")
    result = scorer.score([capeval_test_data / "examples" / "pacscore" / "images" / "image1.jpg"], ["A white dog is laying on the ground ."])
    assert "model:capeval/pacs-clip-vit-b-32|revision:v1.0|w:2.0" in result["signature"]
    direct = PACScore(model=tiny_openai_clip.hf_dir, device="cpu").score(
        [capeval_test_data / "examples" / "pacscore" / "images" / "image1.jpg"], ["A white dog is laying on the ground ."])
    assert result["pac_scores"] == direct["pac_scores"]
