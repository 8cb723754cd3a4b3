"""Polos's sentence embeddings: the checkpoint's RoBERTa-family encoder (transformers) and its layer mix.

As the wheel's ``Estimator.get_sentence_embedding`` computes them for one sentence: every hidden state (embeddings
and each layer), each normalised by its mean and variance over the sentence's tokens and hidden units
(``ScalarMixWithDropout(do_layer_norm=True)``), mixed with the softmax of the scalar weights, times ``gamma``; then
the first token (``pool: cls``) or the mean over the tokens (``pool: avg``, tokens equal to the pad id zeroed as
the wheel's ``mask_fill`` does). The wheel takes these statistics over the whole batch it is given, so its scores
depend on which items share a batch; capeval takes them per sentence, which is the wheel's ``predict`` with
``batch_size=1`` (and independent of batching).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence

import torch
from torch import nn

from capeval.models.polos.configuration import PolosConfig

if TYPE_CHECKING:  # transformers is imported by the encoder's loading, not by this module
    from transformers import PreTrainedModel

LAYER_NORM_EPSILON = 1e-12
"""The wheel's ``_do_layer_norm``: ``(x - mean) / sqrt(variance + 1e-12)``."""


class ScalarMix(nn.Module):
    """The mix's parameters, named as the checkpoint's ``scalar_mix.*``: one scalar weight per hidden state and
    ``gamma``."""

    def __init__(self, mixture_size: int) -> None:
        super().__init__()
        self.scalar_parameters = nn.ParameterList([nn.Parameter(torch.zeros(1)) for _ in range(mixture_size)])
        self.gamma = nn.Parameter(torch.ones(1))

    def forward(self, states: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """The mix ``(N, L, H)`` of ``states`` (each ``(N, L, H)``), each normalised over its own row's unmasked
        tokens."""
        weights = torch.softmax(torch.cat(list(self.scalar_parameters)), dim=0)
        broadcast = mask.float().unsqueeze(-1)
        count = mask.float().sum(dim=1).view(-1, 1, 1) * states[0].shape[-1]
        pieces: List[torch.Tensor] = []
        for weight, tensor in zip(weights.split(1), states):
            masked = tensor * broadcast
            mean = masked.sum(dim=(1, 2), keepdim=True) / count
            variance = (((masked - mean) * broadcast) ** 2).sum(dim=(1, 2), keepdim=True) / count
            pieces.append(weight * ((tensor - mean) / torch.sqrt(variance + LAYER_NORM_EPSILON)))
        return self.gamma * sum(pieces)


class PolosSentenceEncoder(nn.Module):
    """Sentence embeddings ``(N, hidden)`` of token id batches (right-padded with the pad id)."""

    def __init__(self, config: PolosConfig, encoder: PreTrainedModel) -> None:
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.pad_token_id = int(encoder.config.pad_token_id)
        mixture = encoder.config.num_hidden_layers + 1
        self.scalar_mix = ScalarMix(mixture) if config.layer == "mix" else None
        if config.layer != "mix" and not 0 <= int(config.layer) < mixture:
            raise ValueError(f"layer {config.layer} is not a hidden state of a {mixture - 1}-layer encoder")

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = torch.arange(token_ids.shape[1], device=token_ids.device)[None, :] < lengths[:, None]
        states = self.encoder(token_ids, mask, output_hidden_states=True, return_dict=True).hidden_states
        embeddings = self.scalar_mix(states, mask) if self.scalar_mix is not None else states[int(self.config.layer)]
        if self.config.pool == "cls":
            return embeddings[:, 0, :]
        kept = embeddings.float().masked_fill(token_ids.eq(self.pad_token_id).unsqueeze(-1), 0.0).type_as(embeddings)
        return kept.sum(dim=1) / mask.unsqueeze(-1).expand(embeddings.shape).float().sum(dim=1)
