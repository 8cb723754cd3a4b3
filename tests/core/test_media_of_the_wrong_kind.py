"""Media given where the other kind is expected: a picture (or an audio file, or text) given as a video is refused
with its reason, a video given as an image says to pass it as a video, and ``capeval score`` checks its videos
before it loads a model."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from PIL import Image

from capeval.cli import main
from capeval.inputs import InputError, validate_image
from capeval.video import validate_video
from fixtures.videos import H264, Clip, write_clip

av = pytest.importorskip("av")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_clip(Clip("clip.mp4", H264, 32, 24, frames=3), tmp_path_factory.mktemp("clip"))


def _picture(path: Path) -> Path:
    Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(path)
    return path


def _audio(path: Path, with_cover: bool) -> Path:
    """A second of silence in AAC, with a cover picture (an attached picture) when ``with_cover``."""
    with av.open(str(path), "w") as container:
        audio = container.add_stream("aac", rate=44100)
        if with_cover:
            cover = container.add_stream("mjpeg", rate=1)
            cover.width, cover.height, cover.pix_fmt = 16, 16, "yuvj420p"
            cover.disposition = av.stream.Disposition.attached_pic
            picture = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            for packet in [*cover.encode(picture.reformat(format="yuvj420p")), *cover.encode()]:
                container.mux(packet)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 44100
        for packet in [*audio.encode(frame), *audio.encode()]:
            container.mux(packet)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda folder: _picture(folder / "still.jpg"), r"still\.jpg\) is a still image \(piped jpeg sequence\), not a "
                                                    "video"),
    (lambda folder: _picture(folder / "still.png"), r"still\.png\) is a still image \(piped png sequence\), not a "
                                                    "video"),
    (lambda folder: _audio(folder / "song.m4a", with_cover=False), r"song\.m4a\) has no video stream \(found: audio\)"),
    (lambda folder: _audio(folder / "song.mp4", with_cover=True), r"song\.mp4\) has no video stream, only an attached "
                                                                  r"picture \(cover art\) beside its audio"),
    (lambda folder: (folder / "notes.txt").write_text("not a video\n" * 20) and folder / "notes.txt",
     r"notes\.txt\) could not be opened as a video: "),
])
def test_what_is_not_a_video_is_refused(tmp_path: Path, make: Callable[[Path], Path], message: str) -> None:
    with pytest.raises(InputError, match=r"^videos\[2\] \(.*" + message):
        validate_video(make(tmp_path), 2)


def test_an_animated_gif_is_a_video(tmp_path: Path) -> None:
    frames = [Image.fromarray(np.full((16, 16, 3), value, np.uint8)) for value in (0, 120, 240)]
    frames[0].save(tmp_path / "moving.gif", save_all=True, append_images=frames[1:], duration=40)
    item = validate_video(tmp_path / "moving.gif", 0)
    assert len(list(item.frames())) == 3


def test_a_video_given_as_an_image_says_to_pass_it_as_a_video(clip: Path, tmp_path: Path) -> None:
    expected = r"is a video \(MP4/QuickTime\), not an image; pass it with videos= \(--videos\)"
    with pytest.raises(InputError, match=rf"^images\[1\] \({clip}\) {expected}"):
        validate_image(clip, 1)
    with pytest.raises(InputError, match=rf"^images\[0\] \(\d+ bytes\) {expected}"):
        validate_image(clip.read_bytes(), 0)
    (tmp_path / "noise.jpg").write_bytes(b"\x01" * 64)
    with pytest.raises(InputError, match=r"noise\.jpg\) is not a readable image: not in any image format PIL reads$"):
        validate_image(tmp_path / "noise.jpg", 0)


def test_the_command_checks_videos_before_loading_the_model(clip: Path, tmp_path: Path, capsys) -> None:
    """A corrupt video fails before the (absent) model is looked for."""
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "good.mp4").write_bytes(clip.read_bytes())
    (videos / "cut.mp4").write_bytes(clip.read_bytes()[:200])
    (tmp_path / "candidates.json").write_text(json.dumps({"good": "a picture", "cut": "a cut picture"}))
    assert main(["score", "--metric", "emscore", "--videos", str(videos), "--candidates",
                 str(tmp_path / "candidates.json"), "--model", str(tmp_path / "no-model-here")]) == 2
    error = capsys.readouterr().err
    assert "videos[1] (" in error and "cut.mp4" in error and "no-model-here" not in error
