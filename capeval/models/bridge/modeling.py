"""BRIDGE's mapping network and pseudo-captions (Sarto et al., 2024, Sec. 3.2-3.3).

Weight names (``model.safetensors`` holds the trained parts only; the CLIP backbone is named in ``config.json``):

* ``grid_projection``: the paper's linear ``f_c`` from the grid width to CLIP's text width;
* ``mask_embedding``: the learnable [MASK] token embedding;
* ``mapper``: the mapping network psi, ``torch.nn.TransformerDecoder`` layers (self-attention over the template,
  cross-attention to ``f_c(grid)``, feed-forward);
* ``regularizer``: the training-only branch ``C = Linear(ReLU(Linear))`` (indices 0 and 2).

A pseudo-caption is a template's CLIP token embeddings with psi's outputs at the masked positions; CLIP's frozen text
tower, run on these embeddings exactly as on token ids (:func:`pooled_text_states_from_embeddings`), and its text
projection give its embedding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Sequence

import torch
from torch import nn

from capeval.configuration import ConfigError
from capeval.models.bridge.configuration import BridgeConfig
from capeval.models.bridge.templates import MaskedTemplate
from capeval.models.clip.modeling import image_grid_states, pooled_text_states_from_embeddings

if TYPE_CHECKING:  # transformers is imported by the CLIP backbone's loading, not by this module
    from transformers import CLIPModel


@dataclass
class TemplateBatch:
    """Padded templates of several images: ``token_ids`` and ``masked`` ``(M, L)`` (id 0 after the end token and at
    masked positions), ``end_rows`` ``(M,)``, and ``image_index`` ``(M,)`` (row of each template's image)."""

    token_ids: torch.Tensor
    masked: torch.Tensor
    end_rows: torch.Tensor
    image_index: torch.Tensor

    @classmethod
    def collate(cls, templates: Sequence[MaskedTemplate], image_index: Sequence[int]) -> "TemplateBatch":
        length = max(len(template.token_ids) for template in templates)
        token_ids = torch.zeros(len(templates), length, dtype=torch.long)
        masked = torch.zeros(len(templates), length, dtype=torch.bool)
        for row, template in enumerate(templates):
            token_ids[row, : len(template.token_ids)] = torch.as_tensor(template.token_ids)
            masked[row, : len(template.masked)] = torch.as_tensor(template.masked)
        end_rows = torch.as_tensor([len(template.token_ids) - 1 for template in templates])
        return cls(token_ids, masked, end_rows, torch.as_tensor(list(image_index), dtype=torch.long))

    def to(self, device: torch.device) -> "TemplateBatch":
        return TemplateBatch(*(tensor.to(device) for tensor in (self.token_ids, self.masked, self.end_rows,
                                                                self.image_index)))


def check_architecture(config: BridgeConfig, text_width: int) -> None:
    """:class:`~capeval.configuration.ConfigError` naming the field when ``config`` cannot build a mapping network on
    a CLIP text tower of width ``text_width`` (where torch would fail with a bare assertion or build a broken one)."""
    problems = []
    for name in ("num_layers", "num_heads", "feedforward_dim"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} must be a positive integer, got {value!r}")
    if not problems and text_width % config.num_heads:
        problems.append(f"num_heads {config.num_heads} does not divide the backbone's text width {text_width}")
    if not (isinstance(config.dropout, (int, float)) and 0 <= config.dropout < 1):
        problems.append(f"dropout must be in [0, 1), got {config.dropout!r}")
    if config.activation not in ("relu", "gelu"):
        problems.append(f"activation must be 'relu' or 'gelu', got {config.activation!r}")
    if problems:
        raise ConfigError("BRIDGE config: " + "; ".join(problems))


class BridgeModel(nn.Module):
    """The trained parts of BRIDGE around a frozen CLIP model (held, not registered: ``state_dict`` and optimisers see
    only the trained parts)."""

    def __init__(self, config: BridgeConfig, clip: CLIPModel) -> None:
        super().__init__()
        self.config = config
        object.__setattr__(self, "clip", clip)
        clip.requires_grad_(False)
        text_width = clip.config.text_config.hidden_size
        projection_dim = clip.config.projection_dim
        check_architecture(config, text_width)
        grid_width = projection_dim if config.visual_projection_first else clip.config.vision_config.hidden_size
        self.grid_projection = nn.Linear(grid_width, text_width)
        self.mask_embedding = nn.Parameter(torch.randn(text_width) * 0.02)
        layer = nn.TransformerDecoderLayer(text_width, config.num_heads, config.feedforward_dim, config.dropout,
                                           config.activation, batch_first=True, norm_first=config.norm_first)
        self.mapper = nn.TransformerDecoder(layer, config.num_layers)
        hidden = config.regularizer_hidden_dim or projection_dim
        self.regularizer = nn.Sequential(nn.Linear(projection_dim, hidden), nn.ReLU(), nn.Linear(hidden, projection_dim))

    clip: CLIPModel

    @torch.no_grad()
    def image_grid(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Post-layer-normed states of every vision token ``(N, 1 + patches, vision width)`` (frozen CLIP)."""
        return image_grid_states(self.clip.vision_model, pixel_values)

    def image_embeddings(self, grid: torch.Tensor) -> torch.Tensor:
        """CLIP's projected image embeddings (the class token row of the grid, projected)."""
        return self.clip.visual_projection(grid[:, 0])

    def pseudo_tokens(self, grid: torch.Tensor, templates: TemplateBatch) -> torch.Tensor:
        """psi's outputs ``(M, L, text width)`` for every template position."""
        text_embeddings = self.clip.text_model.embeddings
        token_embeddings = text_embeddings.token_embedding(templates.token_ids)
        inputs = torch.where(templates.masked[..., None], self.mask_embedding.to(token_embeddings.dtype),
                             token_embeddings)
        length = templates.token_ids.shape[1]
        if self.config.position_embeddings:
            inputs = inputs + text_embeddings.position_embedding.weight[:length]
        if self.config.visual_projection_first:
            grid = self.clip.visual_projection(grid)
        memory = self.grid_projection(grid)[templates.image_index]
        padding = torch.arange(length, device=grid.device)[None, :] > templates.end_rows[:, None]
        return self.mapper(inputs, memory, tgt_key_padding_mask=padding)

    def pseudo_caption_embeddings(self, grid: torch.Tensor, templates: TemplateBatch) -> torch.Tensor:
        """Projected CLIP text embeddings ``(M, projection dim)`` of the pseudo-captions: psi's outputs spliced into
        the templates' token embeddings at the masked positions, run through CLIP's text tower."""
        token_embeddings = self.clip.text_model.embeddings.token_embedding(templates.token_ids)
        spliced = torch.where(templates.masked[..., None], self.pseudo_tokens(grid, templates), token_embeddings)
        pooled = pooled_text_states_from_embeddings(self.clip.text_model, spliced, templates.end_rows)
        return self.clip.text_projection(pooled)

    def forward(self, pixel_values: torch.Tensor, templates: TemplateBatch) -> List[torch.Tensor]:
        """Training forward: image embeddings ``v``, pseudo-caption embeddings ``t_hat`` and ``C(t_hat)``."""
        grid = self.image_grid(pixel_values)
        pseudo = self.pseudo_caption_embeddings(grid, templates)
        return [self.image_embeddings(grid), pseudo, self.regularizer(pseudo)]
