"""SCAN configuration: the dimensions and options of a trained SCAN (Lee et al. 2018) text-image matching model.

The fields are the SCAN training options (``argparse.Namespace`` stored as ``opt`` in the original checkpoint) that
fix the architecture or the grounding arithmetic. capeval implements one SCAN variant, the one TIGEr uses:
``precomp_enc_type=basic`` image encoder, bidirectional GRU text encoder, ``clipped_l2norm`` attention normalisation.
The training objective (``cross_attn``, ``agg_func``, ``lambda_lse``) does not enter the grounding; it is recorded so
that a converted folder says which model it holds, and only the t2i / LogSumExp variant is accepted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict

from capeval.configuration import JsonConfig

SUPPORTED_OPTIONS: Dict[str, Any] = {
    "cross_attn": "t2i",
    "agg_func": "LogSumExp",
    "raw_feature_norm": "clipped_l2norm",
    "bi_gru": True,
    "precomp_enc_type": "basic",
    "no_imgnorm": False,
    "no_txtnorm": False,
}
"""The training options capeval implements, with the only value each may take."""


@dataclass(frozen=True)
class ScanConfig(JsonConfig):
    """Dimensions and options of a SCAN model (names as in SCAN's ``train.py``).

    ``vocab_size`` rows of ``word_dim``-d word embeddings feed a ``num_layers``-layer bidirectional GRU with
    ``embed_size`` hidden units per direction; region features of ``img_dim`` are projected to ``embed_size``.
    ``lambda_softmax`` is the inverse temperature of the attention softmax over words (TIGEr reads it from the
    training options, 9 for the published model).
    """

    model_type: ClassVar[str] = "scan"
    sort_keys: ClassVar[bool] = True

    vocab_size: int
    word_dim: int = 300
    embed_size: int = 1024
    img_dim: int = 2048
    num_layers: int = 1
    lambda_softmax: float = 9.0
    lambda_lse: float = 6.0
    cross_attn: str = "t2i"
    agg_func: str = "LogSumExp"
    raw_feature_norm: str = "clipped_l2norm"
    bi_gru: bool = True
    precomp_enc_type: str = "basic"
    no_imgnorm: bool = False
    no_txtnorm: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "word_dim", "embed_size", "img_dim", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SCAN config: {name} must be a positive integer, got {value!r}")
        unsupported = {name: getattr(self, name) for name, value in SUPPORTED_OPTIONS.items()
                       if getattr(self, name) != value}
        if unsupported:
            raise ValueError(f"SCAN config: options {unsupported} are not implemented; capeval implements "
                             f"{SUPPORTED_OPTIONS} (the TIGEr grounding model)")
