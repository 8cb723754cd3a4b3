"""Polos (Wada et al., CVPR 2024) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{wada2024polos,
  title={Polos: Multimodal Metric Learning from Human Feedback for Image Captioning},
  author={Wada, Yuiga and Kaneda, Kanta and Saito, Daichi and Sugiura, Komei},
  booktitle={CVPR},
  pages={13559--13568},
  year={2024}
}
"""

_DESCRIPTION = """\
Polos scores a caption against its image and references with a regressor trained on human judgments (the Polaris
dataset): for each reference, SimCSE (RoBERTa-base) sentence embeddings of candidate and reference with their
difference and product, and CLIP ViT-B/32 features of the image and of the "A photo depicts "-prompted candidate and
reference with their differences and products, go through a feed-forward network and a sigmoid; the score is the
maximum over the references, in (0, 1). The authors' checkpoint, run by capeval without the polos package.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction (paths, PIL images, uint8 HWC arrays or encoded bytes); a keyword of
        `compute` only.
    references (`list` of `list` of `str`): the references of each prediction (required).
    model (`str`, *optional*): hub id or local folder of a converted Polos model (default
        `capeval/polos-clip-vit-b-32`, the authors' checkpoint).
    revision, device, batch_size, precision, cache_dir: as for capeval's other metrics.
Returns:
    polos_score (`float`): mean Polos.
    polos_scores (`list` of `float`): Polos per prediction.
    signature (`str`): model, revision, prompt, layer mix and pooling, precision, capeval version.
"""


class Polos(evaluate_module.CaptionMetric):
    """Polos; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "polos"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/keio-smilab24/Polos", "https://arxiv.org/abs/2402.18091")
