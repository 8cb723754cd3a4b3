"""capeval.EMScore's behaviour on a tiny converted CLIP: views by input, options, warnings, chunking, and bad input
named by item (parity with the original code is in test_emscore_parity.py and test_emscore_functional.py)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch

from capeval import EMScore, InputError, PACScore, VideoFeatures
from capeval.inputs import TruncationWarning
from capeval.registry import EMSCORE_RESULT_KEYS
from capeval.video import VideoDecodeWarning
from fixtures.clip_checkpoints import TinyClip
from fixtures.paths import REPO_ROOT
from fixtures.videos import Clip, write_clip

DIM = 64  # the tiny CLIP's projection width
CANDIDATES = ["a red square moves to the right", "a gradient of colours", "noise on a dark background"]
REFERENCES = [["a square moving across the frame", "a red block slides"], ["colours fade from left to right"],
              ["static noise", "a noisy picture", "grey noise on black"]]


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> List[Path]:
    folder = tmp_path_factory.mktemp("scorer-videos")
    return [write_clip(Clip("a.mp4", ("libx264", "mpeg4"), 64, 48, frames=9), folder),
            write_clip(Clip("b.avi", ("mjpeg",), 72, 40, frames=5, pix_fmt="yuvj420p"), folder),
            write_clip(Clip("c.webm", ("libvpx-vp9", "libx264"), 48, 48, frames=7), folder)]


@pytest.fixture(scope="module")
def scorer(tiny_openai_clip: TinyClip) -> EMScore:
    return EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0)


def features(seed: int, frames: int = 7) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((frames, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def per_item(result: Dict[str, object]) -> Dict[str, np.ndarray]:
    return {name: np.asarray(result[f"{name}s"]) for name in EMSCORE_RESULT_KEYS if f"{name}s" in result}


def test_views_follow_the_inputs(scorer: EMScore, videos: List[Path]) -> None:
    both = scorer.score(videos, CANDIDATES, REFERENCES)
    assert set(per_item(both)) == set(EMSCORE_RESULT_KEYS)
    video_only = per_item(scorer.score(videos, CANDIDATES))
    references_only = per_item(scorer.score(None, CANDIDATES, REFERENCES))
    assert set(video_only) == {name for name in EMSCORE_RESULT_KEYS if name.startswith("emscore_video_")
                               and not name.startswith("emscore_video_refs")}
    assert set(references_only) == {name for name in EMSCORE_RESULT_KEYS if name.startswith("emscore_refs_")}
    assert both["emscore_video_full_f"] == pytest.approx(np.mean(both["emscore_video_full_fs"]), abs=1e-7)
    # the references' view is the same with or without videos; the joint view is the mean of the two
    np.testing.assert_allclose(per_item(both)["emscore_refs_full_f"], references_only["emscore_refs_full_f"])
    mean = (np.asarray(both["emscore_video_cogrs"]) + np.asarray(both["emscore_refs_cogrs"])) / 2
    np.testing.assert_allclose(both["emscore_video_refs_cogrs"], mean, rtol=1e-6)
    full = (np.asarray(both["emscore_video_figr_fs"]) + np.asarray(both["emscore_video_cogrs"])) / 2
    np.testing.assert_allclose(both["emscore_video_full_fs"], full, rtol=1e-6)
    assert all(np.all(np.abs(values) <= 1) for values in per_item(both).values())
    assert both["signature"].startswith("emscore_video_full_f|model:")
    assert "|idf:references|frames:all|decoder:PyAV " in both["signature"]
    assert "|idf:candidates|" in scorer.score(videos, CANDIDATES)["signature"]


def test_items_do_not_depend_on_their_chunk_or_neighbours(tiny_openai_clip: TinyClip, scorer: EMScore,
                                                          videos: List[Path]) -> None:
    together = per_item(scorer.score(videos, CANDIDATES, REFERENCES))
    one_by_one = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=1, chunk_size=1)
    chunked = per_item(one_by_one.score(videos, CANDIDATES, REFERENCES))
    for name, values in together.items():
        np.testing.assert_allclose(chunked[name], values, rtol=1e-6, atol=1e-7, err_msg=name)


def test_frames_in_memory_and_precomputed_features(scorer: EMScore, videos: List[Path]) -> None:
    av = pytest.importorskip("av")
    with av.open(str(videos[0])) as container:
        frames = [frame.to_image() for frame in container.decode(video=0)]
    assert len(frames) == 9
    from_pil = scorer.score([frames], CANDIDATES[:1])
    from_array = scorer.score([np.stack([np.asarray(frame) for frame in frames])], CANDIDATES[:1])
    assert from_pil["emscore_video_full_fs"] == from_array["emscore_video_full_fs"]
    rows = features(1)
    sampled = scorer.score([VideoFeatures(rows)], CANDIDATES[:1])
    assert sampled["emscore_video_cogrs"][0] == pytest.approx(
        float(np.dot(rows.mean(0) / np.linalg.norm(rows.mean(0)), _pooled(scorer, CANDIDATES[0]))), abs=1e-6)


def _pooled(scorer: EMScore, caption: str) -> np.ndarray:
    """The unit end-token feature of ``caption`` (the coarse-grained text embedding)."""
    ids = scorer.backbone.text_transform.tokenize(scorer.backbone.text_transform.prepare([caption], ""))
    with torch.inference_mode():
        pooled = scorer.backbone.encode_texts(torch.tensor(ids))[0].numpy()
    return pooled / np.linalg.norm(pooled)


def test_num_frames_samples_as_vatex_eval(tiny_openai_clip: TinyClip, scorer: EMScore, tmp_path: Path) -> None:
    rows = features(2, frames=11)
    sampled = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, num_frames=4)
    chosen = rows[[0, 3, 6, 10]]  # np.linspace(0, 10, 4) cast to int
    np.save(tmp_path / "v.npy", rows)
    torch.save(torch.from_numpy(rows), tmp_path / "v.pt")
    expected = scorer.score([VideoFeatures(chosen)], CANDIDATES[:1])["emscore_video_full_fs"]
    for entry in (VideoFeatures(rows), tmp_path / "v.npy", str(tmp_path / "v.pt")):
        result = sampled.score([entry], CANDIDATES[:1])
        assert result["emscore_video_full_fs"] == pytest.approx(expected, abs=1e-7)
        assert "|frames:4|" in result["signature"]


def test_idf_options(tiny_openai_clip: TinyClip, scorer: EMScore, videos: List[Path]) -> None:
    with_idf = scorer.score(videos, CANDIDATES, REFERENCES)
    uniform = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, idf=False)
    without = uniform.score(videos, CANDIDATES, REFERENCES)
    assert "|idf:none|" in without["signature"]
    assert not np.allclose(with_idf["emscore_refs_figr_ps"], without["emscore_refs_figr_ps"])
    # coarse-grained scores use no weights
    np.testing.assert_allclose(with_idf["emscore_video_cogrs"], without["emscore_video_cogrs"], rtol=1e-6)
    # a corpus that is the references, in order, is the references' own table
    flat = [ref for refs in REFERENCES for ref in refs]
    corpus = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, idf_corpus=flat)
    from_corpus = corpus.score(videos, CANDIDATES, REFERENCES)
    assert from_corpus["signature"].split("|idf:")[1].startswith(f"corpus-{len(flat)}-")
    np.testing.assert_allclose(from_corpus["emscore_video_refs_full_fs"], with_idf["emscore_video_refs_full_fs"])
    with pytest.raises(InputError, match="idf_corpus is given but idf=False"):
        EMScore(model=tiny_openai_clip.hf_dir, idf=False, idf_corpus=flat)
    with pytest.raises(InputError, match="idf_corpus\\[1\\]"):
        EMScore(model=tiny_openai_clip.hf_dir, idf_corpus=["fine", ""])
    with pytest.raises(InputError, match="idf must be True or False"):
        EMScore(model=tiny_openai_clip.hf_dir, idf={1: 0.5})


def test_each_caption_is_validated_once_and_tokenised_once_per_call(tiny_openai_clip: TinyClip,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Over chunks of two items, with a reference that recurs in every item, a candidate that is also a reference,
    two captions that clean to one text and a caption cut to the context: every caption is validated once, and every
    distinct prepared text goes through the tokenizer once (for the IDF table, the token weights, the batching of
    its token rows and the truncation warning alike)."""
    from capeval import inputs
    from capeval.scorers import emscore

    long_caption = "a dog " * 60
    candidates = ["a red block slides", "A Red Block  Slides", "noise on a dark background", long_caption]
    references = [["a red block slides", "static noise"], ["static noise"], ["static noise", "a noisy picture"],
                  ["static noise", long_caption]]
    scorer = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, chunk_size=2)
    validated: List[str] = []
    validate_caption = inputs.validate_caption

    def counting_validation(caption: object, where: str) -> str:
        validated.append(where)
        return validate_caption(caption, where)

    monkeypatch.setattr(inputs, "validate_caption", counting_validation)
    monkeypatch.setattr(emscore, "validate_caption", counting_validation)
    transform = scorer.backbone.text_transform
    tokenizer = transform.tokenizer
    tokenised: List[str] = []

    def counting_tokenizer(texts: List[str], **options: object) -> object:
        tokenised.extend(texts)
        return tokenizer(texts, **options)

    monkeypatch.setattr(transform, "tokenizer", counting_tokenizer)
    videos = [VideoFeatures(features(seed)) for seed in range(len(candidates))]
    with pytest.warns(TruncationWarning, match=r"candidates\[3\], references\[3\]\[1\]"):
        result = scorer.score(videos, candidates, references)
    assert sorted(validated) == sorted([f"candidates[{index}]" for index in range(len(candidates))]
                                       + [f"references[{index}][{number}]" for index, refs in enumerate(references)
                                          for number in range(len(refs))])
    distinct = set(transform.prepare([*candidates, *(ref for refs in references for ref in refs)], ""))
    assert len(distinct) == 5 and sorted(tokenised) == sorted(distinct)
    assert np.isfinite(result["emscore_video_refs_full_fs"]).all() and len(result["emscore_video_refs_full_fs"]) == 4


