"""ViLBERT trunk (Lu et al. 2019; vilbert-multi-task's ``BertModel``) up to the text output of its last co-attention
block, the states ViLBERTScore reads.

Module and parameter names are those of the original checkpoints without their ``bert.`` prefix
(``embeddings.task_embeddings.weight``, ``encoder.c_layer.5.biattention.query1.weight``, ...). The arithmetic is the
original's in eval mode: TF-style LayerNorm (``(x - mean) / sqrt(var + 1e-12)``), erf GELU, attention scores
``q·k / sqrt(head_size)`` plus an additive mask of ``-10000`` on padded keys, residual + LayerNorm after every
sub-layer. Parts the original computes but that never reach that output are not built: the text and visual layers
after the last co-attention block, the poolers and the heads (``conversion/vilbert_converter.py`` lists them).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from capeval.models.vilbert.configuration import MAX_TASK_TOKENS, VilbertConfig

MASKED_SCORE = -10000.0
"""Additive attention score of a masked key: ``(1.0 - mask) * -10000.0`` in the original."""


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The original's erf GELU: ``x * 0.5 * (1 + erf(x / sqrt(2)))``, the same operations in the same order, three of
    the five in place (the activations are memory-bound: fewer passes over fresh buffers)."""
    return x.mul(0.5).mul_((x / math.sqrt(2.0)).erf_().add_(1.0))


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


ACTIVATIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": gelu, "relu": torch.nn.functional.relu, "swish": swish}


class LayerNorm(nn.Module):
    """TF-style LayerNorm of the original (``BertLayerNorm``): epsilon inside the square root, population variance."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``weight * ((x - mean) / sqrt(variance + eps)) + bias``, the original's operations in its order; ``x - mean``
        is computed once and the rest runs in place."""
        mean = x.mean(-1, keepdim=True)
        centered = x - mean
        variance = centered.pow(2).mean(-1, keepdim=True)
        return centered.div_(variance.add_(self.eps).sqrt_()).mul_(self.weight).add_(self.bias)


def attention_mask_scores(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, L) 0/1 mask -> (B, 1, 1, L) additive scores: 0 where attended, -10000 where masked."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * MASKED_SCORE


def multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask_scores: torch.Tensor,
                         heads: int) -> torch.Tensor:
    """softmax(q·kᵀ / sqrt(head_size) + mask) · v per head, heads concatenated back: (B, Lq, H)."""
    batch, query_length, width = query.shape
    head_size = width // heads

    def split(x: torch.Tensor) -> torch.Tensor:
        return x.view(batch, x.shape[1], heads, head_size).permute(0, 2, 1, 3)

    scores = torch.matmul(split(query), split(key).transpose(-1, -2)).div_(math.sqrt(head_size)).add_(mask_scores)
    context = torch.matmul(torch.softmax(scores, dim=-1), split(value))
    return context.permute(0, 2, 1, 3).contiguous().view(batch, query_length, width)


class SelfAttentionProjections(nn.Module):
    """``attention.self``: the query, key and value projections of a self-attention layer."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.heads = heads

    def forward(self, hidden: torch.Tensor, mask_scores: torch.Tensor) -> torch.Tensor:
        return multi_head_attention(self.query(hidden), self.key(hidden), self.value(hidden), mask_scores, self.heads)


class ResidualOutput(nn.Module):
    """``LayerNorm(dense(x) + residual)``: the original's ``*SelfOutput`` / ``*Output`` modules."""

    def __init__(self, in_width: int, width: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(in_width, width)
        self.LayerNorm = LayerNorm(width, eps)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden).add_(residual))


class Intermediate(nn.Module):
    """``act(dense(x))``: the feed-forward expansion."""

    def __init__(self, width: int, intermediate: int, activation: str) -> None:
        super().__init__()
        self.dense = nn.Linear(width, intermediate)
        self.activation = ACTIVATIONS[activation]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden))


class Attention(nn.Module):
    """``attention``: self-attention (``self``) followed by its residual output (``output``)."""

    def __init__(self, width: int, heads: int, eps: float) -> None:
        super().__init__()
        self.self = SelfAttentionProjections(width, heads)
        self.output = ResidualOutput(width, width, eps)

    def forward(self, hidden: torch.Tensor, mask_scores: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, mask_scores), hidden)


