"""Gradio Space of the EMScore metric (the app itself is ``capeval.integrations.space``): one uploaded video, scored
as the uploaded file, against a candidate caption and optional references."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from capeval.integrations import space
from capeval.registry import FAMILIES

METRIC_SCRIPT = Path(__file__).resolve().parent / "emscore.py"
MODELS: List[str] = [FAMILIES["emscore"].default_model, FAMILIES["pacscore"].default_model]
"""Models offered in the Space; the first is the metric's default (EMScore's CLIP), the second gives video PAC-S."""


def score_caption(video: Optional[str], candidate: str, references: str = "",
                  model: Optional[str] = None) -> Dict[str, Any]:
    """The metric's result for one video file (none: the references alone) and caption; ``references`` holds one
    reference per line."""
    return space.score_caption(METRIC_SCRIPT, video, candidate, references, model or MODELS[0])


if __name__ == "__main__":
    space.build_demo(METRIC_SCRIPT, MODELS).launch(show_error=True)