def test_undefined_results_warn_with_a_count(scorer: EMScore) -> None:
    """One item with one reference: the IDF corpus is that one sentence, every table value is 0 and the reference
    gives NaN; here the reference's tokens weigh equally."""
    with pytest.warns(RuntimeWarning, match="^1 item has a caption whose IDF weights sum to 0"):
        result = scorer.score([VideoFeatures(features(3))], ["a dog runs"], [["a dog runs on grass"]])
    assert np.isfinite(result["emscore_refs_full_fs"]).all()


def test_long_captions_are_truncated_with_a_warning(scorer: EMScore) -> None:
    long_caption = "a dog " * 60
    with pytest.warns(TruncationWarning, match=r"candidates\[0\]"):
        result = scorer.score([VideoFeatures(features(4))], [long_caption])
    transform = scorer.backbone.text_transform
    assert len(transform.tokenize(transform.prepare([long_caption], ""))[0]) == 77
    assert np.isfinite(result["emscore_video_full_fs"]).all()


@pytest.mark.filterwarnings("ignore::capeval.video.VideoDecodeWarning")
def test_decoder_warnings_of_worker_processes_reach_the_caller(tiny_openai_clip: TinyClip, tmp_path: Path) -> None:
    broken = write_clip(Clip("cut.avi", ("mjpeg",), 64, 48, pix_fmt="yuvj420p", keep_bytes=0.8), tmp_path)
    in_workers = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = in_workers.score([broken], ["a gradient"])
    assert [type(w.message) for w in caught if issubclass(w.category, VideoDecodeWarning)] == [VideoDecodeWarning]
    assert np.isfinite(result["emscore_video_full_fs"]).all()


