"""ViLBERTScore (Lee et al., 2020) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{lee2020vilbertscore,
  title={ViLBERTScore: Evaluating Image Caption Using Vision-and-Language BERT},
  author={Lee, Hwanhee and Yoon, Seunghyun and Dernoncourt, Franck and Kim, Doo Soon and Bui, Trung and Jung, Kyomin},
  booktitle={Proceedings of the First Workshop on Evaluation and Comparison of NLP Systems},
  pages={34--39},
  year={2020}
}
"""

_DESCRIPTION = """\
ViLBERTScore compares a candidate caption with each reference through ViLBERT's image-conditioned token embeddings
(the text output of the last co-attention block of the 12-in-1 ViLBERT, task token 7): BERTScore-style greedy
matching gives precision, recall and F1 per (candidate, reference) pair, each averaged over the references. Matched
tokens, truncation to 37 tokens and masking follow the reference implementation (hwanheelee1993/ViLBERTScore); see
the metric card. Images are given as region features from ViLBERT's detector (capeval.RegionFeatures).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one entry per prediction: `capeval.RegionFeatures(features, boxes, image_size)` with 100
        regions of 2048-d features from ViLBERT's detector. A keyword of `compute` only.
    references (`list` of `list` of `str`): reference captions per prediction, at least one each (the paper uses 5).
    model (`str`, *optional*): hub id or local folder of a converted ViLBERT; default `capeval/vilbert-multi-task`.
    revision (`str`, *optional*): hub revision of `model`.
    device (`str`, *optional*): torch device; Accelerate's default device when omitted.
    batch_size (`int`, *optional*): texts per forward pass (default 64).
    precision (`str`, *optional*): "auto" (default, fp32 as the reference), "fp32", "fp16" or "bf16".
    cache_dir (`str`, *optional*): folder of capeval's on-disk cache of ViLBERT text states (none by default).
Returns:
    vilbert_precision, vilbert_recall, vilbert_f1 (`float`): corpus means.
    vilbert_precisions, vilbert_recalls, vilbert_f1s (`list` of `float`): per prediction.
    signature (`str`): model, revision, task token, layer, text length, regions, precision and capeval version.
Examples:
    >>> vilbertscore = evaluate.load("capeval/vilbertscore")
    >>> results = vilbertscore.compute(predictions=["a dog runs on the grass"], images=[regions],
    ...                                references=[["a dog running on grass", "a brown dog runs outside"]])
    >>> sorted(results)
    ['signature', 'vilbert_f1', 'vilbert_f1s', 'vilbert_precision', 'vilbert_precisions', 'vilbert_recall', 'vilbert_recalls']
"""


class ViLBERTScore(evaluate_module.CaptionMetric):
    """ViLBERTScore P / R / F; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "vilbertscore"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/hwanheelee1993/ViLBERTScore", "https://aclanthology.org/2020.eval4nlp-1.4/")
