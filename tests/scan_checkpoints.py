"""Synthetic SCAN checkpoints in the original on-disk layout, built from the recipe in ``tests/data/tiger/NOTE.md``.

``synthetic_state`` and ``synthetic_regions`` draw every tensor from a seeded ``torch.Generator`` in a fixed order,
so the weights and region features the goldens were made with are rebuilt bit for bit (the goldens record their
SHA-256). ``save_original_checkpoint`` writes ``{'epoch', 'model': [img_sd, txt_sd], 'best_rsum', 'opt', 'Eiters'}``
in the legacy (non-zip) ``torch.save`` format with pickle protocol 2, and turns every ASCII text string of the
object pickle into a Python 2 byte string (``SHORT_BINSTRING``), as Python 2.7 / PyTorch 0.4 wrote them.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import pickletools
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import torch

SPECIALS = ["<pad>", "<start>", "<end>", "<unk>"]
GOLDENS = Path(__file__).resolve().parent / "data" / "tiger" / "goldens.json"

# The published TIGEr SCAN training options (CapEval scan_opt.pkl), dimensions replaced per model.
TRAINING_OPTIONS: Dict[str, object] = {
    "grad_clip": 2.0, "precomp_enc_type": "basic", "word_dim": 300, "lambda_lse": 6.0, "embed_size": 1024,
    "num_epochs": 30, "val_step": 500, "num_layers": 1, "cross_attn": "t2i", "workers": 10, "lr_update": 15,
    "agg_func": "LogSumExp", "log_step": 10, "max_violation": False, "raw_feature_norm": "clipped_l2norm",
    "no_imgnorm": False, "vocab_path": "./vocab/", "learning_rate": 0.0002, "batch_size": 128, "bi_gru": True,
    "logger_name": "./runs/runX/log", "no_txtnorm": False, "lambda_softmax": 9.0,
    "resume": "./runs/coco_scan/log/model_best.pth", "img_dim": 2048, "margin": 0.2,
    "model_name": "./runs/runX/checkpoint",
}


def load_goldens() -> dict:
    return json.loads(GOLDENS.read_text(encoding="utf-8"))


def _uniform(generator: torch.Generator, shape: Tuple[int, ...], bound: float) -> torch.Tensor:
    return ((torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound).to(torch.float32)


def synthetic_state(vocab_size: int, word_dim: int, embed_size: int, img_dim: int,
                    seed: int) -> Tuple["OrderedDict[str, torch.Tensor]", "OrderedDict[str, torch.Tensor]"]:
    """Image- and text-encoder state dicts with SCAN's key names, drawn in a fixed order from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    image = OrderedDict()
    image["fc.weight"] = _uniform(generator, (embed_size, img_dim), math.sqrt(6.0 / (img_dim + embed_size)))
    image["fc.bias"] = _uniform(generator, (embed_size,), 0.05)
    text = OrderedDict()
    text["embed.weight"] = _uniform(generator, (vocab_size, word_dim), 1.0)
    bound = 2.0 / math.sqrt(embed_size)
    for suffix in ("_l0", "_l0_reverse"):
        text["rnn.weight_ih" + suffix] = _uniform(generator, (3 * embed_size, word_dim), bound)
        text["rnn.weight_hh" + suffix] = _uniform(generator, (3 * embed_size, embed_size), bound)
        text["rnn.bias_ih" + suffix] = _uniform(generator, (3 * embed_size,), bound)
        text["rnn.bias_hh" + suffix] = _uniform(generator, (3 * embed_size,), bound)
    return image, text


def synthetic_regions(img_dim: int, seed: int, tied_rows: Sequence[Sequence[int]]) -> np.ndarray:
    """36 non-negative float32 region features in [0, 2) drawn from ``seed``; ``(src, dst)`` rows copied."""
    generator = torch.Generator().manual_seed(seed)
    features = (torch.rand((36, img_dim), generator=generator, dtype=torch.float64) * 2).to(torch.float32)
    for source, target in tied_rows:
        features[target] = features[source]
    return features.numpy()


def vocab_words(base_words: Sequence[str], size: int) -> List[str]:
    """The specials, then ``base_words``, then ``filler<i>`` up to ``size`` words (ids in list order)."""
    words = SPECIALS + list(base_words)
    return words + [f"filler{i}" for i in range(size - len(words))]


def write_original_vocab(words: Sequence[str], path: Path) -> Path:
    """SCAN ``vocab.py``'s ``serialize_vocab`` layout."""
    path.write_text(json.dumps({"word2idx": {w: i for i, w in enumerate(words)},
                                "idx2word": {str(i): w for i, w in enumerate(words)}, "idx": len(words)}))
    return path


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _python2_strings(pickled: bytes) -> bytes:
    """Re-emit a protocol-2 pickle with its ASCII unicode strings as Python 2 byte strings (SHORT_BINSTRING)."""
    out = io.BytesIO()
    ops = list(pickletools.genops(pickled))
    for index, (opcode, argument, position) in enumerate(ops):
        end = ops[index + 1][2] if index + 1 < len(ops) else len(pickled)
        if opcode.name in ("BINUNICODE", "SHORT_BINUNICODE") and argument.isascii() and len(argument) < 256:
            out.write(b"U" + struct.pack("<B", len(argument)) + argument.encode("ascii"))
        else:
            out.write(pickled[position:end])
    return out.getvalue()


def save_original_checkpoint(path: Path, image_state: Mapping[str, torch.Tensor],
                             text_state: Mapping[str, torch.Tensor], options: Mapping[str, object],
                             extra: object = None) -> Path:
    """Write an original-layout SCAN checkpoint (see the module docstring); ``extra`` is stored under 'extra'."""
    checkpoint = {"epoch": 14, "model": [OrderedDict(image_state), OrderedDict(text_state)], "best_rsum": 431.25,
                  "opt": argparse.Namespace(**options), "Eiters": 123456}
    if extra is not None:
        checkpoint["extra"] = extra
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer, pickle_protocol=2, _use_new_zipfile_serialization=False)
    data = buffer.getvalue()
    # Legacy layout: magic number, protocol version, sys_info, the object, storage keys, raw storages.
    stream = io.BytesIO(data)
    bounds = [0]
    for _ in range(5):
        for _ in pickletools.genops(stream):  # stops after the pickle's STOP opcode
            pass
        bounds.append(stream.tell())
    parts = [data[bounds[i]:bounds[i + 1]] for i in range(5)]
    parts[3] = _python2_strings(parts[3])
    path.write_bytes(b"".join(parts) + data[bounds[5]:])
    return path
