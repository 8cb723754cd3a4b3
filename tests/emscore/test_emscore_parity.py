"""capeval's EMScore scorer end to end against the original code (ShiYaya/emscore): goldens in tests/data/emscore.

The original scored the test videos (tests/data/emscore/videos) with the tiny OpenAI-format CLIP of
``fixtures.clip_checkpoints.build_tiny_openai_clip``: video files through its own ``encode_video`` (cv2 decoding),
features through its feature cache, sampled as VATEX-EVAL-demo.py samples them; each item in a call of its own, with
the IDF table of the call on all items (tests/data/emscore/NOTE.md, "Scorer goldens"). Here the same model, converted
by conversion/convert_clip.py, scores the same inputs with ``capeval.EMScore``: every view and key of every item must
equal the original's within 1e-5.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest
import torch

from capeval import EMScore, PACScore, VideoFeatures
from capeval.registry import EMSCORE_RESULT_KEYS
from capeval.video import count_video_frames, iter_video_frames
from conversion.clip_converter import convert_checkpoint
from fixtures.clip_checkpoints import TinyClip, save_pacs_checkpoint
from fixtures.paths import TESTS_DATA


@pytest.fixture(autouse=True)
def _parity_in_fp32(strict_fp32: None) -> None:
    """Every test here runs with IEEE fp32 products on CUDA (conftest's ``strict_fp32``)."""


DATA = TESTS_DATA / "emscore"
VIDEO_DIR = DATA / "videos"
GOLDENS = np.load(DATA / "scorer_goldens.npz")
META = json.loads((DATA / "scorer_goldens.json").read_text())
TOLERANCE = 1e-5
VIEWS, KEYS, ITEMS, CONFIGS = tuple(META["views"]), tuple(META["keys"]), META["items"], META["configs"]
PREFIXES = {"EMScore(X,V)": "emscore_video_", "EMScore(X,X*)": "emscore_refs_",
            "EMScore(X,V,X*)": "emscore_video_refs_"}
"""capeval's result key prefix of each of the original's views."""

CANDIDATES = [item["candidate"] for item in ITEMS]
REFERENCES = [item["references"] for item in ITEMS]
VIDEO_FILES = [str(VIDEO_DIR / item["video"]) for item in ITEMS]
OFFSETS = GOLDENS["feature_offsets"]
FEATURES = {name: GOLDENS["features"][OFFSETS[i]:OFFSETS[i + 1]] for i, name in enumerate(META["video_names"])}
SCALES = {name: GOLDENS["scales"][OFFSETS[i]:OFFSETS[i + 1]] for i, name in enumerate(META["video_names"])}
EXAMPLE_VIDEO = Path("examples") / "emscore" / META["example"]["video"]


def configs_where(**wanted: Any) -> List[str]:
    """The goldens' configurations (not the example's) whose settings include ``wanted``."""
    return [name for name, setup in CONFIGS.items() if not name.startswith("example/")
            and all(setup.get(field) == value for field, value in wanted.items())]


def result_key(view: str, key: str) -> str:
    """capeval's corpus key of the original's ``results[view][key]`` (the per-item list adds ``s``)."""
    return PREFIXES[view] + key.lower()


def as_table(result: Dict[str, Any], count: int) -> np.ndarray:
    """(items, views, keys) of a capeval result in the goldens' layout, NaN where the result has no such view; every
    corpus value must be the mean of its per-item list (computed in float32)."""
    table = np.full((count, len(VIEWS), len(KEYS)), np.nan)
    for v, view in enumerate(VIEWS):
        present = [result_key(view, key) + "s" in result for key in KEYS]
        assert all(present) or not any(present), f"{view}: some keys missing from {sorted(result)}"
        if not present[0]:
            continue
        for k, key in enumerate(KEYS):
            values = np.asarray(result[result_key(view, key) + "s"], dtype=np.float64)
            assert values.shape == (count,)
            assert result[result_key(view, key)] == pytest.approx(values.mean(), abs=1e-6)  # a float32 mean
            table[:, v, k] = values
    return table


def assert_matches(ours: np.ndarray, golden: np.ndarray, items: Optional[Sequence[int]] = None) -> None:
    """Same views present, and every value within :data:`TOLERANCE`; a failure lists item, view, key and values."""
    items = list(range(len(golden))) if items is None else list(items)
    assert np.array_equal(np.isnan(ours), np.isnan(golden)), "the views present differ from the original's"
    assert np.isfinite(golden).any()
    wrong = np.argwhere(np.abs(ours - golden) > TOLERANCE)
    assert not len(wrong), "; ".join(f"item {items[i]} {VIEWS[v]} {KEYS[k]}: {ours[i, v, k]:.8f}, original "
                                     f"{golden[i, v, k]:.8f}" for i, v, k in wrong[:12])


def golden(config: str, items: Optional[Sequence[int]] = None) -> np.ndarray:
    """The original's (items, views, keys) of ``config``, each item scored alone: all items or ``items``."""
    values = GOLDENS[f"{config}/alone"]
    return values if items is None else values[list(items)]


def idf_options(config: str) -> Dict[str, Any]:
    """``idf`` / ``idf_corpus`` of capeval for the original's ``idf`` argument of ``config``."""
    idf = CONFIGS[config]["idf"]
    return {"idf": True, "idf_corpus": META["corpus"]} if idf == "corpus" else {"idf": idf}


@pytest.fixture(scope="module")
def make_scorer(tiny_openai_clip: TinyClip, capeval_test_device: str) -> Callable[..., EMScore]:
    """``EMScore`` on the converted tiny CLIP (fp32, decoding in this process), one per set of options."""
    made: Dict[str, EMScore] = {}

    def make(**options: Any) -> EMScore:
        key = repr(sorted(options.items()))
        if key not in made:
            made[key] = EMScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device, precision="fp32",
                                num_workers=0, **options)
        return made[key]

    return make


