"""Polos per item against the ``polos`` 0.1.3 wheel's own ``predict`` on the same tiny checkpoint
(``tests/data/polos/NOTE.md``), and what the wheel's batching changes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from capeval.scorers.polos import Polos
from fixtures.paths import TESTS_DATA
from fixtures.polos_checkpoints import ITEMS, parity_images

GOLDENS: Dict[str, List[float]] = json.loads((TESTS_DATA / "polos" / "goldens.json").read_text())


def score(model: Path, device: str = "cpu", **options: object) -> Dict[str, object]:
    scorer = Polos(model=model, device=device, num_workers=0, **options)
    return scorer.score(parity_images(), [candidate for candidate, _ in ITEMS], [refs for _, refs in ITEMS])


def test_scores_equal_the_wheel_per_item(polos_dir: Path, capeval_test_device: str, strict_fp32: None) -> None:
    result = score(polos_dir, capeval_test_device, precision="fp32")
    np.testing.assert_allclose(result["polos_scores"], GOLDENS["polos_scores"], rtol=0, atol=1e-6)
    assert result["polos_score"] == pytest.approx(np.mean(GOLDENS["polos_scores"]), abs=1e-6)
    assert result["signature"].startswith("polos_score|model:")
    assert "|layer:mix|pool:cls|statistics:per-sentence|precision:fp32|" in result["signature"]


def test_batch_sizes_and_chunks_do_not_change_scores(polos_dir: Path) -> None:
    """The wheel's batches share layer-norm statistics and cut references to the batch's fewest (its batched scores
    differ from its own per-item ones); capeval's per-item scores are the same whatever the batching."""
    baseline = np.array(score(polos_dir)["polos_scores"])
    for options in ({"text_batch_size": 1, "batch_size": 1, "chunk_size": 1}, {"text_batch_size": 3, "chunk_size": 4}):
        np.testing.assert_allclose(score(polos_dir, **options)["polos_scores"], baseline, rtol=0, atol=1e-6)
    wheel_batched = np.array(GOLDENS["batched_scores"])
    assert np.abs(wheel_batched - np.array(GOLDENS["polos_scores"])).max() > 1e-2


def test_one_item_alone_scores_as_in_a_chunk(polos_dir: Path) -> None:
    scorer = Polos(model=polos_dir, device="cpu", num_workers=0)
    images = parity_images()
    candidate, refs = ITEMS[2]
    alone = scorer.score([images[2]], [candidate], [refs])["polos_scores"][0]
    assert alone == pytest.approx(GOLDENS["polos_scores"][2], abs=1e-6)
