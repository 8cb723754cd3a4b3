"""Shared pytest fixtures: offline Hugging Face settings, tiny converted CLIP models, and the folders of real data.

The human-judgment data and images (``flickr8k/``, ``pascal50s/``, ``examples/``) are found in one place:
``$CAPEVAL_TEST_DATA``, else ``../shared/data`` beside the checkout; the paper texts likewise in
``$CAPEVAL_TEST_PAPERS``, else ``../shared/papers``. Tests that need a folder that is absent are skipped, saying how to
provide it; a folder named by its environment variable that does not exist is an error.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_EVALUATE_OFFLINE"] = "1"

import pytest  # noqa: E402

from fixtures.awkward_images import write_awkward_images  # noqa: E402
from fixtures.clip_checkpoints import TinyClip, make_tiny_clip  # noqa: E402
from fixtures.paths import TESTS_DIR  # noqa: E402


def _shared_folder(variable: str, name: str, holds: str) -> Path:
    """``$variable`` or ``../shared/<name>`` beside the checkout; skips the test when the default is absent."""
    configured = os.environ.get(variable)
    if configured:
        folder = Path(configured).expanduser()
        if not folder.is_dir():
            pytest.fail(f"{variable}={configured} is not a folder")
        return folder
    folder = TESTS_DIR.parent.parent / "shared" / name
    if not folder.is_dir():
        pytest.skip(f"needs {holds}: set {variable} to the folder holding them, or place it at ../shared/{name} "
                    "beside the checkout")
    return folder


@pytest.fixture(scope="session")
def capeval_test_data() -> Path:
    """Folder of the human-judgment data and images: ``flickr8k/``, ``pascal50s/``, ``examples/``."""
    return _shared_folder("CAPEVAL_TEST_DATA", "data", "the human-judgment data and images (flickr8k/, pascal50s/, "
                                                       "examples/)")


@pytest.fixture(scope="session")
def capeval_test_device() -> str:
    """Device of the tests that compare capeval with reference numbers: ``$CAPEVAL_TEST_DEVICE``, default ``cpu``
    (those tests pass it explicitly, so a machine's default device never changes what they check)."""
    import torch

    device = os.environ.get("CAPEVAL_TEST_DEVICE", "cpu")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        pytest.fail(f"CAPEVAL_TEST_DEVICE={device} but CUDA is not available")
    return device


@pytest.fixture
def strict_fp32(capeval_test_device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """IEEE fp32 matmuls and convolutions on CUDA (no TF32) while a parity test runs: TF32 rounds their inputs to 10
    mantissa bits (about 5e-4 relative), a precision choice rather than a parity question."""
    import torch

    if torch.device(capeval_test_device).type == "cuda":
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.fixture(scope="session")
def capeval_test_papers() -> Path:
    """Folder of the papers' plain-text versions (``pacscore-sarto2023.txt``...)."""
    return _shared_folder("CAPEVAL_TEST_PAPERS", "papers", "the papers' text files (pacscore-sarto2023.txt)")


@pytest.fixture(scope="session")
def awkward_images(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """The image files of :mod:`fixtures.awkward_images`, by file name (RGBA, palettes, 16-bit, CMYK, EXIF...)."""
    return write_awkward_images(tmp_path_factory.mktemp("awkward_images"))


@pytest.fixture(scope="session")
def tiny_openai_clip(tmp_path_factory: pytest.TempPathFactory) -> TinyClip:
    """Tiny clip-anytorch CLIP (QuickGELU): ``.model``, ``.checkpoint`` (state dict file), ``.hf_dir``."""
    return make_tiny_clip("openai", tmp_path_factory.mktemp("tiny_openai_clip"))


@pytest.fixture(scope="session")
def tiny_openclip(tmp_path_factory: pytest.TempPathFactory) -> TinyClip:
    """Tiny open_clip CLIP (exact GELU, 0.5 normalisation): ``.model``, ``.checkpoint``, ``.hf_dir``."""
    return make_tiny_clip("openclip", tmp_path_factory.mktemp("tiny_openclip"))