class TransformerLayer(nn.Module):
    """One single-stream layer: ``BertLayer`` (text) or ``BertImageLayer`` (visual; no dynamic attention)."""

    def __init__(self, width: int, heads: int, intermediate: int, activation: str, eps: float) -> None:
        super().__init__()
        self.attention = Attention(width, heads, eps)
        self.intermediate = Intermediate(width, intermediate, activation)
        self.output = ResidualOutput(intermediate, width, eps)

    def forward(self, hidden: torch.Tensor, mask_scores: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, mask_scores)
        return self.output(self.intermediate(attended), attended)


class BiAttention(nn.Module):
    """``biattention``: visual queries attend to text keys and text queries attend to visual keys (``1`` = visual
    projections, ``2`` = text projections, all into ``bi_hidden_size``)."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        width = config.bi_hidden_size
        self.query1 = nn.Linear(config.v_hidden_size, width)
        self.key1 = nn.Linear(config.v_hidden_size, width)
        self.value1 = nn.Linear(config.v_hidden_size, width)
        self.query2 = nn.Linear(config.hidden_size, width)
        self.key2 = nn.Linear(config.hidden_size, width)
        self.value2 = nn.Linear(config.hidden_size, width)
        self.heads = config.bi_num_attention_heads

    def forward(self, visual: torch.Tensor, visual_mask_scores: torch.Tensor, text: torch.Tensor,
                text_mask_scores: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(text-length context over regions, region-length context over words)."""
        text_over_regions = multi_head_attention(self.query2(text), self.key1(visual), self.value1(visual),
                                                 visual_mask_scores, self.heads)
        regions_over_text = multi_head_attention(self.query1(visual), self.key2(text), self.value2(text),
                                                 text_mask_scores, self.heads)
        return text_over_regions, regions_over_text


class BiOutput(nn.Module):
    """``biOutput``: each stream's co-attention context projected back and added to that stream, then LayerNorm.
    (The original also defines ``q_dense1``/``q_dense2``, which its forward never calls.)"""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        self.dense1 = nn.Linear(config.bi_hidden_size, config.v_hidden_size)
        self.LayerNorm1 = LayerNorm(config.v_hidden_size, config.layer_norm_eps)
        self.dense2 = nn.Linear(config.bi_hidden_size, config.hidden_size)
        self.LayerNorm2 = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, regions_over_text: torch.Tensor, visual: torch.Tensor, text_over_regions: torch.Tensor,
                text: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return (self.LayerNorm1(self.dense1(regions_over_text) + visual),
                self.LayerNorm2(self.dense2(text_over_regions) + text))


class ConnectionLayer(nn.Module):
    """``c_layer.N`` (``BertConnectionLayer``): co-attention, then each stream's own feed-forward block."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        eps = config.layer_norm_eps
        self.biattention = BiAttention(config)
        self.biOutput = BiOutput(config)
        self.v_intermediate = Intermediate(config.v_hidden_size, config.v_intermediate_size, config.v_hidden_act)
        self.v_output = ResidualOutput(config.v_intermediate_size, config.v_hidden_size, eps)
        self.t_intermediate = Intermediate(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.t_output = ResidualOutput(config.intermediate_size, config.hidden_size, eps)

    def forward(self, visual: torch.Tensor, visual_mask_scores: torch.Tensor, text: torch.Tensor,
                text_mask_scores: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        text_over_regions, regions_over_text = self.biattention(visual, visual_mask_scores, text, text_mask_scores)
        visual, text = self.biOutput(regions_over_text, visual, text_over_regions, text)
        return (self.v_output(self.v_intermediate(visual), visual),
                self.t_output(self.t_intermediate(text), text))


class TextEmbeddings(nn.Module):
    """``embeddings``: word + position + token-type embeddings; with task tokens, the task embedding is inserted at
    position 1 after that sum (it has no position or type embedding); then LayerNorm."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.task_embeddings = (nn.Embedding(MAX_TASK_TOKENS, config.hidden_size)
                                if config.task_specific_tokens else None)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                task_ids: Optional[torch.Tensor]) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
        summed = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
                  + self.token_type_embeddings(token_type_ids))
        if self.task_embeddings is not None:
            if task_ids is None:
                raise ValueError("this model has task tokens: task_ids (B, 1) is required")
            summed = torch.cat([summed[:, :1], self.task_embeddings(task_ids), summed[:, 1:]], dim=1)
        return self.LayerNorm(summed)


