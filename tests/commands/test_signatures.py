"""One signature per configuration, whatever the interface: ``capeval score`` given a model folder relative to the
working directory, the Python API given its absolute path and the evaluate module record one signature; EMScore's
records the video decoder only where video files were decoded."""
from __future__ import annotations

import json
from pathlib import Path

import evaluate
import numpy as np
import pytest

import capeval
from capeval.cli import main
from fixtures.paths import REPO_ROOT
from fixtures.videos import write_scored_clips

EXAMPLES = REPO_ROOT / "examples" / "clipscore"
CANDIDATES = json.loads((EXAMPLES / "good_captions.json").read_text())
REFERENCES = json.loads((EXAMPLES / "refs.json").read_text())


@pytest.mark.parametrize("family", ["clipscore", "pacscore"])
def test_command_api_and_module_sign_alike(family: str, tiny_openai_clip, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_openai_clip.hf_dir
    monkeypatch.chdir(model.parent)
    output = tmp_path / "scores.json"
    assert main(["score", "--metric", family, "--images", str(EXAMPLES / "images"), "--candidates",
                 str(EXAMPLES / "good_captions.json"), "--references", str(EXAMPLES / "refs.json"), "--model",
                 model.name, "--device", "cpu", "--output", str(output)]) == 0
    command = json.loads(output.read_text())["signature"]
    keys = list(CANDIDATES)
    images = [str(EXAMPLES / "images" / f"{key}.jpg") for key in keys]
    candidates, references = [CANDIDATES[key] for key in keys], [REFERENCES[key] for key in keys]
    scorer = capeval.registry.FAMILIES[family].scorer_class()
    api = scorer(model=model.resolve(), device="cpu").score(images, candidates, references)["signature"]
    module = evaluate.load(str(REPO_ROOT / "metrics" / family)).compute(
        predictions=candidates, images=images, references=references, model=model.name, device="cpu")["signature"]
    assert command == api == module
    assert api.startswith(f"{scorer.family.main_result}|model:{model.resolve()}|revision:local-")


def test_the_decoder_is_recorded_only_where_video_files_were_decoded(tiny_openai_clip, tmp_path: Path) -> None:
    pytest.importorskip("av")
    scorer = capeval.EMScore(model=tiny_openai_clip.hf_dir, device="cpu")
    candidates = ["a walk", "a road"]
    features = [np.random.default_rng(index).standard_normal((3, 64)).astype(np.float32) for index in range(2)]
    np.save(tmp_path / "walk.npy", features[0])
    from_features = scorer.score([tmp_path / "walk.npy", capeval.VideoFeatures(features[1])], candidates)
    assert "|decoder:" not in from_features["signature"]
    videos = write_scored_clips(tmp_path)[:2]
    from_files = scorer.score(videos, candidates)["signature"]
    assert "|frames:all|decoder:PyAV " in from_files
    assert from_files.split("|decoder:")[0] == from_features["signature"].split("|precision:")[0]
    assert "|decoder:" not in scorer.score([capeval.VideoFeatures(features[0])] * 2, candidates)["signature"]