@pytest.mark.parametrize("call, message", [
    (lambda s, v: s.score(None, ["a cat"]), "needs videos, references or both"),
    (lambda s, v: s.score(v[:2], CANDIDATES), "inputs differ in length: 2 videos, 3 candidates"),
    (lambda s, v: s.score([v[0], v[0].with_name("missing.mp4")], CANDIDATES[:2]), r"videos\[1\] .*file not found"),
    (lambda s, v: s.score([VideoFeatures(np.zeros((3, 5)))], ["a cat"]), r"videos\[0\].*width 5; this model needs 64"),
    (lambda s, v: s.score([VideoFeatures(np.full((2, DIM), np.nan))], ["a cat"]), r"videos\[0\].*NaN"),
    (lambda s, v: s.score(v[:1], [""]), r"candidates\[0\]"),
    (lambda s, v: s.score(v[:1], ["a cat"], [[]]), r"references\[0\] is empty"),
    (lambda s, v: s.score(v[0], ["a cat"]), "videos must be a list of videos"),
])
def test_bad_input_names_the_item(scorer: EMScore, videos: List[Path], call, message: str) -> None:
    with pytest.raises(InputError, match=message):
        call(scorer, videos)


def test_a_pt_file_that_is_not_a_plain_tensor_is_refused(scorer: EMScore, tmp_path: Path) -> None:
    torch.save({"features": torch.zeros(3, DIM)}, tmp_path / "dict.pt")
    with pytest.raises(InputError, match=r"videos\[0\] \(.*dict.pt\) holds a dict with keys \['features'\]"):
        scorer.score([tmp_path / "dict.pt"], ["a cat"])


