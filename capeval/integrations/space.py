"""The gradio Space shared by the metric folders: one image (or video, for a video family), a candidate caption and
optional references.

evaluate's default widget takes text only, so the Space builds its own form. The image or video reaches the metric as
the uploaded file itself: images with ``type="filepath"`` and ``image_mode=None`` (gradio neither rotates them by
EXIF nor converts or re-encodes them), videos uploaded with ``format=None`` (gradio neither converts nor flips them),
exactly as the reference implementations read files. gradio is imported only by :func:`build_demo`, so
:func:`score_caption` works without it.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Any, Dict, Optional, Sequence, Union

import evaluate

from capeval.registry import FAMILIES

PathLike = Union[str, "os.PathLike[str]"]


@lru_cache(maxsize=None)
def load_metric(metric_script: str) -> evaluate.EvaluationModule:
    """The metric module, loaded once per script (it keeps the scorers and their embedding caches)."""
    return evaluate.load(metric_script)


def entry_keyword(metric: evaluate.EvaluationModule) -> str:
    """What the metric's Space uploads: ``"images"``, or ``"videos"`` for a video family."""
    return FAMILIES[metric.family].inputs


def score_caption(metric_script: PathLike, upload: Optional[str], candidate: str, references: str = "",
                  model: Optional[str] = None) -> Dict[str, Any]:
    """The metric's result for one uploaded image or video file (none: references alone, where the family scores
    them so) and caption; ``references`` holds one reference per line."""
    metric = load_metric(str(metric_script))
    reference_list = [line.strip() for line in (references or "").splitlines() if line.strip()]
    return metric.compute(predictions=[candidate], references=[reference_list] if reference_list else None,
                          model=model, **{entry_keyword(metric): [upload] if upload else None})


def build_demo(metric_script: PathLike, models: Sequence[str]) -> Any:
    """The gradio Blocks app of one metric; ``models`` are offered in a menu, the first being the default."""
    import gradio as gr

    metric = load_metric(str(metric_script))
    with gr.Blocks(title=type(metric).__name__) as demo:
        gr.Markdown(f"# {type(metric).__name__}\n\n{metric.description}")
        with gr.Row():
            if entry_keyword(metric) == "videos":
                upload = gr.Video(sources=["upload"], format=None, label="Video")
            else:
                upload = gr.Image(type="filepath", image_mode=None, sources=["upload"], label="Image")
            with gr.Column():
                candidate = gr.Textbox(label="Candidate caption", lines=2)
                references = gr.Textbox(label="References (optional, one per line)", lines=5)
                model = gr.Dropdown(list(models), value=models[0], label="Model")
                button = gr.Button("Score", variant="primary")
        result = gr.JSON(label="Result")
        button.click(lambda *values: score_caption(metric_script, *values),
                     inputs=[upload, candidate, references, model], outputs=result)
    return demo
