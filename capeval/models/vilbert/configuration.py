"""ViLBERT configuration: the fields of vilbert-multi-task's ``BertConfig`` JSON files that fix the trunk's shape.

Field names are the original ones (``bert_base_6layer_6conect.json``), so a converted ``config.json`` reads like the
original file. Training-only fields (dropout rates, initialiser ranges, target sizes of the pre-training heads) are
not kept: the metric runs the model in eval mode, where dropout is the identity. ``conversion/vilbert_converter.py``
reads the original files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from capeval.configuration import JsonConfig

ACTIVATIONS = ("gelu", "relu", "swish")
"""``hidden_act`` values of the original ``ACT2FN`` table."""

MAX_TASK_TOKENS = 20
"""Rows of the original ``task_embeddings`` table (``nn.Embedding(20, hidden_size)``)."""


@dataclass
class VilbertConfig(JsonConfig):
    """Shape of the ViLBERT trunk: a BERT text stream, a visual stream and co-attention ("connection") blocks.

    Connection block ``k`` runs after text layers ``[.., t_biattention_id[k])`` and visual layers
    ``[.., v_biattention_id[k])``, as in the original ``BertEncoder``.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    v_feature_size: int = 2048
    v_hidden_size: int = 1024
    v_num_hidden_layers: int = 6
    v_num_attention_heads: int = 8
    v_intermediate_size: int = 1024
    v_hidden_act: str = "gelu"
    bi_hidden_size: int = 1024
    bi_num_attention_heads: int = 8
    v_biattention_id: List[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 5])
    t_biattention_id: List[int] = field(default_factory=lambda: [6, 7, 8, 9, 10, 11])
    task_specific_tokens: bool = True
    layer_norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        if len(self.v_biattention_id) != len(self.t_biattention_id) or not self.v_biattention_id:
            raise ValueError("v_biattention_id and t_biattention_id must be non-empty and of equal length")
        for name in ("v_biattention_id", "t_biattention_id"):
            ids = list(getattr(self, name))
            if ids != sorted(ids):
                raise ValueError(f"{name} must be increasing, got {ids}")
        if (max(self.v_biattention_id) >= self.v_num_hidden_layers
                or max(self.t_biattention_id) >= self.num_hidden_layers):
            raise ValueError("co-attention ids must index existing layers")
        for width, heads in ((self.hidden_size, self.num_attention_heads),
                             (self.v_hidden_size, self.v_num_attention_heads),
                             (self.bi_hidden_size, self.bi_num_attention_heads)):
            if width % heads:
                raise ValueError(f"hidden size {width} is not a multiple of the number of heads {heads}")
        for act in (self.hidden_act, self.v_hidden_act):
            if act not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")

    @property
    def num_text_layers_used(self) -> int:
        """Text layers that run before the last connection block (the rest never reach its text output)."""
        return self.t_biattention_id[-1]

    @property
    def num_visual_layers_used(self) -> int:
        """Visual layers that run before the last connection block."""
        return self.v_biattention_id[-1]
