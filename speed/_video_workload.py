"""The files ``video_speed.py`` scores, built once under a work folder, and the manifest that names them.

* ``files``: ``--videos`` copies of the real clip (``Bfyp0C02sko_000248_000258.mp4``: 10 s, 640 x 360, 25 fps,
  H.264 with AAC audio, 250 frames), each remuxed (packets copied, nothing re-encoded) with its own ``comment`` tag, so
  that every copy has other bytes (no de-duplication by content or by path) and exactly the clip's frames;
* ``features``: ``--feature-videos`` ``.pt`` files of seeded random unit rows ``(250, 512)`` float32, the shape of the
  VATEX-EVAL release's ``VATEX-EVAL_video_feats/<id>.pt`` for a 10 s clip, scored with 10 frames sampled as
  VATEX-EVAL-demo.py samples them;
* ``long``: one synthesized 1280 x 720 H.264 video per length in ``--long-minutes``, at ``--long-fps`` frames per
  second (moving colour gradients and a moving square, x264 ``veryfast``, no audio);
* a warm-up video of 8 frames (64 x 48), scored before the clock in every process.

Captions: VATEX-EVAL's shape, 6 candidates per video, each item with the video's ``--references`` references (VATEX-EVAL
uses 1 or 9), all distinct sentences taken in order from Flickr8k's ``Flickr8k.token.txt``.

The manifest (``manifest.json``) is what the original's runner reads (speed/README.md): per workload, the per-item
``videos`` (a file path per item, the same video repeated for its 6 candidates), ``candidates`` and ``references``,
``frames`` (the frames encoded, or for ``features`` the feature rows scored) and for ``features`` ``num_frames``, the
rows sampled per video.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence

import numpy as np

CANDIDATES_PER_VIDEO = 6
"""VATEX-EVAL: six candidate captions per video."""
FEATURE_FRAMES = 250
FEATURE_DIM = 512
SAMPLED_FRAMES = 10
"""VATEX-EVAL-demo.py's ``use_uniform_sample``."""
LONG_SIZE = (1280, 720)
WARM_UP_CAPTION = "a warm-up caption that is not in any workload"
SEED = 0


def _captions(token_file: Path) -> Iterator[str]:
    """Flickr8k's captions in file order, each distinct sentence once."""
    seen = set()
    for line in token_file.read_text(encoding="utf-8").splitlines():
        if "\t" not in line:
            continue
        caption = line.split("\t", 1)[1].strip()
        if caption and caption not in seen:
            seen.add(caption)
            yield caption


def _items(videos: Sequence[str], captions: Iterator[str], references: int) -> Dict[str, List[Any]]:
    """Six items per video: the video, a candidate of its own, and the video's references (shared by its items)."""
    rows: Dict[str, List[Any]] = {"videos": [], "candidates": [], "references": []}
    for video in videos:
        candidates = [next(captions) for _ in range(CANDIDATES_PER_VIDEO)]
        video_references = [next(captions) for _ in range(references)]
        for candidate in candidates:
            rows["videos"].append(video)
            rows["candidates"].append(candidate)
            rows["references"].append(list(video_references))
    return rows


def _remuxed_copy(source: Path, target: Path, tag: str) -> None:
    """``source``'s packets in a new MP4 whose ``comment`` tag is ``tag``: other bytes, the same frames."""
    import av

    with av.open(str(source)) as inp, av.open(str(target), "w", format="mp4") as out:
        out.metadata["comment"] = tag
        streams = {stream.index: out.add_stream_from_template(stream) for stream in inp.streams}
        for packet in inp.demux():
            if packet.dts is None:  # the demuxer's flush packets
                continue
            packet.stream = streams[packet.stream.index]
            out.mux(packet)


def _synthesized(target: Path, frames: int, fps: int, size: Sequence[int]) -> None:
    """An H.264 video of ``frames`` frames: colour gradients drifting over time and a square crossing the frame."""
    import av

    width, height = size
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    with av.open(str(target), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps, options={"preset": "veryfast", "crf": "23"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for number in range(frames):
            phase = number / max(frames - 1, 1)
            rgb = np.empty((height, width, 3), dtype=np.uint8)
            rgb[..., 0] = (255 * (0.5 + 0.5 * np.sin(6.28 * (x + phase)))).astype(np.uint8)
            rgb[..., 1] = (255 * (0.5 + 0.5 * np.cos(6.28 * (y + 2 * phase)))).astype(np.uint8)
            rgb[..., 2] = (255 * ((x + y + 3 * phase) % 1.0)).astype(np.uint8)
            side = height // 4
            left = int((width - side) * (0.5 + 0.5 * np.sin(40 * phase)))
            top = int((height - side) * (0.5 + 0.5 * np.cos(25 * phase)))
            rgb[top:top + side, left:left + side] = (number * 7 % 256, 255 - number * 3 % 256, 90)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _features(target: Path, index: int) -> None:
    """A ``(FEATURE_FRAMES, FEATURE_DIM)`` float32 tensor of unit rows (seeded by ``index``) saved with
    ``torch.save``."""
    import torch

    rows = np.random.default_rng([SEED, index]).standard_normal((FEATURE_FRAMES, FEATURE_DIM)).astype(np.float32)
    torch.save(torch.from_numpy(rows / np.linalg.norm(rows, axis=1, keepdims=True)), target)


def build(folder: Path, clip: Path, token_file: Path, videos: int, feature_videos: int, references: int,
          long_minutes: Sequence[int], long_fps: int) -> Dict[str, Any]:
    """Build the files of the workloads under ``folder`` (reusing those already there) and write the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    captions = _captions(token_file)
    copies = []
    for index in range(videos):
        copy = folder / f"clip-copy-{index:03d}.mp4"
        if not copy.is_file():
            _remuxed_copy(clip, copy, f"capeval video_speed copy {index}")
        copies.append(str(copy))
    features_dir = folder / f"features-{feature_videos}"  # only these: the original loads every .pt of the folder
    features_dir.mkdir(exist_ok=True)
    feature_files = []
    for index in range(feature_videos):
        path = features_dir / f"video{index:04d}.pt"
        if not path.is_file():
            _features(path, index)
        feature_files.append(str(path))
    warm_up = folder / "warm-up.mp4"
    if not warm_up.is_file():
        _synthesized(warm_up, 8, 25, (64, 48))
    from capeval.video import count_video_frames

    manifest: Dict[str, Any] = {
        "files": {**_items(copies, captions, references), "frames": count_video_frames(clip) * videos},
        "features": {**_items(feature_files, captions, references), "num_frames": SAMPLED_FRAMES,
                     "frames": SAMPLED_FRAMES * feature_videos},
        "long": {},
        "warm_up": {"video": str(warm_up), "caption": WARM_UP_CAPTION},
        "references_per_item": references,
    }
    for minutes in long_minutes:
        frames = minutes * 60 * long_fps
        path = folder / f"long-{minutes}min-{LONG_SIZE[1]}p-{long_fps}fps.mp4"
        if not path.is_file():
            _synthesized(path, frames, long_fps, LONG_SIZE)
        manifest["long"][f"{minutes}min"] = {**_items([str(path)], captions, references), "minutes": minutes,
                                             "fps": long_fps, "frames": frames,
                                             "size": f"{LONG_SIZE[0]}x{LONG_SIZE[1]}"}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
