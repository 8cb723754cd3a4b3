"""Polos's configuration: the settings the authors' ``hparams.yaml`` gives the ``PolosEstimator`` that decide the
scores, saved as ``config.json`` of a converted folder and recorded in the result signature."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple, Union

from capeval.configuration import JsonConfig

# The folder's own weights file (capeval.configuration.WEIGHTS_NAME) holds the head: ``scalar_mix.*`` and
# ``ff.0.ff.linear_<n>.*``, named as in the original checkpoint.
ENCODER_FOLDER = "encoder"
"""The sentence encoder: a transformers folder (``config.json``, ``model.safetensors`` named as the checkpoint's
``encoder.model.*`` without that prefix, tokenizer files)."""
CLIP_FOLDER = "clip"
"""The CLIP model: a capeval CLIP folder converted from the checkpoint's ``clip.*`` (OpenAI key names)."""
POOLINGS = ("cls", "avg")
"""The ``pool`` settings with which the wheel's ``PolosEstimator.forward`` runs (``default``, ``max`` and
``cls+avg`` return one tensor where it unpacks four)."""
ACTIVATIONS = ("Tanh", "Sigmoid", "ReLU")


@dataclass(frozen=True)
class PolosConfig(JsonConfig):
    """One Polos model (the authors' ``reprod`` checkpoint: ``layer: mix``, ``pool: cls``, hidden sizes 2304,1152,
    Tanh, no final activation, then the estimator's own sigmoid)."""

    model_type: ClassVar[Optional[str]] = "polos"

    pretrained_model: str = "princeton-nlp/sup-simcse-roberta-base"
    """The sentence encoder the checkpoint was trained from (its weights are the checkpoint's): provenance only."""
    layer: Union[str, int] = "mix"
    """``"mix"``: the layer-wise scalar mix of every hidden state (each layer-normalised over the sentence's
    tokens); an integer: that hidden state (0 = embeddings)."""
    pool: str = "cls"
    """``"cls"``: the first token's embedding; ``"avg"``: the mean over the sentence's tokens."""
    hidden_sizes: Tuple[int, ...] = (2304, 1152)
    activations: str = "Tanh"
    final_activation: Optional[str] = None
    """The feed-forward's activation after its last linear layer (the authors': none); the estimator's sigmoid
    follows in any case."""
    clip_dim: int = 512
    """CLIP feature width (the wheel sizes its regressor input ``4 * hidden + 6 * 512``)."""
    prompt: str = "A photo depicts "
    """Put before candidate and references for CLIP's text tower, as the wheel does."""

    def __post_init__(self) -> None:
        if self.pool not in POOLINGS:
            raise ValueError(f"pool {self.pool!r} is not one Polos runs with; expected one of {POOLINGS}")
        if self.layer != "mix" and not isinstance(self.layer, int):
            raise ValueError(f"layer must be 'mix' or a hidden-state index, got {self.layer!r}")
        for activation in (self.activations, self.final_activation):
            if activation is not None and activation not in ACTIVATIONS:
                raise ValueError(f"activation {activation!r} is not implemented; expected one of {ACTIVATIONS}")
