"""TIGEr (Jiang et al., 2019) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{jiang-etal-2019-tiger,
  title = "{TIGE}r: Text-to-Image Grounding for Image Caption Evaluation",
  author = "Jiang, Ming and Huang, Qiuyuan and Zhang, Lei and Wang, Xin and Zhang, Pengchuan and Gan, Zhe and
            Diesner, Jana and Gao, Jianfeng",
  booktitle = "EMNLP-IJCNLP",
  year = "2019",
  pages = "2141--2152"
}
"""

_DESCRIPTION = """\
TIGEr grounds the candidate and each reference caption in the image's 36 bottom-up regions with a SCAN text-image
matching model (regions attend to the caption's words; one cosine per region). With r the mean reference grounding
and c the candidate's: RRS is the nDCG of the regions ranked by c with min-max-normalised r as relevance, WDS is
1 - sigmoid(1.5 * (KL(softmax(r) || softmax(c)) + log(|r| / |c|))), and TIGEr = (RRS + WDS) / 2 per candidate; the
corpus value is the mean. The numbers match the authors' code (SeleenaJM/CapEval with kuanghuei/SCAN), including
its Python 2 ASCII-only lower-casing and nltk.word_tokenize; where that code raises, the result is defined and a
warning gives the count (see the metric card).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions.
    images (`list`): one entry per prediction: a `capeval.RegionFeatures` holding the image's (36, 2048)
        bottom-up region features, or an image (path, PIL image, uint8 array, bytes), whose 36 regions the
        bottom-up region detector finds. Precomputed features never load the detector. A keyword of `compute` only.
    references (`list` of `list` of `str`): reference captions per prediction (required).
    model (`str`, *optional*): hub id or local folder of a converted SCAN model; default `capeval/tiger-scan-coco`.
    revision (`str`, *optional*): hub revision of `model`; capeval's pinned default when omitted.
    device (`str`, *optional*): torch device; Accelerate's default device when omitted.
    batch_size (`int`, *optional*): images per forward pass (default 64).
    precision (`str`, *optional*): "auto" or "fp32" (SCAN runs in fp32, as trained).
    cache_dir (`str`, *optional*): folder of capeval's on-disk cache of embeddings and grounding vectors.
Returns:
    tiger_score (`float`): mean TIGEr, in [0, 1].
    tiger_scores (`list` of `float`): TIGEr per prediction.
    rrs_scores (`list` of `float`): Region Rank Similarity per prediction.
    wds_scores (`list` of `float`): Weight Distribution Similarity per prediction.
    signature (`str`): metric, model, revision, lambda, tau, NLTK version, what made the regions when known
        (`detector:...`), precision and capeval version.
Examples:
    >>> from capeval.models.regions.files import read_region_features
    >>> regions = read_region_features("regions.npz")  # as `capeval regions` writes it; image id -> RegionFeatures
    >>> tiger = evaluate.load("capeval/tigerscore")
    >>> results = tiger.compute(
    ...     predictions=["a dog runs on the grass ."],
    ...     images=[regions["4911020894"]],
    ...     references=[["a brown dog running across a lawn ."]],
    ... )
    >>> sorted(results)
    ['rrs_scores', 'signature', 'tiger_score', 'tiger_scores', 'wds_scores']
"""


class TIGEr(evaluate_module.CaptionMetric):
    """TIGEr; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "tigerscore"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/SeleenaJM/CapEval", "https://aclanthology.org/D19-1220")
