"""``capeval score`` on the example sets and on synthesized videos: printed corpus scores, per-item output file, errors
naming the key or line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

import capeval
from capeval.cli import main
from capeval.inputs import TruncationWarning
from capeval.registry import EMSCORE_RESULT_KEYS
from fixtures.paths import REPO_ROOT
from fixtures.videos import SCORED_CLIPS, write_scored_clips

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


def test_only_the_main_process_prints_and_writes(tiny_openai_clip, tmp_path: Path, monkeypatch, capsys) -> None:
    from capeval import runtime

    real = runtime.process_state

    class OtherProcess:
        """This process's state, but not the main process's (as rank 1 under accelerate launch)."""

        is_main_process = False

        def __getattr__(self, name: str) -> object:
            return getattr(real(), name)

    monkeypatch.setattr(runtime, "process_state", OtherProcess)
    assert main(["score", "--metric", "clipscore", "--images", str(EXAMPLES / "images"), "--candidates",
                 str(EXAMPLES / "good_captions.json"), "--model", str(tiny_openai_clip.hf_dir), "--output",
                 str(tmp_path / "scores.json")]) == 0
    assert capsys.readouterr().out == "" and not (tmp_path / "scores.json").exists()


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


# ---------------------------------------------------------------------------------------------------------------------
# Videos: --videos FOLDER, --jsonl FILE, EMScore's options
# ---------------------------------------------------------------------------------------------------------------------

VIDEO_CANDIDATES = {"walk": "a cat sits on a mat .", "road": "two dogs run along the road .",
                    "park": "children play in a green park ."}
VIDEO_REFERENCES = {"walk": ["a cat on a mat .", "a grey cat is sitting ."], "road": "dogs running .",
                    "park": ["kids are playing in a park .", "a park with children .", "children run on the grass ."]}
VIDEO_IDS = [Path(clip.name).stem for clip in SCORED_CLIPS]


@pytest.fixture(scope="module")
def video_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("videos")
    write_scored_clips(folder)
    return folder


@pytest.fixture()
def caption_files(tmp_path: Path) -> Dict[str, Path]:
    files = {"candidates": tmp_path / "candidates.json", "references": tmp_path / "references.json"}
    files["candidates"].write_text(json.dumps(VIDEO_CANDIDATES))
    files["references"].write_text(json.dumps(VIDEO_REFERENCES))
    return files


def video_references() -> List[List[str]]:
    return [[refs] if isinstance(refs, str) else refs for refs in (VIDEO_REFERENCES[key] for key in VIDEO_IDS)]


def test_emscore_on_a_video_folder(tiny_openai_clip, video_folder: Path, caption_files: Dict[str, Path],
                                   tmp_path: Path, capsys) -> None:
    output = tmp_path / "scores.json"
    code = main(["score", "--metric", "emscore", "--videos", str(video_folder), "--candidates",
                 str(caption_files["candidates"]), "--references", str(caption_files["references"]), "--model",
                 str(tiny_openai_clip.hf_dir), "--num-frames", "4", "--output", str(output)])
    assert code == 0
    expected = capeval.EMScore(model=tiny_openai_clip.hf_dir, num_frames=4).score(
        [video_folder / clip.name for clip in SCORED_CLIPS], [VIDEO_CANDIDATES[key] for key in VIDEO_IDS],
        video_references())
    captured = capsys.readouterr()
    assert printed_scores(captured.out) == {**{original: f"{expected[key]:.4f}"
                                               for key, original in EMSCORE_RESULT_KEYS.items()},
                                            "Signature": expected["signature"]}
    assert "|frames:4|" in expected["signature"] and "encoding video frames" in captured.err  # a progress bar
    report = json.loads(output.read_text())
    assert report["metric"] == "emscore" and report["signature"] == expected["signature"]
    assert list(report["scores"]) == list(VIDEO_CANDIDATES)
    for index, key in enumerate(VIDEO_IDS):
        assert report["scores"][key] == {name: expected[f"{name}s"][index] for name in EMSCORE_RESULT_KEYS}


def test_emscore_on_feature_files_without_idf(tiny_openai_clip, caption_files: Dict[str, Path], tmp_path: Path,
                                              capsys) -> None:
    folder = tmp_path / "features"
    folder.mkdir()
    rng = np.random.default_rng(0)
    features = {key: rng.standard_normal((3 + index, 64)).astype(np.float32) for index, key in enumerate(VIDEO_IDS)}
    np.save(folder / "walk.npy", features["walk"])
    torch.save(torch.from_numpy(features["road"]), folder / "road.pt")
    np.save(folder / "park.npy", features["park"])
    code = main(["score", "--metric", "emscore", "--videos", str(folder), "--candidates",
                 str(caption_files["candidates"]), "--model", str(tiny_openai_clip.hf_dir), "--no-idf"])
    assert code == 0
    expected = capeval.EMScore(model=tiny_openai_clip.hf_dir, idf=False).score(
        [capeval.VideoFeatures(features[key]) for key in VIDEO_IDS], [VIDEO_CANDIDATES[key] for key in VIDEO_IDS])
    assert printed_scores(capsys.readouterr().out) == {
        **{original: f"{expected[key]:.4f}" for key, original in EMSCORE_RESULT_KEYS.items() if key in expected},
        "Signature": expected["signature"]}
    assert "|idf:none|" in expected["signature"] and "|decoder:" not in expected["signature"]  # nothing decoded


def test_emscore_on_references_alone(tiny_openai_clip, caption_files: Dict[str, Path], capsys) -> None:
    code = main(["score", "--metric", "emscore", "--candidates", str(caption_files["candidates"]), "--references",
                 str(caption_files["references"]), "--model", str(tiny_openai_clip.hf_dir)])
    assert code == 0
    expected = capeval.EMScore(model=tiny_openai_clip.hf_dir).score(
        None, [VIDEO_CANDIDATES[key] for key in VIDEO_IDS], video_references())
    printed = printed_scores(capsys.readouterr().out)
    assert printed["EMScore(X,X*)['full_F']"] == f"{expected['emscore_refs_full_f']:.4f}"
    assert not any(label.startswith("EMScore(X,V") for label in printed)


def write_jsonl(path: Path, records: List[dict]) -> Path:
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n\n")
    return path


def test_pacscore_on_a_jsonl_file(tiny_openai_clip, video_folder: Path, tmp_path: Path, capsys) -> None:
    """Video PAC-S / RefPAC-S; a video on several lines, paths relative to the file's folder, an absolute path."""
    (tmp_path / "clips").symlink_to(video_folder, target_is_directory=True)
    records = [{"video": "clips/walk.mp4", "candidate": "a cat sits on a mat .", "references": ["a cat on a mat ."]},
               {"video": "clips/walk.mp4", "candidate": "a dog sits on a mat .", "references": "a cat on a mat ."},
               {"video": str(video_folder / "park.mkv"), "candidate": "children play .",
                "references": ["kids are playing in a park .", "a park with children ."]}]
    output = tmp_path / "scores.json"
    code = main(["score", "--metric", "pacscore", "--jsonl", str(write_jsonl(tmp_path / "items.jsonl", records)),
                 "--model", str(tiny_openai_clip.hf_dir), "--output", str(output)])
    assert code == 0
    expected = capeval.PACScore(model=tiny_openai_clip.hf_dir).score(
        videos=[video_folder / "walk.mp4", video_folder / "walk.mp4", video_folder / "park.mkv"],
        candidates=[record["candidate"] for record in records],
        references=[["a cat on a mat ."], ["a cat on a mat ."], records[2]["references"]])
    assert printed_scores(capsys.readouterr().out) == {"PAC-S": f"{expected['pac_score']:.4f}",
                                                       "RefPAC-S": f"{expected['ref_pac_score']:.4f}",
                                                       "Signature": expected["signature"]}
    report = json.loads(output.read_text())
    assert report["scores"] == [{"line": index + 1, "video": record["video"],
                                 "pac_score": expected["pac_scores"][index],
                                 "ref_pac_score": expected["ref_pac_scores"][index]}
                                for index, record in enumerate(records)]


