"""What a throughput peer gets (:class:`ChildContext`) and what its run gives back (:class:`PeerResult`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from _throughput.workloads import Flickr8kFiles


@dataclass(frozen=True)
class ChildContext:
    """Everything a peer needs, rebuilt identically in each subprocess from the command line."""

    model_dir: Path
    selection: Flickr8kFiles
    cache_dir: Optional[Path]
    stream_pairs: int
    peer: str
    device: str
    precision: str
    scores_dir: Path
    """Where peers that score per item save their per-item scores (``<peer>.npy``), for the parent to compare."""


@dataclass
class PeerResult:
    """What one peer run measured."""

    peer: str
    workload: str
    pairs: int
    seconds: float
    cpu_seconds: float
    load_seconds: float
    peak_rss_mb: float
    mean_score: float
    peak_tree_pss_mb: float = 0.0
    images_encoded: Optional[int] = None
    texts_encoded: Optional[int] = None
    extra: Optional[Dict[str, float]] = None

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds

    @property
    def peak_memory_mb(self) -> float:
        """The process's peak RSS or its process tree's peak sampled PSS, whichever is larger."""
        return max(self.peak_rss_mb, self.peak_tree_pss_mb)


def measured(timing: Tuple[float, float, float], load_seconds: float, mean_score: Optional[float] = None,
             **more: Any) -> Dict[str, Any]:
    """A peer run's measurements, as :class:`PeerResult` fields: the wall and CPU seconds of ``timing`` (what
    ``_measurement.timed`` returns), the loading seconds, the mean score (``timing``'s value unless given) and
    ``more`` (``pairs`` when the run is not the whole workload, encoding counts, ``extra``)."""
    seconds, cpu_seconds, value = timing
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "load_seconds": load_seconds,
            "mean_score": value if mean_score is None else mean_score, **more}