@pytest.fixture
def pyav() -> None:
    """Skips a test that decodes video files where PyAV (the ``capeval[video]`` extra) is not installed."""
    pytest.importorskip("av")


def score_config(make_scorer: Callable[..., EMScore], config: str, videos: Optional[Sequence[Any]],
                 items: Optional[Sequence[int]] = None) -> np.ndarray:
    """capeval's table of the items of ``config`` (all, or ``items`` in that order) with ``videos`` for them."""
    setup = CONFIGS[config]
    items = list(range(len(ITEMS))) if items is None else list(items)
    references = [REFERENCES[i] for i in items] if setup["references"] else None
    scorer = make_scorer(num_frames=setup["num_frames"], **idf_options(config))
    result = scorer.score(videos if setup["video"] else None, [CANDIDATES[i] for i in items], references)
    return as_table(result, len(items))


@pytest.mark.usefixtures("pyav")
def test_goldens_describe_these_videos() -> None:
    """The stored videos are those the original scored; the MPEG-2 file's header counts 5 of its 12 frames and the
    variable-rate file's 251 of its 10, and the original (as capeval) reads 5 and 10."""
    assert META["reference"]["commit"].startswith("20bce0a")
    assert EMSCORE_RESULT_KEYS == {result_key(view, key): f"{view}['{key}']" for view in VIEWS for key in KEYS}
    for name, facts in META["videos"].items():
        assert facts["capeval_frames_equal_cv2"] and facts["max_abs_pixel_difference"] == 0
        if name in META["video_names"]:
            path = VIDEO_DIR / name
            assert path.stat().st_size == facts["bytes"]
            assert count_video_frames(path) == facts["frames_read"] == len(FEATURES[name])
    counts = {name: (META["videos"][name]["decodable_frames"], META["videos"][name]["header_frame_count"],
                     META["videos"][name]["frames_read"]) for name in ("mpeg2_64x48.mpg", "vfr_64x48.mkv")}
    assert counts == {"mpeg2_64x48.mpg": (12, 5, 5), "vfr_64x48.mkv": (10, 251, 10)}


@pytest.mark.usefixtures("pyav")
@pytest.mark.parametrize("config", configs_where(source="files") + configs_where(source=None))
def test_video_files_and_references_match_original(make_scorer: Callable[..., EMScore], config: str) -> None:
    """Video files decoded by capeval against the original's cv2 path; references only (``videos=None``); video
    only (``references=None``); IDF from the references, the candidates, a user corpus, or none."""
    assert_matches(score_config(make_scorer, config, VIDEO_FILES), golden(config))


