"""Gradio Space of the Polos metric (the app itself is ``capeval.integrations.space``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from capeval.integrations import space
from capeval.registry import FAMILIES

METRIC_SCRIPT = Path(__file__).resolve().parent / "polos.py"
MODELS: List[str] = [FAMILIES["polos"].default_model]
"""Models offered in the Space; the first is the metric's default."""


def score_caption(image: str, candidate: str, references: str = "", model: Optional[str] = None) -> Dict[str, Any]:
    """The metric's result for one image file and caption and its references, one per line."""
    return space.score_caption(METRIC_SCRIPT, image, candidate, references, model or MODELS[0])


if __name__ == "__main__":
    space.build_demo(METRIC_SCRIPT, MODELS).launch(show_error=True)
