"""Gradio Space of ViLBERTScore. ViLBERT reads detector regions, not pixels, so the form takes a region file: an
``.npz`` holding ``features`` (100, 2048), ``boxes`` (100, 4) and ``image_size`` (width, height) from ViLBERT's
detector, with the candidate caption and its references (one per line)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from capeval.integrations import space
from capeval.models.regions import RegionFeatures
from capeval.registry import FAMILIES

METRIC_SCRIPT = Path(__file__).resolve().parent / "vilbertscore.py"
MODELS: List[str] = [FAMILIES["vilbertscore"].default_model]
"""Models offered in the Space; the first is the metric's default."""


def score_caption(regions_file: str, candidate: str, references: str,
                  model: Optional[str] = None) -> Dict[str, Any]:
    """The metric's result for one region file and caption; ``references`` holds one reference per line."""
    with np.load(regions_file, allow_pickle=False) as stored:
        regions = RegionFeatures(stored["features"], stored["boxes"], tuple(stored["image_size"]))
    reference_list = [line.strip() for line in references.splitlines() if line.strip()]
    return space.load_metric(str(METRIC_SCRIPT)).compute(
        predictions=[candidate], images=[regions], references=[reference_list], model=model or MODELS[0])


def build_demo() -> Any:
    import gradio as gr

    with gr.Blocks(title="ViLBERTScore") as demo:
        gr.Markdown("# ViLBERTScore\n\nRegion file (.npz: features, boxes, image_size from ViLBERT's detector), "
                    "a candidate caption and its references.")
        with gr.Row():
            regions = gr.File(file_types=[".npz"], type="filepath", label="Regions (.npz)")
            with gr.Column():
                candidate = gr.Textbox(label="Candidate caption", lines=2)
                references = gr.Textbox(label="References (one per line)", lines=5)
                model = gr.Dropdown(MODELS, value=MODELS[0], label="Model")
                button = gr.Button("Score", variant="primary")
        result = gr.JSON(label="Result")
        button.click(score_caption, inputs=[regions, candidate, references, model], outputs=result)
    return demo


if __name__ == "__main__":
    build_demo().launch(show_error=True)
