"""TIGEr parity with the original code (CapEval ``tiger.py`` + SCAN ``model.py``): goldens in tests/data/tiger.

SCAN checkpoints are synthesised from the recipe the goldens were made with, written in the original Python 2
on-disk layout, converted with ``conversion/convert_scan.py`` and scored; every per-item grounding, RRS, WDS and
TIGEr value must equal the original's within 1e-6.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capeval.functional import tigerscore as F
from capeval.models.scan import load_scan
from capeval.models.scan.tokenization import punkt_parameters
from fixtures.tiger_checkpoints import (convert_original, load_goldens, sha256, synthetic_regions, synthetic_state,
                                        vocab_words)

GOLDENS = load_goldens()
CASES = GOLDENS["cases"]
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def test_punkt(nltk_data: Path):
    """The Punkt parameters the goldens were made with (a few abbreviations, nothing else)."""
    return punkt_parameters(nltk_data / "tokenizers" / "punkt_tab" / "english")


def convert_synthetic(name: str, folder: Path) -> Path:
    """Synthesise model ``name`` of the goldens, save it as the original checkpoint, convert it with the CLI."""
    dims = CASES["models"][name]
    image_state, text_state = synthetic_state(dims["vocab_size"], dims["word_dim"], dims["embed_size"],
                                              dims["img_dim"], dims["seed"])
    recorded = GOLDENS["models"][name]["weight_sha256"]
    rebuilt = {f"img_enc.{k}": sha256(v.numpy()) for k, v in image_state.items()}
    rebuilt.update({f"txt_enc.{k}": sha256(v.numpy()) for k, v in text_state.items()})
    assert rebuilt == recorded, "the synthetic weights differ from those the goldens were made with"
    return convert_original(folder, image_state, text_state, vocab_words(CASES["vocab_words"], dims["vocab_size"]))


@pytest.mark.parametrize("name", ["tiny", "full"])
def test_scores_match_original(name: str, tmp_path: Path, test_punkt) -> None:
    scan = load_scan(convert_synthetic(name, tmp_path), device="cpu", punkt=test_punkt)
    dims, golden = CASES["models"][name], GOLDENS["models"][name]
    regions = {}
    for image in CASES["images"]:
        features = synthetic_regions(dims["img_dim"], image["seed"], image["tied_rows"])
        assert sha256(features) == golden["region_sha256"][image["id"]]
        regions[image["id"]] = scan.model.encode_regions(__import__("torch").from_numpy(features)[None])[0].numpy()
    items = CASES["items"]
    texts = sorted({t for item in items for t in [item["candidate"], *item["references"]]})
    words = dict(zip(texts, scan.model.encode_token_ids([scan.tokenizer.encode(t) for t in texts])))
    r = np.stack([F.mean_reference_grounding([F.grounding(regions[it["image"]], words[ref].numpy(), 9.0)
                                              for ref in it["references"]]) for it in items])
    c = np.stack([F.grounding(regions[it["image"]], words[it["candidate"]].numpy(), 9.0) for it in items])
    np.testing.assert_allclose(r, golden["r"], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(c, golden["c"], rtol=0, atol=TOLERANCE)
    scores = F.tiger(r, c)
    assert scores.undefined.total() == 0
    np.testing.assert_allclose(scores.rrs, golden["rrs"], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(scores.wds, golden["wds"], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(scores.tiger, golden["tiger"], rtol=0, atol=TOLERANCE)


def test_functional_matches_original_on_designed_vectors() -> None:
    """Ties in ``c`` with different relevances, negative groundings, norms whose squares underflow to 0."""
    rows = GOLDENS["functional"]
    for row in rows:
        scores = F.tiger(np.array([row["r"]]), np.array([row["c"]]))
        assert scores.rrs[0] == pytest.approx(row["rrs"], abs=1e-12)
        assert scores.wds[0] == pytest.approx(row["wds"], abs=1e-12)
        assert scores.tiger[0] == pytest.approx(row["tiger"], abs=1e-12)
