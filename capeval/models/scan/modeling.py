"""SCAN encoders (kuanghuei/SCAN ``model.py``: ``EncoderImagePrecomp`` and ``EncoderText``), same arithmetic.

Weight names are the original ones under two prefixes: the checkpoint's ``model[0]`` (image encoder state dict)
becomes ``img_enc.*`` and ``model[1]`` (text encoder) becomes ``txt_enc.*``::

    img_enc.fc.{weight,bias}                                   Linear(img_dim -> embed_size)
    txt_enc.embed.weight                                       Embedding(vocab_size, word_dim)
    txt_enc.rnn.{weight_ih,weight_hh,bias_ih,bias_hh}_l{k}[_reverse]   GRU(word_dim -> embed_size), bidirectional
"""
from __future__ import annotations

from typing import List, Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from capeval.models.scan.configuration import ScanConfig

L2_EPS = 1e-8


def l2norm(x: torch.Tensor, dim: int, eps: float = L2_EPS) -> torch.Tensor:
    """``x / (sqrt(sum(x**2, dim)) + eps)``: SCAN's ``l2norm`` (the epsilon is added to the norm)."""
    return x / (x.pow(2).sum(dim=dim, keepdim=True).sqrt() + eps)


class ScanImageEncoder(nn.Module):
    """``EncoderImagePrecomp``: a linear projection of raw region features, L2-normalised per region."""

    def __init__(self, config: ScanConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.img_dim, config.embed_size)

    def forward(self, regions: torch.Tensor) -> torch.Tensor:
        """``(batch, regions, img_dim)`` features -> ``(batch, regions, embed_size)`` unit vectors."""
        return l2norm(self.fc(regions), dim=-1)


class ScanTextEncoder(nn.Module):
    """``EncoderText`` with ``use_bi_gru=True``: word embeddings, a bidirectional GRU whose two directions are
    averaged, and per-word L2 normalisation."""

    def __init__(self, config: ScanConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.word_dim)
        self.rnn = nn.GRU(config.word_dim, config.embed_size, config.num_layers, batch_first=True, bidirectional=True)

    def forward(self, token_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Zero-padded ``(batch, max_len)`` ids and their lengths -> ``(batch, max(lengths), embed_size)``; rows past
        a caption's length are zero. Packing makes each caption's states independent of the padding, as in SCAN
        (which sorts the batch by length; ``enforce_sorted=False`` sorts internally and restores the order)."""
        packed = pack_padded_sequence(self.embed(token_ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True)
        half = states.size(2) // 2
        return l2norm((states[:, :, :half] + states[:, :, half:]) / 2, dim=-1)


class ScanModel(nn.Module):
    """The two SCAN encoders TIGEr needs (the contrastive loss and the optimiser of the original are not kept)."""

    def __init__(self, config: ScanConfig) -> None:
        super().__init__()
        self.config = config
        self.img_enc = ScanImageEncoder(config)
        self.txt_enc = ScanTextEncoder(config)

    @torch.inference_mode()
    def encode_regions(self, regions: torch.Tensor) -> torch.Tensor:
        """``(batch, regions, img_dim)`` -> unit region embeddings ``(batch, regions, embed_size)``."""
        return self.img_enc(regions.to(self.img_enc.fc.weight))

    @torch.inference_mode()
    def encode_token_ids(self, token_ids: Sequence[Sequence[int]]) -> List[torch.Tensor]:
        """Per caption, its ``(len(ids), embed_size)`` unit word embeddings (``<start>`` and ``<end>`` included)."""
        device = self.txt_enc.embed.weight.device
        lengths = torch.tensor([len(ids) for ids in token_ids], dtype=torch.long)
        batch = torch.zeros((len(token_ids), int(lengths.max())), dtype=torch.long)
        for row, ids in enumerate(token_ids):
            batch[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        words = self.txt_enc(batch.to(device), lengths)
        return [words[row, : int(length)] for row, length in enumerate(lengths)]
