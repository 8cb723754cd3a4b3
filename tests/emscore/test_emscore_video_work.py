"""How much work EMScore does on a video and what it tells the caller: a frame sampled many times is decoded and
encoded once (its features repeated in the row), a count above the stated limit is refused before the model loads,
the progress bar counts frames, and the warning of a single call's degenerate IDF table says what to do and points
at the caller's line."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

from capeval import EMScore, InputError, PACScore, VideoFeatures
from capeval.models.clip import frames as frame_rows
from capeval.models.clip.preprocessing import ImageTransform
from capeval.frame_sampling import MAX_NUM_FRAMES, sample_indices
from capeval.video import validate_video
from fixtures.clip_checkpoints import TinyClip
from fixtures.videos import Clip, write_clip

CAPTION = "a red square moves to the right"
FRAMES = 9


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(Clip("a.mp4", ("libx264", "mpeg4"), 64, 48, frames=FRAMES), tmp_path_factory.mktemp("work"))


def test_a_count_above_the_limit_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^num_frames=1000000000 is above capeval's limit of 10,000 frames sampled "
                                         r"per video"):
        EMScore(model=tmp_path / "no-model-here", num_frames=10**9)


def test_a_frame_sampled_many_times_is_decoded_and_encoded_once(tiny_openai_clip: TinyClip, video: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit's 10,000 samples of a 9-frame clip transform 9 frames, and score as the 10,000 rows sampled from the
    clip's 9 frame features do."""
    every = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, idf=False)
    (row,) = every.engine.request(frame_rows.VideoFrameRows.kind, [validate_video(video, 0)]).result()
    rows = row.reshape(FRAMES, -1)
    expected = every.score([VideoFeatures(rows[sample_indices(FRAMES, MAX_NUM_FRAMES)])], [CAPTION])
    transformed: List[str] = []
    to_uint8 = ImageTransform.to_uint8

    def counted(self: ImageTransform, image: Any, name: str) -> Any:
        transformed.append(name)
        return to_uint8(self, image, name)

    monkeypatch.setattr(ImageTransform, "to_uint8", counted)
    sampled = EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, num_frames=MAX_NUM_FRAMES,
                      idf=False)
    result = sampled.score([video], [CAPTION])
    assert len(transformed) == FRAMES
    for name in ("emscore_video_full_fs", "emscore_video_figr_ps", "emscore_video_figr_rs", "emscore_video_cogrs"):
        np.testing.assert_allclose(result[name], expected[name], rtol=1e-6, err_msg=name)


class Bar:
    """A stand-in for tqdm that records what the frame bar is told."""

    made: List["Bar"] = []

    def __init__(self, **options: Any) -> None:
        self.options, self.count = options, 0
        Bar.made.append(self)

    def update(self, count: int) -> None:
        self.count += count

    def close(self) -> None:
        pass


def test_progress_counts_frames(tiny_openai_clip: TinyClip, video: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_rows, "tqdm", Bar)
    Bar.made = []
    EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0, num_frames=40, progress=True, idf=False).score(
        [video, video, str(video)], [CAPTION, "a square", "a red square"])
    (bar,) = Bar.made  # one row: the three entries are one video
    assert (bar.options["unit"], bar.options["total"], bar.count, bar.options["disable"]) == ("frame", 40, 40, False)


@pytest.mark.parametrize("family", ["emscore", "pacscore"])
def test_the_idf_warning_of_one_video_says_what_to_do_at_the_callers_line(tiny_openai_clip: TinyClip, video: Path,
                                                                          family: str) -> None:
    """One video and no references: the IDF table is the one candidate's, every weight 0. PAC-S of videos reaches
    EMScore's arithmetic through two more capeval frames."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if family == "emscore":
            EMScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0).score([video], [CAPTION])
        else:
            PACScore(model=tiny_openai_clip.hf_dir, device="cpu", num_workers=0).score(videos=[video],
                                                                                       candidates=[CAPTION])
    (warning,) = [w for w in caught if "IDF weights sum to 0" in str(w.message)]
    assert warning.filename == __file__
    assert "The IDF table came from the call's candidates" in str(warning.message)
    assert "idf=False (--no-idf)" in str(warning.message) and "idf_corpus=[...] (--idf-corpus FILE)" in str(
        warning.message)
