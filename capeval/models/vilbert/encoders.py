"""ViLBERT's text states as rows of the embedding engine: one row per (image regions, text), cached in memory and,
with ``cache_dir``, on disk.

A row holds the token states that ViLBERTScore's matching reads (:func:`capeval.functional.vilbertscore.states_needed`
leading positions of the chosen co-attention block's text output, float32), flattened, so rows differ in length with
the text; :func:`capeval.functional.vilbertscore.padded_states` restores the model's length. Rows are keyed by the
content of the regions (features, boxes, image size) and the text; the on-disk namespace covers the model files, the
dtype, the task token, the layer, the text length and :data:`STATES_VERSION`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import torch

from capeval.engine import Batch, RowProducer, fixed_size_batches
from capeval.functional.vilbertscore import states_needed
from capeval.models.regions.features import KeyedRegions
from capeval.models.vilbert.loading import LoadedVilbert
from capeval.models.vilbert.preprocessing import region_inputs
from capeval.models.vilbert.tokenization import MAX_LENGTH

STATES_VERSION = "1"
"""Bumped whenever tokenisation, the region inputs, the forward arithmetic or the stored positions change, so that
text states cached before are not reused."""


@dataclass(frozen=True)
class TextOnRegions:
    """A text to encode over an image's regions, with its model inputs (one row of the tokenizer's output)."""

    regions: KeyedRegions
    text_key: str
    input_ids: np.ndarray
    attention_mask: np.ndarray


class TextStates(RowProducer[TextOnRegions]):
    """Text states of (regions, text) pairs at co-attention block ``layer``, with task token ``task_id`` (``None``
    for a model without task tokens); ``batch_size`` pairs per forward pass, texts of any images together."""

    kind = "vilbert_text"

    def __init__(self, vilbert: LoadedVilbert, batch_size: int, task_id: Optional[int], layer: int) -> None:
        self.vilbert, self.batch_size, self.task_id, self.layer = vilbert, batch_size, task_id, layer
        self.device = next(vilbert.model.parameters()).device

    def key(self, item: TextOnRegions) -> str:
        return f"{item.regions.key}:{item.text_key}"

    def cache_key(self) -> str:
        dtype = next(self.vilbert.model.parameters()).dtype
        return (f"{self.vilbert.fingerprint}|{dtype}|task={self.task_id}|layer={self.layer}|max_len={MAX_LENGTH}"
                f"|states-{STATES_VERSION}")

    def plan(self, items: Mapping[str, TextOnRegions]) -> List[Batch]:
        """Batches in request order (a scorer asks for an image's texts together, so its regions are prepared once
        per batch they fall in)."""
        return fixed_size_batches(items, self.batch_size)

    def encode(self, batches: List[List[TextOnRegions]]) -> Iterator[List[np.ndarray]]:
        for batch in batches:
            yield self._states(batch)

    @torch.inference_mode()
    def _states(self, batch: List[TextOnRegions]) -> List[np.ndarray]:
        prepared: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {}
        for item in batch:
            if item.regions.key not in prepared:
                prepared[item.regions.key] = region_inputs(item.regions.regions)
        features = torch.stack([prepared[item.regions.key][0] for item in batch]).to(self.device)
        locations = torch.stack([prepared[item.regions.key][1] for item in batch]).to(self.device)
        attention_mask = np.stack([item.attention_mask for item in batch])
        task_ids = (torch.full((len(batch), 1), self.task_id, device=self.device)
                    if self.task_id is not None else None)
        states = self.vilbert.model(torch.from_numpy(np.stack([item.input_ids for item in batch])).to(self.device),
                                    torch.from_numpy(attention_mask).to(self.device),
                                    features, locations, task_ids=task_ids)[self.layer]
        states = states.float().cpu().numpy()
        needed = states_needed(attention_mask, self.task_id is not None)
        return [states[row, :count].reshape(-1) for row, count in enumerate(needed)]
