"""PAC-S and RefPAC-S (Sarto et al., 2023) as a Hugging Face ``evaluate`` metric, computed by capeval."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{sarto2023positive,
  title={{Positive-Augmented Contrastive Learning for Image and Video Captioning Evaluation}},
  author={Sarto, Sara and Barraco, Manuele and Cornia, Marcella and Baraldi, Lorenzo and Cucchiara, Rita},
  booktitle={Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition},
  year={2023}
}
"""

_DESCRIPTION = """\
PAC-S scores a caption against its image: 2.0 * max(cos(E_image, E_text), 0) with a CLIP whose final projections
were fine-tuned by positive-augmented contrastive learning (default: the PAC-S CLIP ViT-B/32; also the PAC-S
OpenCLIP ViT-L/14), the text prefixed by "A photo depicts ". RefPAC-S, computed when references are given, is the
per-item harmonic mean of PAC-S and the largest raw cosine between the caption and its references. Corpus values
are means of the per-item values. The numbers match the reference implementation (aimagelab/pacscore): same
preprocessing, fp32 arithmetic, raw (unclipped) reference cosine; the reference code's 0/0 NaN is defined as 0.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction, as file paths, PIL images, uint8 HWC arrays or encoded bytes.
        A keyword of `compute` only: `add`/`add_batch` take predictions and references, so that evaluate never
        re-encodes the images (see the metric card).
    videos (`list`): instead of images, one video per prediction (video PAC-S, Sec. 3.2 of the paper: EMScore's
        formula on the PAC-S backbone): a video file path (`pip install "capeval[video]"`), a list of frames, a
        uint8 TxHxWx3 array, a `capeval.VideoFeatures` or a `.pt` / `.npy` file of (T, D) frame features. Every
        frame is used, with IDF from the references, else the candidates; for other settings use the
        `capeval/emscore` metric with `model="capeval/pacs-clip-vit-b-32"`.
    references (`list` of `list` of `str`, *optional*): reference captions per prediction; when given,
        RefPAC-S is computed too. Give references for every prediction or for none.
    model (`str`, *optional*): hub id or local folder of a converted PAC-S model; default
        `capeval/pacs-clip-vit-b-32` (`capeval/pacs-openclip-vit-l-14` is the ViT-L/14 backbone).
    revision (`str`, *optional*): hub revision of `model`; capeval's pinned default (`v1.0`) when omitted.
    device (`str`, *optional*): torch device; Accelerate's default device when omitted.
    batch_size (`int`, *optional*): images per forward pass (default 64).
    precision (`str`, *optional*): "auto" (default: fp32, as the reference code), "fp32", "fp16" or "bf16".
    cache_dir (`str`, *optional*): folder of capeval's on-disk embedding cache (none by default).
Returns:
    pac_score (`float`): mean PAC-S, in [0, 2.0] for images; for videos EMScore(X,V) full F.
    pac_scores (`list` of `float`): PAC-S per prediction.
    ref_pac_score (`float`): mean RefPAC-S (only with references); for videos EMScore(X,V,X*) full F.
    ref_pac_scores (`list` of `float`): RefPAC-S per prediction (only with references).
    signature (`str`): metric, model, revision, weight, prompt, precision and capeval version.
Examples:
    >>> pacscore = evaluate.load("capeval/pacscore")
    >>> results = pacscore.compute(
    ...     predictions=["A white dog is laying on the ground with its head on its paws ."],
    ...     images=["examples/pacscore/images/image1.jpg"],
    ...     references=[["A white dog has its head on the ground ."]],
    ... )
    >>> sorted(results)
    ['pac_score', 'pac_scores', 'ref_pac_score', 'ref_pac_scores', 'signature']
"""


class PACScore(evaluate_module.CaptionMetric):
    """PAC-S / RefPAC-S; the scorer of each (model, revision, device, ...) setting is kept for later calls."""

    family = "pacscore"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/aimagelab/pacscore", "https://arxiv.org/abs/2303.12112")