class ImageEmbeddings(nn.Module):
    """``v_embeddings``: LayerNorm(Linear(region feature) + Linear(5-d location))."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        self.image_embeddings = nn.Linear(config.v_feature_size, config.v_hidden_size)
        self.image_location_embeddings = nn.Linear(5, config.v_hidden_size)
        self.LayerNorm = LayerNorm(config.v_hidden_size, config.layer_norm_eps)

    def forward(self, features: torch.Tensor, locations: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.image_embeddings(features) + self.image_location_embeddings(locations))


class Encoder(nn.Module):
    """``encoder``: the original ``BertEncoder`` schedule up to the last connection block. Before connection block
    ``k`` the text stream runs layers ``t_biattention_id[k-1] .. t_biattention_id[k]-1`` (from 0 for ``k = 0``) and
    the visual stream likewise with ``v_biattention_id``."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        eps = config.layer_norm_eps
        self.layer = nn.ModuleList(
            TransformerLayer(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                             config.hidden_act, eps) for _ in range(config.num_text_layers_used))
        self.v_layer = nn.ModuleList(
            TransformerLayer(config.v_hidden_size, config.v_num_attention_heads, config.v_intermediate_size,
                             config.v_hidden_act, eps) for _ in range(config.num_visual_layers_used))
        self.c_layer = nn.ModuleList(ConnectionLayer(config) for _ in config.v_biattention_id)
        self.t_biattention_id = list(config.t_biattention_id)
        self.v_biattention_id = list(config.v_biattention_id)

    def forward(self, text: torch.Tensor, text_mask_scores: torch.Tensor, visual: torch.Tensor,
                visual_mask_scores: torch.Tensor) -> List[torch.Tensor]:
        """The text states after each connection block (the original's ``output_all_encoded_layers=True`` list)."""
        text_states = []
        t_start = v_start = 0
        for block, t_end, v_end in zip(self.c_layer, self.t_biattention_id, self.v_biattention_id):
            for layer in self.layer[t_start:t_end]:
                text = layer(text, text_mask_scores)
            for layer in self.v_layer[v_start:v_end]:
                visual = layer(visual, visual_mask_scores)
            visual, text = block(visual, visual_mask_scores, text, text_mask_scores)
            text_states.append(text)
            t_start, v_start = t_end, v_end
        return text_states


class VilbertModel(nn.Module):
    """ViLBERT trunk returning the text states after each co-attention block."""

    def __init__(self, config: VilbertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = TextEmbeddings(config)
        self.v_embeddings = ImageEmbeddings(config)
        self.encoder = Encoder(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, region_features: torch.Tensor,
                region_locations: torch.Tensor, region_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None,
                task_ids: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
        """Text states after each connection block, each (B, L + 1, hidden) with a task token, else (B, L, hidden).

        ``input_ids``/``attention_mask``/``token_type_ids``: (B, L); ``region_features``: (B, R, v_feature_size);
        ``region_locations``: (B, R, 5); ``region_mask``: (B, R), all ones when omitted; ``task_ids``: (B, 1).
        With task tokens the text mask gets a leading 1 for the inserted token, as in the original.
        """
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if region_mask is None:
            region_mask = torch.ones(region_features.shape[:2], dtype=attention_mask.dtype,
                                     device=region_features.device)
        if self.config.task_specific_tokens:
            attention_mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], dim=1)
        dtype = self.embeddings.LayerNorm.weight.dtype
        text = self.embeddings(input_ids, token_type_ids, task_ids)
        visual = self.v_embeddings(region_features.to(dtype), region_locations.to(dtype))
        return self.encoder(text, attention_mask_scores(attention_mask, dtype), visual,
                            attention_mask_scores(region_mask, dtype))
