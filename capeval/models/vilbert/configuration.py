"""ViLBERT configuration: the fields of vilbert-multi-task's ``BertConfig`` JSON files that fix the trunk's shape.

Field names are the original ones (``bert_base_6layer_6conect.json``), so a converted ``config.json`` reads like the
original file. Training-only fields (dropout rates, initialiser ranges, target sizes of the pre-training heads) are
not kept: the metric runs the model in eval mode, where dropout is the identity.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, List, Mapping, Union

ACTIVATIONS = ("gelu", "relu", "swish")
"""``hidden_act`` values of the original ``ACT2FN`` table."""

TRAINING_ONLY_FIELDS = frozenset({
    "attention_probs_dropout_prob", "hidden_dropout_prob", "v_attention_probs_dropout_prob", "v_hidden_dropout_prob",
    "initializer_range", "v_initializer_range", "v_target_size", "visual_target", "predict_feature",
    "bi_intermediate_size", "bi_attention_type", "pooling_method", "fusion_method", "objective", "num_negative",
    "visualization", "fixed_t_layer", "fixed_v_layer", "model",
})
"""Original fields that do not change the eval-mode text output (dropout, initialisation, heads, layer freezing,
attention logging; ``model`` must be ``"bert"``, checked on reading)."""

UNSUPPORTED_FLAGS = {"dynamic_attention": False, "fast_mode": False, "in_batch_pairs": False, "with_coattention": True}
"""Original switches that change the forward pass; only the values every released checkpoint uses are implemented."""

MAX_TASK_TOKENS = 20
"""Rows of the original ``task_embeddings`` table (``nn.Embedding(20, hidden_size)``)."""


@dataclass
class VilbertConfig:
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

    @classmethod
    def from_original(cls, original: Mapping[str, Any], *, task_specific_tokens: bool) -> "VilbertConfig":
        """From an original ``BertConfig`` JSON dict; ``task_specific_tokens`` is not in those files (the scripts
        set it: True for ``multi_task_model.bin``, False for ``pretrained_model.bin``)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(original) - known - TRAINING_ONLY_FIELDS - set(UNSUPPORTED_FLAGS))
        if unknown:
            raise ValueError(f"unknown ViLBERT config fields: {unknown}")
        if original.get("model", "bert") != "bert":
            raise ValueError(f"only the BERT text stream is supported, got model={original['model']!r}")
        for flag, supported in UNSUPPORTED_FLAGS.items():
            if original.get(flag, supported) != supported:
                raise ValueError(f"{flag}={original[flag]!r} is not supported (released checkpoints use {supported})")
        values = {key: value for key, value in original.items() if key in known}
        missing = sorted(known - set(values) - {"task_specific_tokens", "layer_norm_eps"})
        if missing:  # the original would fall back to its constructor defaults, which differ from the released files
            raise ValueError(f"ViLBERT config lacks fields: {missing}")
        values["task_specific_tokens"] = task_specific_tokens
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: Union[str, Path]) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Union[str, Path]) -> "VilbertConfig":
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
