"""BRIDGE (Sarto et al., ECCV 2024) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{sarto2024bridge,
  title={{BRIDGE:} Bridging Gaps in Image Captioning Evaluation with Stronger Visual Cues},
  author={Sarto, Sara and Cornia, Marcella and Baraldi, Lorenzo and Cucchiara, Rita},
  booktitle={ECCV},
  year={2024}
}
"""

_DESCRIPTION = """\
BRIDGE scores a caption against its image without references: 0.5 * (CLIP-S + w * max(cos(t*, c), 0)), where t* is
the mean embedding of the image's pseudo-captions (BLIP template captions whose noun chunks a mapping network fills
from CLIP's grid features) and w = 2.5. The authors released no code and no weights: this is capeval's
implementation from the paper, run with weights trained by capeval (see the metric card for what exists).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction (paths, PIL images, uint8 HWC arrays or encoded bytes); a keyword of
        `compute` only.
    references: not used; BRIDGE is reference-free (giving references is an error).
    model (`str`, *optional*): hub id or local folder of a BRIDGE model (default `capeval/bridge-clip-vit-b-32`).
    revision, device, batch_size, precision, cache_dir: as for capeval's other metrics.
Returns:
    bridge_score (`float`): mean BRIDGE, in [0, 2.5].
    bridge_scores (`list` of `float`): BRIDGE per prediction.
    signature (`str`): model, backbone, captioner, decoding, grammar, tagger, unit size, w, prompt, precision,
        capeval version.
"""


class BRIDGEScore(evaluate_module.CaptionMetric):
    """BRIDGE; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "bridge"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/aimagelab/bridge-score", "https://arxiv.org/abs/2407.20341")
