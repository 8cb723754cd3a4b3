"""``capeval score`` on the example sets: printed corpus scores, per-item output file, errors naming the key."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

import capeval
from capeval.cli import main
from fixtures.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "clipscore"


def printed_scores(stdout: str) -> Dict[str, str]:
    """``{"CLIPScore": "0.1234", ...}`` from the printed ``Label: value`` lines."""
    return dict(line.split(": ", 1) for line in stdout.splitlines() if line)


def expected_result(scorer_class, model: Path, candidates_file: str, with_references: bool,
                    batch_size: int = 64) -> tuple:
    """Image ids in file order and the scorer's result on the example set, computed directly."""
    candidates = json.loads((EXAMPLES / candidates_file).read_text())
    keys: List[str] = list(candidates)
    references = json.loads((EXAMPLES / "refs.json").read_text()) if with_references else None
    result = scorer_class(model=model, batch_size=batch_size).score(
        [EXAMPLES / "images" / f"{key}.jpg" for key in keys],
        [candidates[key] for key in keys],
        [references[key] for key in keys] if references is not None else None,
    )
    return keys, result


def test_score_with_references_prints_and_writes(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    output = tmp_path / "scores.json"
    code = main(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                 "--candidates", str(EXAMPLES / "bad_captions.json"), "--references", str(EXAMPLES / "refs.json"),
                 "--model", str(tiny_openai_clip.hf_dir), "--output", str(output)])
    assert code == 0
    keys, expected = expected_result(capeval.CLIPScore, tiny_openai_clip.hf_dir, "bad_captions.json", True)
    printed = printed_scores(capsys.readouterr().out)
    assert printed == {"CLIPScore": f"{expected['clip_score']:.4f}",
                       "RefCLIPScore": f"{expected['ref_clip_score']:.4f}",
                       "Signature": expected["signature"]}
    report = json.loads(output.read_text())
    assert report["signature"] == expected["signature"]
    assert report["clip_score"] == expected["clip_score"]
    assert report["ref_clip_score"] == expected["ref_clip_score"]
    assert list(report["scores"]) == keys == ["image1", "image2"]
    for index, key in enumerate(keys):
        assert report["scores"][key] == {"clip_score": expected["clip_scores"][index],
                                         "ref_clip_score": expected["ref_clip_scores"][index]}