def write_features(folder: Path, suffix: str, scaled: bool = False) -> List[str]:
    """Each item's frame features (the original's ``encode_video`` output) as a ``.pt`` or ``.npy`` file."""
    paths = []
    for item in ITEMS:
        features = FEATURES[item["video"]] * (SCALES[item["video"]][:, None] if scaled else 1)
        path = folder / f"{Path(item['video']).stem}{suffix}"
        if suffix == ".pt":
            torch.save(torch.from_numpy(features), path)
        else:
            np.save(path, features)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("form", ["VideoFeatures", ".pt", ".npy"])
@pytest.mark.parametrize("config", configs_where(source="features", scaled=None))
def test_features_match_original_feature_cache(make_scorer: Callable[..., EMScore], config: str, form: str,
                                               tmp_path: Path) -> None:
    """The original's frame features as VideoFeatures, ``.pt`` and ``.npy`` files, all frames or ``num_frames``
    sampled as VATEX-EVAL-demo.py samples its cache."""
    if form == "VideoFeatures":
        videos: List[Any] = [VideoFeatures(FEATURES[item["video"]]) for item in ITEMS]
    else:
        videos = write_features(tmp_path, form)
    assert_matches(score_config(make_scorer, config, videos), golden(config))


def test_features_are_used_as_given(make_scorer: Callable[..., EMScore], tmp_path: Path) -> None:
    """Rows scaled by 0.5 to 2 are not normalised, as the original's feature cache does not normalise them."""
    config = "features_scaled/video_noidf"
    scaled = [VideoFeatures(FEATURES[item["video"]] * SCALES[item["video"]][:, None]) for item in ITEMS]
    assert_matches(score_config(make_scorer, config, scaled), golden(config))
    assert_matches(score_config(make_scorer, config, write_features(tmp_path, ".pt", scaled=True)), golden(config))
    # the scaling moves every item's fine-grained P by more than 5e-3 (the coarse score normalises the mean row)
    assert np.abs(golden(config) - golden("features/video_noidf"))[:, 0, KEYS.index("figr_P")].min() > 5e-3


@pytest.mark.usefixtures("pyav")
@pytest.mark.parametrize("config", [name for name in configs_where(source="features") if CONFIGS[name]["num_frames"]])
def test_sampled_video_files_match_original_sampled_features(make_scorer: Callable[..., EMScore], config: str) -> None:
    """``num_frames`` on video files: the frames np.linspace chooses of those the original reads (5 of the MPEG-2
    file's 12), equal to the original's sampled feature cache."""
    assert_matches(score_config(make_scorer, config, VIDEO_FILES), golden(config))


@pytest.mark.usefixtures("pyav")
@pytest.mark.parametrize("form", ["PIL images", "arrays", "uint8 array"])
def test_frames_in_memory_equal_the_files(make_scorer: Callable[..., EMScore], form: str) -> None:
    """The files' frames given in memory (PIL images, a list of uint8 arrays, one uint8 T x H x W x 3 array) score as
    the original scored the files, all frames and 10 sampled."""
    frames = [list(iter_video_frames(path)) for path in VIDEO_FILES]
    if form == "arrays":
        videos: List[Any] = [[np.asarray(image) for image in images] for images in frames]
    elif form == "uint8 array":
        videos = [np.stack([np.asarray(image) for image in images]) for images in frames]
        assert all(video.dtype == np.uint8 and video.ndim == 4 for video in videos)
    else:
        videos = frames
    for config in ("files/refs_video_idf", "features10/refs_video_corpus"):
        assert_matches(score_config(make_scorer, config, videos), golden(config))


@pytest.mark.usefixtures("pyav")
@pytest.mark.parametrize("config", ["files/refs_video_noidf", "files/refs_video_corpus", "refs_corpus",
                                    "features3/refs_video_noidf"])
