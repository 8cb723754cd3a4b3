"""The whole path a new user takes, with the hub replaced by a local folder.

Convert a PAC-S checkpoint with the command line, plan the publication with ``--dry-run``, lay the planned files out
as the hub cache would hold them after a first download, then score the official example set through the metric
module loaded from its folder and through ``capeval score``, without naming the model (the pinned default is used).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import evaluate
import huggingface_hub.constants

from capeval import PACScore
from conversion.publish import main as publish
from fixtures.clip_checkpoints import build_tiny_openai_clip, save_pacs_checkpoint
from fixtures.model_cards import make_card_folder
from fixtures.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "pacscore"


def test_convert_publish_dry_run_then_score_the_example_set(tmp_path, monkeypatch) -> None:
    original = save_pacs_checkpoint(build_tiny_openai_clip(), tmp_path / "clip_ViT-B-32.pth")
    converted = tmp_path / "converted"
    subprocess.run([sys.executable, "-m", "conversion.convert_clip", "--checkpoint", str(original),
                    "--out", str(converted), "--arch", "openai"], cwd=REPO_ROOT, check=True)
    card = make_card_folder(tmp_path / "cards", converted)

    model_plan, space_plan = publish(["--dry-run", "--tag", "v1.0", "--model", str(card), str(converted),
                                      str(original), "--space", str(REPO_ROOT / "metrics" / "pacscore")])
    assert (model_plan.repo_id, space_plan.repo_id) == ("capeval/pacs-clip-vit-b-32", "capeval/pacscore")

    hub_cache = tmp_path / "hub-cache"
    commit = "f" * 40
    snapshot = hub_cache / "models--capeval--pacs-clip-vit-b-32" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for planned in model_plan.files:
        payload = planned.payload
        (snapshot / planned.path_in_repo).write_bytes(payload if isinstance(payload, bytes) else payload.read_bytes())
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "v1.0").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))

    ids = sorted(json.loads((EXAMPLES / "good_captions.json").read_text()))
    candidates = json.loads((EXAMPLES / "good_captions.json").read_text())
    references = json.loads((EXAMPLES / "refs.json").read_text())
    images = [str(EXAMPLES / "images" / f"{key}.jpg") for key in ids]
    metric = evaluate.load(str(REPO_ROOT / "metrics" / "pacscore"))
    result = metric.compute(predictions=[candidates[k] for k in ids], images=images,
                            references=[references[k] for k in ids], device="cpu")
    assert sorted(result) == ["pac_score", "pac_scores", "ref_pac_score", "ref_pac_scores", "signature"]
    assert result["signature"] == ("pac_score|model:capeval/pacs-clip-vit-b-32|revision:v1.0|w:2.0"
                                   "|prompt:'A photo depicts '|precision:fp32|capeval:0.1.0")
    direct = PACScore(model=converted, device="cpu").score(images, [candidates[k] for k in ids],
                                                           [references[k] for k in ids])
    assert result["pac_scores"] == direct["pac_scores"] and result["ref_pac_scores"] == direct["ref_pac_scores"]

    output = tmp_path / "scores.json"
    completed = subprocess.run(
        [sys.executable, "-m", "capeval.cli", "score", "--metric", "pacscore", "--images", str(EXAMPLES / "images"),
         "--candidates", str(EXAMPLES / "good_captions.json"), "--references", str(EXAMPLES / "refs.json"),
         "--device", "cpu", "--output", str(output)],
        capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_CACHE": str(hub_cache)})
    assert f"PAC-S: {result['pac_score']:.4f}" in completed.stdout
    assert f"RefPAC-S: {result['ref_pac_score']:.4f}" in completed.stdout
    written = json.loads(output.read_text())
    assert written["signature"] == result["signature"]
    assert sorted(written["scores"]) == ids
