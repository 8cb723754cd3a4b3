"""Which frames of a video ``num_frames`` samples: VATEX-EVAL-demo.py's ``np.linspace(0, T - 1, n)`` cast to int,
computed by arithmetic, one step per distinct frame (:func:`frame_runs`), and the limit on ``n``
(:data:`MAX_NUM_FRAMES`). Plain arithmetic on frame counts: video files, frames in memory and precomputed features
(:mod:`capeval.video`) are all sampled here."""
from __future__ import annotations

import math
from typing import Iterator, List, Optional, Tuple

from capeval.inputs import InputError
from capeval.options import check_positive_int

MAX_NUM_FRAMES = 10_000
"""The most frames ``num_frames`` may sample of a video. Each distinct frame is decoded and encoded once however often
it is sampled, but every sampled frame is a row of the video's features (2 KB each for a 512-wide CLIP), as it is in
the reference's arithmetic; 10,000 of them are 20 MB per video. VATEX-EVAL samples 10 (clips of about 250 frames)."""


def check_num_frames(num_frames: Optional[int], name: str = "num_frames") -> None:
    """``num_frames`` must be ``None`` or a positive integer of at most :data:`MAX_NUM_FRAMES`."""
    check_positive_int(num_frames, name, optional=True)
    if num_frames is not None and num_frames > MAX_NUM_FRAMES:
        raise InputError(f"{name}={num_frames} is above capeval's limit of {MAX_NUM_FRAMES:,} frames sampled per video "
                         "(each sampled frame is a row of the video's features); sample fewer, or pass None for every "
                         "frame")


def frame_runs(total: int, num_frames: Optional[int]) -> Iterator[Tuple[int, int]]:
    """The frames :func:`sample_indices` keeps of ``total``, as (index, times sampled) in increasing index order, one
    pair per distinct frame; computed by arithmetic, as many steps as distinct frames whatever ``num_frames``.

    ``np.linspace(0, total - 1, n)`` is ``k * step`` for ``k < n - 1`` with ``step = (total - 1) / (n - 1)`` in double
    arithmetic (Python's floats are IEEE doubles, as NumPy's), and ``total - 1`` exactly for ``k = n - 1``; the cast
    truncates. The values never decrease with ``k``, so each distinct value's run ends where the next value's starts,
    found from ``(value + 1) / step`` and corrected by evaluating the formula itself."""
    if num_frames is None:
        yield from ((index, 1) for index in range(total))
        return
    check_num_frames(num_frames)
    if num_frames == 1 or total == 1:
        yield 0, num_frames
        return
    step = (total - 1) / (num_frames - 1)

    def value(k: int) -> int:
        return total - 1 if k == num_frames - 1 else int(k * step)

    first = 0
    while first < num_frames:
        index = value(first)
        end = min(num_frames, max(first + 1, math.ceil((index + 1) / step)))
        while end > first + 1 and value(end - 1) > index:
            end -= 1
        while end < num_frames and value(end) == index:
            end += 1
        yield index, end - first
        first = end


def sample_indices(total: int, num_frames: Optional[int]) -> List[int]:
    """The frame indices VATEX-EVAL-demo.py keeps of ``total`` frames: ``np.linspace(0, total - 1, num_frames)`` cast
    to int (repeated indices when ``num_frames > total``), or every index when ``num_frames`` is ``None``;
    ``num_frames`` is checked by :func:`check_num_frames`."""
    return [index for index, times in frame_runs(total, num_frames) for _ in range(times)]
