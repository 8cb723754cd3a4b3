"""The conversion of the original SCAN checkpoint that TIGEr uses into a capeval SCAN folder; its command line is
``python -m conversion.convert_scan``.

Input: ``model_best.pth`` as SCAN's ``train.py`` saved it under Python 2.7 / PyTorch 0.4 (legacy, non-zip
``torch.save`` format, pickle protocol 2)::

    {'epoch': int, 'model': [img_enc.state_dict(), txt_enc.state_dict()], 'best_rsum': float,
     'opt': argparse.Namespace(<training options>), 'Eiters': int}

and the vocabulary JSON of SCAN's ``vocab.py`` (``{'word2idx': ..., 'idx2word': ..., 'idx': n}``, e.g.
``coco_precomp_vocab.json``). The checkpoint is read with a restricted unpickler that builds only tensors, their
storages, ``OrderedDict`` and ``argparse.Namespace`` (Python 2 byte strings decoded as latin-1); any other pickled
object is refused before anything is constructed.

Output folder: ``model.safetensors`` (``img_enc.*`` from ``model[0]``, ``txt_enc.*`` from ``model[1]``, names and
values unchanged), ``config.json`` (dimensions and options from ``opt``; options capeval does not implement are
refused) and ``vocab.json`` (``{word: id}``).
"""
from __future__ import annotations

import argparse
import json
import pickle
import types
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import torch

from capeval.configuration import WEIGHTS_NAME
from capeval.fetch import reading
from capeval.hub import save_weights
from capeval.models.scan.configuration import SUPPORTED_OPTIONS, ScanConfig
from capeval.models.scan.modeling import ScanModel
from capeval.models.scan.tokenization import END, START, UNKNOWN, write_vocab

_STORAGE_TYPES = ("FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage", "IntStorage",
                  "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage")
_ALLOWED_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("collections", "OrderedDict"): OrderedDict,
    ("argparse", "Namespace"): argparse.Namespace,
    **{("torch", name): getattr(torch, name) for name in _STORAGE_TYPES},
}
_OPTION_FIELDS = ("word_dim", "embed_size", "img_dim", "num_layers", "lambda_softmax", "lambda_lse",
                  *SUPPORTED_OPTIONS)


class CheckpointError(ValueError):
    """The checkpoint cannot be read safely or does not hold a SCAN model capeval implements."""


class RestrictedUnpickler(pickle.Unpickler):
    """Builds tensors, storages, ``OrderedDict`` and ``argparse.Namespace`` only; any other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return _ALLOWED_GLOBALS[(module, name)]
        raise pickle.UnpicklingError(f"refused to load the global {module}.{name}: a SCAN checkpoint holds only "
                                     "tensors, OrderedDict and argparse.Namespace")


def _restricted_load(file: Any, **kwargs: Any) -> Any:
    return RestrictedUnpickler(file, **kwargs).load()


restricted_pickle = types.ModuleType("capeval_restricted_pickle")
restricted_pickle.Unpickler = RestrictedUnpickler  # type: ignore[attr-defined]
restricted_pickle.load = _restricted_load  # type: ignore[attr-defined]
restricted_pickle.__doc__ = "The pickle module torch.load uses for SCAN checkpoints: the restricted unpickler."


def read_checkpoint(path: Path) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor], argparse.Namespace]:
    """The image-encoder and text-encoder state dicts and the training options of an original SCAN checkpoint."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} is not a file")
    try:
        loaded = torch.load(path, map_location="cpu", pickle_module=restricted_pickle, weights_only=False,
                            encoding="latin1")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError) as error:
        raise CheckpointError(f"checkpoint {str(path)!r} refused or unreadable: {error}") from None
    if not isinstance(loaded, Mapping) or "model" not in loaded or "opt" not in loaded:
        raise CheckpointError(f"checkpoint {str(path)!r} is not a SCAN training checkpoint (a dict with 'model' and "
                              f"'opt'), got {type(loaded).__name__}"
                              + (f" with keys {sorted(map(str, loaded))}" if isinstance(loaded, Mapping) else ""))
    encoders, opt = loaded["model"], loaded["opt"]
    if not isinstance(encoders, (list, tuple)) or len(encoders) != 2 or not all(isinstance(sd, Mapping) for sd in encoders):
        raise CheckpointError(f"checkpoint {str(path)!r}: 'model' must be [img_enc_state_dict, txt_enc_state_dict]")
    if not isinstance(opt, argparse.Namespace):
        raise CheckpointError(f"checkpoint {str(path)!r}: 'opt' is a {type(opt).__name__}, not argparse.Namespace")
    states = []
    for part, state in zip(("model[0]", "model[1]"), encoders):
        not_tensors = sorted(str(k) for k, v in state.items() if not isinstance(v, torch.Tensor))
        if not_tensors:
            raise CheckpointError(f"checkpoint {str(path)!r}: {part} entries that are not tensors: {not_tensors}")
        states.append({str(k): v for k, v in state.items()})
    return states[0], states[1], opt