def test_emscore_jsonl_with_an_idf_corpus(tiny_openai_clip, video_folder: Path, tmp_path: Path, capsys) -> None:
    records = [{"video": str(video_folder / clip.name), "candidate": VIDEO_CANDIDATES[key]}
               for clip, key in zip(SCORED_CLIPS, VIDEO_IDS)]
    records[1]["candidate"] = "a long caption about two dogs on a road " * 10
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a cat on a mat .\n\ntwo dogs on a road .\nchildren in a park .\n")
    code = main(["score", "--metric", "emscore", "--jsonl", str(write_jsonl(tmp_path / "items.jsonl", records)),
                 "--model", str(tiny_openai_clip.hf_dir), "--idf-corpus", str(corpus)])
    assert code == 0
    scorer = capeval.EMScore(model=tiny_openai_clip.hf_dir,
                             idf_corpus=["a cat on a mat .", "two dogs on a road .", "children in a park ."])
    with pytest.warns(TruncationWarning, match=r"candidates\[1\]"):
        expected = scorer.score([record["video"] for record in records], [record["candidate"] for record in records])
    captured = capsys.readouterr()
    assert printed_scores(captured.out)["EMScore(X,V)['full_F']"] == f"{expected['emscore_video_full_f']:.4f}"
    assert "|idf:corpus-3-" in expected["signature"]
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert warnings == ["capeval score: warning: 1 text exceeds the model's 77-token context and was truncated, "
                        "keeping the end token, as the reference implementation does: the candidate of line 2"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--metric", "emscore", "--images", "{videos}", "--candidates", "{candidates}"],
         "EMScore scores videos: give --videos FOLDER or --jsonl FILE"),
        (["--metric", "clipscore", "--videos", "{videos}", "--candidates", "{candidates}"],
         "CLIP-S scores images, not videos; the metrics of videos are pacscore and emscore"),
        (["--metric", "pacscore", "--videos", "{videos}", "--candidates", "{candidates}", "--num-frames", "4"],
         "--num-frames is an option of emscore, not of pacscore; video PAC-S with other settings is --metric emscore "
         "--model capeval/pacs-clip-vit-b-32"),
        (["--metric", "clipscore", "--images", "{videos}", "--candidates", "{candidates}", "--no-idf"],
         "--no-idf is an option of emscore, not of clipscore"),
        (["--metric", "emscore", "--videos", "{videos}", "--candidates", "{candidates}", "--no-idf", "--idf-corpus",
          "{candidates}"], "--idf-corpus and --no-idf exclude each other"),
        (["--metric", "emscore", "--candidates", "{candidates}"],
         "EMScore needs --videos FOLDER, --references FILE or both (or --jsonl FILE)"),
        (["--metric", "pacscore", "--candidates", "{candidates}"],
         "give --images FOLDER, --videos FOLDER or --jsonl FILE"),
        (["--metric", "pacscore", "--images", "{videos}", "--videos", "{videos}", "--candidates", "{candidates}"],
         "--images and --videos exclude each other"),
        (["--metric", "emscore", "--videos", "{videos}"], "give --candidates FILE or --jsonl FILE"),
        (["--metric", "emscore", "--jsonl", "{candidates}", "--candidates", "{candidates}"],
         "--jsonl FILE holds the videos, candidates and references: give it without --candidates"),
        (["--metric", "tigerscore", "--jsonl", "{candidates}"], "--jsonl holds videos, and TIGEr scores images"),
    ],
)
def test_video_flags_are_checked(arguments: List[str], message: str, video_folder: Path,
                                 caption_files: Dict[str, Path], capsys) -> None:
    filled = [argument.format(videos=video_folder, candidates=caption_files["candidates"]) for argument in arguments]
    assert message in run_failing(["score", *filled], capsys)