def test_pacscore_without_references(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    output = tmp_path / "scores.json"
    code = main(["score", "--metric", "pacscore", "--images", str(EXAMPLES / "images"),
                 "--candidates", str(EXAMPLES / "good_captions.json"), "--model", str(tiny_openai_clip.hf_dir),
                 "--batch-size", "1", "--output", str(output)])
    assert code == 0
    keys, expected = expected_result(capeval.PACScore, tiny_openai_clip.hf_dir, "good_captions.json", False, 1)
    printed = printed_scores(capsys.readouterr().out)
    assert printed == {"PAC-S": f"{expected['pac_score']:.4f}", "Signature": expected["signature"]}
    report = json.loads(output.read_text())
    assert report["scores"] == {key: {"pac_score": expected["pac_scores"][i]} for i, key in enumerate(keys)}


def test_single_string_reference_is_one_reference(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    references = {key: refs[0] for key, refs in json.loads((EXAMPLES / "refs.json").read_text()).items()}
    (tmp_path / "refs.json").write_text(json.dumps(references))
    code = main(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                 "--candidates", str(EXAMPLES / "good_captions.json"), "--references", str(tmp_path / "refs.json"),
                 "--model", str(tiny_openai_clip.hf_dir)])
    assert code == 0
    candidates = json.loads((EXAMPLES / "good_captions.json").read_text())
    expected = capeval.CLIPScore(model=tiny_openai_clip.hf_dir).score(
        [EXAMPLES / "images" / f"{key}.jpg" for key in candidates], list(candidates.values()),
        [[references[key]] for key in candidates])
    assert printed_scores(capsys.readouterr().out)["RefCLIPScore"] == f"{expected['ref_clip_score']:.4f}"


def run_failing(arguments: List[str], capsys) -> str:
    """Run the CLI expecting exit code 2; the single stderr line it printed."""
    assert main(arguments) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    return captured.err


def test_missing_image_names_the_key(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(EXAMPLES / "images" / "image1.jpg", images / "image1.jpg")
    error = run_failing(["score", "--metric", "clipscore", "--images", str(images),
                         "--candidates", str(EXAMPLES / "good_captions.json"),
                         "--model", str(tiny_openai_clip.hf_dir)], capsys)
    assert "no image file for key 'image2'" in error


def test_key_missing_from_references_names_it(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    references = json.loads((EXAMPLES / "refs.json").read_text())
    del references["image2"]
    (tmp_path / "refs.json").write_text(json.dumps(references))
    error = run_failing(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                         "--candidates", str(EXAMPLES / "good_captions.json"), "--references",
                         str(tmp_path / "refs.json"), "--model", str(tiny_openai_clip.hf_dir)], capsys)
    assert "key 'image2'" in error and "but not in" in error


def test_key_missing_from_candidates_names_it(tiny_openai_clip, tmp_path: Path, capsys) -> None:
    (tmp_path / "candidates.json").write_text(json.dumps({"image1": "two cats"}))
    error = run_failing(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                         "--candidates", str(tmp_path / "candidates.json"), "--references",
                         str(EXAMPLES / "refs.json"), "--model", str(tiny_openai_clip.hf_dir)], capsys)
    assert "key 'image2'" in error and "refs.json but not in" in error


@pytest.mark.parametrize(
    "content, message",
    [
        ('["a cat"]', "must hold a JSON object"),
        ('{"image1": "a cat", "image2": ""}', "candidate 'image2'"),
        ('{"image1": "a cat",', "not valid JSON"),
    ],
)
def test_bad_candidates_file(content: str, message: str, tmp_path: Path, capsys) -> None:
    (tmp_path / "candidates.json").write_text(content)
    error = run_failing(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                         "--candidates", str(tmp_path / "candidates.json")], capsys)
    assert message in error


def test_missing_candidates_file(tmp_path: Path, capsys) -> None:
    error = run_failing(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
                         "--candidates", str(tmp_path / "absent.json")], capsys)
    assert "absent.json" in error


def test_two_files_for_one_key(tmp_path: Path, capsys) -> None:
    images = tmp_path / "images"
    shutil.copytree(EXAMPLES / "images", images)
    shutil.copy(images / "image1.jpg", images / "image1.PNG")
    error = run_failing(["score", "--metric", "clipscore", "--images", str(images),
                         "--candidates", str(EXAMPLES / "good_captions.json")], capsys)
    assert "several image files for key 'image1'" in error


def test_model_missing_offline(capsys) -> None:
    error = run_failing(["score", "--metric", "pacscore", "--images", str(EXAMPLES / "images"),
                         "--candidates", str(EXAMPLES / "good_captions.json"),
                         "--model", "capeval-test/no-such-model"], capsys)
    assert "capeval-test/no-such-model" in error and "local folder" in error


def test_batch_size_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"),
              "--candidates", str(EXAMPLES / "good_captions.json"), "--batch-size", "0"])
    assert exit_info.value.code == 2
    assert "must be at least 1, got 0" in capsys.readouterr().err


KEEP_GROUP_SCRIPT = """
import sys
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1)
from capeval.cli import main
code = main(["score", "--metric", "clipscore", "--images", sys.argv[2], "--candidates", sys.argv[1] + "/missing.json"])
print(code, dist.is_initialized())
"""


def test_a_process_group_the_caller_made_is_left_in_place(tmp_path: Path) -> None:
    """The command leaves only a process group it joined itself (under ``accelerate launch``), not its caller's."""
    import subprocess
    import sys

    completed = subprocess.run([sys.executable, "-c", KEEP_GROUP_SCRIPT, str(tmp_path), str(EXAMPLES / "images")],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.split() == ["2", "True"]  # the missing candidates file is refused; the group remains
