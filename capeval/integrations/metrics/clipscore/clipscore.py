"""CLIP-S and RefCLIP-S (Hessel et al., 2021) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{hessel2021clipscore,
  title={{CLIPScore:} A Reference-free Evaluation Metric for Image Captioning},
  author={Hessel, Jack and Holtzman, Ari and Forbes, Maxwell and Bras, Ronan Le and Choi, Yejin},
  booktitle={EMNLP},
  year={2021}
}
"""

_DESCRIPTION = """\
CLIP-S scores a caption against its image: 2.5 * max(cos(E_image, E_text), 0) with OpenAI's CLIP ViT-B/32 and the
text prefixed by "A photo depicts ". RefCLIP-S, computed when references are given, is the per-item harmonic mean
of CLIP-S and the largest raw cosine between the caption and its references. Corpus values are means of the
per-item values. The numbers match the reference implementation (jmhessel/clipscore): same preprocessing, same
prompt on references, raw (unclipped) reference cosine; the reference code's 0/0 NaN is defined as 0.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction, as file paths, PIL images, uint8 HWC arrays or encoded bytes.
        A keyword of `compute` only: `add`/`add_batch` take predictions and references, so that evaluate never
        re-encodes the images (see the metric card).
    references (`list` of `list` of `str`, *optional*): reference captions per prediction; when given,
        RefCLIP-S is computed too. Give references for every prediction or for none.
    model (`str`, *optional*): hub id or local folder of a converted CLIP model; default
        `openai/clip-vit-base-patch32` at the revision pinned by capeval.
    revision (`str`, *optional*): hub revision of `model`; capeval's pinned default when omitted.
    device (`str`, *optional*): torch device; Accelerate's default device when omitted.
    batch_size (`int`, *optional*): images per forward pass (default 64).
    precision (`str`, *optional*): "auto" (default: the reference code's own precision, fp32 on CPU and fp16 on
        GPU), "fp32", "fp16" (the published fp16 arithmetic, on any device) or "bf16".
    cache_dir (`str`, *optional*): folder of capeval's on-disk embedding cache (none by default).
Returns:
    clip_score (`float`): mean CLIP-S, in [0, 2.5].
    clip_scores (`list` of `float`): CLIP-S per prediction.
    ref_clip_score (`float`): mean RefCLIP-S (only with references).
    ref_clip_scores (`list` of `float`): RefCLIP-S per prediction (only with references).
    signature (`str`): metric, model, revision, weight, prompt, precision and capeval version.
Examples:
    >>> clipscore = evaluate.load("capeval/clipscore")
    >>> results = clipscore.compute(
    ...     predictions=["an orange cat and a grey cat are lying together."],
    ...     images=["examples/clipscore/images/image1.jpg"],
    ...     references=[["two cats are sleeping next to each other."]],
    ... )
    >>> sorted(results)
    ['clip_score', 'clip_scores', 'ref_clip_score', 'ref_clip_scores', 'signature']
"""


class CLIPScore(evaluate_module.CaptionMetric):
    """CLIP-S / RefCLIP-S; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "clipscore"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/jmhessel/clipscore", "https://arxiv.org/abs/2104.08718")