def test_pac_s_of_videos_needs_videos_or_images_not_both(tiny_openai_clip: TinyClip, videos: List[Path]) -> None:
    pac = PACScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0)
    with pytest.raises(InputError, match="images or videos, not both"):
        pac.score(["x.jpg"], CANDIDATES[:1], videos=videos[:1])
    with pytest.raises(InputError, match="PAC-S needs images or videos"):
        pac.score(candidates=CANDIDATES[:1])
    result = pac.score(candidates=CANDIDATES[:1], videos=videos[:1])
    assert set(result) == {"pac_score", "pac_scores", "signature"}
    assert result["signature"].startswith("pac_score|model:")


DISTRIBUTED_SCRIPT = """
import json, sys
from capeval import EMScore
model, out, cache, videos = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
candidates, references = json.loads(sys.argv[5]), json.loads(sys.argv[6])
scorer = EMScore(model=model, device="cpu", num_workers=0, cache_dir=cache)
result = scorer.score(videos, candidates, references)
result["encoded"] = scorer.engine.encoded
assert scorer.engine.state.num_processes == 2
json.dump(result, open(f"{out}/rank{scorer.engine.state.process_index}.json", "w"))
scorer.engine.state.destroy_process_group()
"""


def test_two_processes_equal_one_and_fill_the_cache_together(tiny_openai_clip: TinyClip, videos: List[Path],
                                                             tmp_path: Path) -> None:
    """Under ``accelerate launch`` the videos and captions to encode are dealt out over the processes; every
    process gets every item's scores, equal to one process's, and the cache they filled serves a later run."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "score.py"
    script.write_text(DISTRIBUTED_SCRIPT)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               "29519", str(script), str(tiny_openai_clip.hf_dir), str(tmp_path), str(tmp_path / "cache"),
               ",".join(map(str, videos)), json.dumps(CANDIDATES), json.dumps(REFERENCES)]
    # the launched processes import this checkout's capeval, as the test does (the same model fingerprint)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)})
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    encoded = [rank.pop("encoded") for rank in ranks]
    assert [count["video_frames"] for count in encoded] == [2, 1]  # one video per batch, dealt in turn
    assert sum(count["text_tokens"] for count in encoded) == len(CANDIDATES) + sum(map(len, REFERENCES))
    warm = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, cache_dir=tmp_path / "cache")
    from_cache = warm.score(videos, CANDIDATES, REFERENCES)
    assert warm.engine.encoded == {"text_tokens": 0, "video_frames": 0}
    assert ranks[0] == ranks[1] == from_cache
    single = per_item(EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0).score(
        videos, CANDIDATES, REFERENCES))
    for name, values in per_item(from_cache).items():
        np.testing.assert_allclose(values, single[name], rtol=1e-6, atol=1e-7, err_msg=name)