def test_a_missing_video_names_the_key(video_folder: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "candidates.json").write_text(json.dumps({**VIDEO_CANDIDATES, "beach": "waves ."}))
    error = run_failing(["score", "--metric", "emscore", "--videos", str(video_folder), "--candidates",
                         str(tmp_path / "candidates.json")], capsys)
    assert "no video file for key 'beach'" in error and ".mp4" in error and ".npy" in error


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"video": "a.mp4", "candidate": "a cat"}', "{not json"], "line 2 of {jsonl} is not valid JSON"),
        (['["a.mp4", "a cat"]'], "line 1 of {jsonl} must hold a JSON object"),
        (['{"video": "a.mp4", "caption": "a cat"}'], "line 1 of {jsonl} has the unknown field 'caption'"),
        (['{"video": "a.mp4"}'], "the candidate of line 1 of {jsonl} is None"),
        (['{"candidate": "a cat"}'], 'line 1 of {jsonl}: "video" must be the path of a video'),
        (['{"video": "a.mp4", "candidate": "a cat", "references": []}'], "references of line 1 of {jsonl} are empty"),
        (['{"video": "a.mp4", "candidate": "a cat", "references": ["a cat"]}', "",
          '{"video": "b.mp4", "candidate": "a dog"}'], "line 3 of {jsonl} has no references while line 1 has"),
        (["", " "], "{jsonl} holds no line"),
        (['{"video": "absent.mp4", "candidate": "a cat"}'], "videos[0] ({folder}/absent.mp4): file not found"),
    ],
)
def test_bad_jsonl_lines_are_named(lines: List[str], message: str, tiny_openai_clip, tmp_path: Path, capsys) -> None:
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    error = run_failing(["score", "--metric", "emscore", "--jsonl", str(jsonl), "--model",
                         str(tiny_openai_clip.hf_dir)], capsys)
    assert message.format(jsonl=jsonl, folder=tmp_path) in error