def config_from_options(opt: argparse.Namespace, vocab_size: int) -> ScanConfig:
    """The :class:`ScanConfig` of SCAN training options; options capeval does not implement are refused."""
    options = vars(opt)
    missing = [name for name in _OPTION_FIELDS if name not in options]
    if missing:
        raise CheckpointError(f"checkpoint 'opt' lacks the training options {missing}")
    unsupported = {name: options[name] for name, value in SUPPORTED_OPTIONS.items() if options[name] != value}
    if unsupported:
        raise CheckpointError(f"checkpoint trained with options capeval does not implement: {unsupported} "
                              f"(supported: {SUPPORTED_OPTIONS})")
    return ScanConfig(vocab_size=vocab_size, **{name: options[name] for name in _OPTION_FIELDS})


def read_original_vocab(path: Path) -> Dict[str, int]:
    """``word2idx`` of a SCAN vocabulary JSON, checked against ``idx2word`` and ``idx``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not {"word2idx", "idx2word", "idx"} <= set(data):
        raise CheckpointError(f"{path}: a SCAN vocabulary has 'word2idx', 'idx2word' and 'idx'")
    word_to_id = data["word2idx"]
    id_to_word = {int(i): w for i, w in data["idx2word"].items()}
    if sorted(word_to_id.values()) != list(range(len(word_to_id))) or data["idx"] != len(word_to_id):
        raise CheckpointError(f"{path}: word2idx ids are not exactly 0 .. idx - 1")
    if any(id_to_word.get(i) != w for w, i in word_to_id.items()) or len(id_to_word) != len(word_to_id):
        raise CheckpointError(f"{path}: word2idx and idx2word disagree")
    missing = [token for token in (START, END, UNKNOWN) if token not in word_to_id]
    if missing:
        raise CheckpointError(f"{path}: the vocabulary lacks {missing}")
    return word_to_id


def convert(checkpoint: Path, vocab: Path, out: Path) -> List[str]:
    """Write the capeval SCAN folder; returns the names of the weights written."""
    with reading(checkpoint):
        img_state, txt_state, opt = read_checkpoint(checkpoint)
        if "embed.weight" not in txt_state:
            raise CheckpointError(f"checkpoint {str(checkpoint)!r}: model[1] has no embed.weight")
    with reading(vocab):
        word_to_id = read_original_vocab(vocab)
    vocab_size = int(txt_state["embed.weight"].shape[0])
    if vocab_size != len(word_to_id):
        raise CheckpointError(f"the embedding has {vocab_size} rows but {vocab} has {len(word_to_id)} words")
    config = config_from_options(opt, vocab_size)
    state = {f"img_enc.{k}": v for k, v in img_state.items()}
    state.update({f"txt_enc.{k}": v for k, v in txt_state.items()})
    expected = ScanModel(config).state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} does not match the SCAN architecture of its options: "
                              f"missing {missing}, unexpected {unexpected}")
    wrong_shapes = {k: (tuple(state[k].shape), tuple(v.shape)) for k, v in expected.items() if state[k].shape != v.shape}
    if wrong_shapes:
        raise CheckpointError(f"weights with shapes (found, expected) that do not match the options: {wrong_shapes}")
    out.mkdir(parents=True, exist_ok=True)
    save_weights({k: v.to(torch.float32).contiguous() for k, v in state.items()}, out, WEIGHTS_NAME,
                 metadata={"format": "pt"})
    config.save(out)
    write_vocab(word_to_id, out)
    return sorted(state)
