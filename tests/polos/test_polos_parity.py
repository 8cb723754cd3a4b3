"""Polos per item against the ``polos`` 0.1.3 wheel's own ``predict`` on the same tiny checkpoint
(``tests/data/polos/NOTE.md``), and what the wheel's batching changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

from capeval.scorers.polos import Polos
from fixtures.paths import REPO_ROOT, TESTS_DATA, TESTS_DIR
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


DISTRIBUTED_SCRIPT = """
import json, sys
from capeval import Polos
from fixtures.polos_checkpoints import ITEMS, parity_images
model, out = sys.argv[1], sys.argv[2]
items = ITEMS + ITEMS[::-1]
scorer = Polos(model=model, device="cpu", num_workers=0, batch_size=2, text_batch_size=3)
result = scorer.score(parity_images() + parity_images()[::-1], [c for c, _ in items], [r for _, r in items])
result["encoded"] = scorer.engine.encoded
assert scorer.engine.state.num_processes == 2
json.dump(result, open(f"{out}/rank{scorer.engine.state.process_index}.json", "w"))
scorer.engine.state.destroy_process_group()
"""


def test_two_processes_equal_one_per_item_in_order(polos_dir: Path, tmp_path: Path) -> None:
    """Under ``accelerate launch`` the images, prompted captions and sentences to encode are dealt out over the two
    processes in batches; every process gets every item's score, in order, equal to one process's."""
    script = tmp_path / "score.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29520", str(script), str(polos_dir), str(tmp_path)]
    # the launched processes import this checkout's capeval and the tests' fixtures
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1",
                                    "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(TESTS_DIR)])})
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    items = ITEMS + ITEMS[::-1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched process (OMP_NUM_THREADS=1), so sums run in the same order
    try:
        scorer = Polos(model=polos_dir, device="cpu", num_workers=0, batch_size=2, text_batch_size=3)
        single = scorer.score(parity_images() + parity_images()[::-1], [candidate for candidate, _ in items],
                              [refs for _, refs in items])
    finally:
        torch.set_num_threads(threads)
    encoded = [rank.pop("encoded") for rank in ranks]
    assert ranks == [single, single]
    np.testing.assert_allclose(single["polos_scores"], GOLDENS["polos_scores"] + GOLDENS["polos_scores"][::-1],
                               rtol=0, atol=1e-6)
    for kind, total in scorer.engine.encoded.items():  # each process encoded only its share of the distinct rows
        assert all(0 < share[kind] < total for share in encoded) and sum(share[kind] for share in encoded) == total
