"""EMScore (Shi et al., 2022) as a Hugging Face ``evaluate`` metric, computed by capeval; on the PAC-S backbone
(``model="capeval/pacs-clip-vit-b-32"``) it is video PAC-S / RefPAC-S (Sarto et al., 2023)."""
from __future__ import annotations

from capeval.integrations import evaluate_module

_CITATION = """\
@inproceedings{shi2022emscore,
  title={{EMScore}: Evaluating Video Captioning via Coarse-Grained and Fine-Grained Embedding Matching},
  author={Shi, Yaya and Yang, Xu and Xu, Haiyang and Yuan, Chunfeng and Li, Bing and Hu, Weiming and Zha, Zheng-Jun},
  booktitle={Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition},
  year={2022}
}
"""

_DESCRIPTION = """\
EMScore scores a video caption by matching CLIP embeddings at two granularities: fine-grained, the caption's token
embeddings against the video's frame embeddings (IDF-weighted greedy matching giving precision, recall and F), and
coarse-grained, the caption's embedding against the mean of the frame embeddings (a cosine). Each full score is the
mean of the two. With references, the candidate is matched against them the same way (EMScore(X,X*)) and against
the video and the references together (EMScore(X,V,X*)). Default model: OpenAI CLIP ViT-B/32, as the reference
code; on the PAC-S CLIP (model="capeval/pacs-clip-vit-b-32") the results are video PAC-S and RefPAC-S. The numbers
match the reference implementation (ShiYaya/emscore) on the same frames; where it crashes or gives NaN capeval
defines the result and warns (see the metric card).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per video.
    videos (`list`, *optional* with references): one video per prediction: a video file path (decoded with PyAV:
        `pip install "capeval[video]"`), a list of frames (PIL images or uint8 HxWx3 arrays), a uint8 TxHxWx3 array,
        a `capeval.VideoFeatures` or a `.pt` / `.npy` file of precomputed (T, D) frame features. A keyword of
        `compute` only. Without videos, only the reference-based EMScore(X,X*) is computed.
    references (`list` of `list` of `str`, *optional*): reference captions per prediction; when given,
        EMScore(X,X*) and (with videos) EMScore(X,V,X*) are computed too. Give references for every prediction or
        for none; their number may differ from item to item.
    model (`str`, *optional*): hub id or local folder of a converted CLIP model; default
        `openai/clip-vit-base-patch32` (`capeval/pacs-clip-vit-b-32` gives video PAC-S).
    revision (`str`, *optional*): hub revision of `model`; capeval's pinned default when omitted.
    device (`str`, *optional*): torch device; Accelerate's default device when omitted.
    batch_size (`int`, *optional*): frames per forward pass (default 64).
    precision (`str`, *optional*): "auto" (default: fp32 on the CPU, fp16 on an accelerator, as the reference
        code), "fp32", "fp16" or "bf16".
    cache_dir (`str`, *optional*): folder of capeval's on-disk cache of frame and token features (none by default).
    idf (`bool`, *optional*): weight tokens by IDF (default True, as the reference); False weighs every token 1.
    idf_corpus (`list` of `str`, *optional*): sentences to compute the IDF table from (VATEX-EVAL uses VATEX's
        training captions); default: the references, else the candidates, as the reference.
    num_frames (`int`, *optional*): frames sampled uniformly from each video as VATEX-EVAL-demo.py samples them
        (`np.linspace(0, T - 1, n)` cast to int), at most 10,000 (each distinct frame decoded once); default every
        frame.
Returns:
    emscore_video_full_f (`float`): mean EMScore(X,V) full F, the main score (needs videos).
    emscore_<view>_<key> (`float`) and emscore_<view>_<key>s (`list` of `float`): the corpus mean and the
        per-prediction values of every view computed (`video`: EMScore(X,V), `refs`: EMScore(X,X*), `video_refs`:
        EMScore(X,V,X*)) and key (`figr_p`, `figr_r`, `figr_f`, `cogr`, `full_p`, `full_r`, `full_f`).
    signature (`str`): metric, model, revision, IDF source, frames, decoder (when video files were decoded), precision
        and capeval version.
Examples:
    >>> emscore = evaluate.load("capeval/emscore")
    >>> results = emscore.compute(
    ...     predictions=["a man is playing the guitar on a stage ."],
    ...     videos=["concert.mp4"],
    ...     references=[["a man plays an electric guitar .", "a musician performs a song on stage ."]],
    ... )
    >>> results["emscore_video_full_f"], results["emscore_video_refs_full_f"]
"""


class EMScore(evaluate_module.CaptionMetric):
    """EMScore; the scorer of each (model, revision, device, IDF, frames, ...) setting is kept for later calls."""

    family = "emscore"
    description_text = _DESCRIPTION
    citation_text = _CITATION
    inputs_text = _KWARGS_DESCRIPTION
    urls = ("https://github.com/ShiYaya/emscore", "https://arxiv.org/abs/2111.08919")