def test_items_do_not_depend_on_the_other_items_of_the_call(make_scorer: Callable[..., EMScore], config: str) -> None:
    """A subset in another order gives each item its own values (the original's batches pad with zeros that enter
    its maxima: the goldens score each item alone). IDF comes from no corpus or a fixed one, so it is the same."""
    for items in ([5, 2, 0], [3], [6, 4]):
        assert_matches(score_config(make_scorer, config, [VIDEO_FILES[i] for i in items], items), golden(config, items),
                       items)


@pytest.mark.usefixtures("pyav")
def test_cache_dir_serves_a_second_run(tiny_openai_clip: TinyClip, capeval_test_device: str, tmp_path: Path) -> None:
    """The first run decodes in two worker processes and matches the original; a second scorer on the same cache
    encodes nothing and gives identical numbers."""
    def run(num_workers: int) -> Tuple[Dict[str, Any], Dict[str, int]]:
        scorer = EMScore(model=tiny_openai_clip.hf_dir, device=capeval_test_device, precision="fp32",
                         cache_dir=tmp_path / "cache", num_workers=num_workers)
        return scorer.score(VIDEO_FILES, CANDIDATES, REFERENCES), dict(scorer.engine.encoded)

    cold, cold_encoded = run(2)
    warm, warm_encoded = run(0)
    assert sum(cold_encoded.values()) > 0 and set(warm_encoded.values()) == {0}
    assert warm == cold
    assert_matches(as_table(cold, len(ITEMS)), golden("files/refs_video_idf"))


@pytest.mark.usefixtures("pyav")
def test_pacscore_on_videos_is_emscore_on_pacs_weights(tiny_openai_clip: TinyClip, capeval_test_device: str,
                                                       tmp_path: Path) -> None:
    """A PAC-S checkpoint of the same weights: video PAC-S is EMScore(X,V) full_F and RefPAC-S EMScore(X,V,X*)
    full_F, with the original's numbers."""
    checkpoint = save_pacs_checkpoint(tiny_openai_clip.model, tmp_path / "pacs.pth")
    folder = convert_checkpoint(checkpoint, tmp_path / "pacs", arch="openai")
    options = dict(model=folder, device=capeval_test_device, precision="fp32", num_workers=0)
    pacs = PACScore(**options).score(videos=VIDEO_FILES, candidates=CANDIDATES, references=REFERENCES)
    emscore = EMScore(**options).score(VIDEO_FILES, CANDIDATES, REFERENCES)
    assert pacs["pac_scores"] == emscore["emscore_video_full_fs"]
    assert pacs["ref_pac_scores"] == emscore["emscore_video_refs_full_fs"]
    full_f = KEYS.index("full_F")
    assert np.abs(np.array(pacs["pac_scores"]) - golden("files/refs_video_idf")[:, 0, full_f]).max() < TOLERANCE
    assert np.abs(np.array(pacs["ref_pac_scores"]) - golden("files/refs_video_idf")[:, 2, full_f]).max() < TOLERANCE
    assert pacs["pac_score"] == pytest.approx(np.mean(pacs["pac_scores"]), abs=1e-6)
    video_only = PACScore(**options).score(videos=VIDEO_FILES, candidates=CANDIDATES)
    assert "ref_pac_scores" not in video_only
    assert np.abs(np.array(video_only["pac_scores"]) - golden("files/video_idf")[:, 0, full_f]).max() < TOLERANCE


@pytest.mark.usefixtures("pyav")
@pytest.mark.parametrize("config", [name for name in CONFIGS if name.startswith("example/")])
def test_example_clip_matches_original(make_scorer: Callable[..., EMScore], capeval_test_data: Path,
                                       config: str) -> None:
    """The EMScore example clip (250 frames of 640x360 H.264) with its captions, all frames or 10 sampled."""
    path = capeval_test_data / EXAMPLE_VIDEO
    if not path.is_file():
        pytest.skip(f"needs the EMScore example clip {EXAMPLE_VIDEO} in the test data")
    setup, example = CONFIGS[config], META["example"]
    scorer = make_scorer(num_frames=setup["num_frames"], **idf_options(config))
    result = scorer.score([str(path)], [example["candidate"]], [example["references"]])
    assert_matches(as_table(result, 1), golden(config))
