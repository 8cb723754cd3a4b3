"""The conversion of a vilbert-multi-task checkpoint into a capeval ViLBERT folder for ViLBERTScore; its command line
is ``python -m conversion.convert_vilbert``.

Inputs: ``multi_task_model.bin`` (12-in-1, ``VILBertForVLTasks``, with task tokens) or ``pretrained_model.bin``
(``BertForMultiModalPreTraining``, no task tokens); the original ``BertConfig`` JSON; bert-base-uncased
``vocab.txt``. The file is read with ``torch.load(weights_only=True)``. Key handling, as the original loader does:
a ``module.`` prefix is removed and ``gamma``/``beta`` become ``weight``/``bias``. Every key is then either kept
(``bert.`` prefix removed) or dropped for a stated reason (:data:`DROPPED`); anything else is an unexpected key and
stops the conversion, as does a missing weight.

Writes ``model.safetensors``, ``config.json`` (:class:`capeval.models.vilbert.VilbertConfig`) and ``vocab.txt``.
"""
from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path
from dataclasses import fields
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from capeval.configuration import WEIGHTS_NAME
from capeval.fetch import reading
from capeval.hub import save_weights
from capeval.models.vilbert.configuration import VilbertConfig
from capeval.models.vilbert.loading import VOCAB_FILE
from capeval.models.vilbert.modeling import VilbertModel

TASK_EMBEDDINGS_KEY = "bert.embeddings.task_embeddings.weight"

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

DROPPED: Tuple[Tuple[str, str], ...] = (
    (r"^bert\.(t|v)_pooler\.", "pooler: pooled outputs feed the task heads, not the token states"),
    (r"^bert\.encoder\.c_layer\.\d+\.biOutput\.q_dense[12]\.", "defined by the original BertBiOutput, never called"),
    (r"^cls\.", "pre-training heads (masked LM incl. the decoder tied to the word embeddings, region "
                "classification, alignment)"),
    (r"^(vil_prediction|vil_prediction_gqa|vil_binary_prediction|vil_logit|vil_tri_prediction|vision_logit|"
     r"linguisic_logit)\.", "12-in-1 task heads"),
)
"""(pattern, reason) of original keys that are not converted. Text/visual layers after the last co-attention block
are dropped too (see :func:`split_state_dict`)."""


class CheckpointError(ValueError):
    """The checkpoint cannot be read or does not hold a complete ViLBERT trunk."""


def config_from_original(original: Mapping[str, Any], *, task_specific_tokens: bool) -> VilbertConfig:
    """The config of an original ``BertConfig`` JSON dict; ``task_specific_tokens`` is not in those files (the
    scripts set it: True for ``multi_task_model.bin``, False for ``pretrained_model.bin``)."""
    known = {field.name for field in fields(VilbertConfig)}
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
    return VilbertConfig(**values)


def load_original_state_dict(checkpoint: Path) -> Dict[str, torch.Tensor]:
    """The state dict of an original ``.bin`` (``torch.load(weights_only=True)``), keys normalised as the original
    ``from_pretrained`` does (``gamma`` -> ``weight``, ``beta`` -> ``bias``) and without a ``module.`` prefix."""
    if not checkpoint.is_file():
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} is not a file")
    try:
        loaded = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} refused by weights_only=True: {error}") from error
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} holds a {type(loaded).__name__}, not a state dict")
    not_tensors = sorted(str(key) for key, value in loaded.items() if not isinstance(value, torch.Tensor))
    if not_tensors:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r}: entries that are not tensors: {not_tensors}")
    state_dict = {}
    for key, value in loaded.items():
        key = key[len("module."):] if key.startswith("module.") else key
        state_dict[key.replace("gamma", "weight").replace("beta", "bias")] = value
    return state_dict


def _unused_layer_reason(key: str, config: VilbertConfig) -> Optional[str]:
    match = re.match(r"^bert\.encoder\.(layer|v_layer)\.(\d+)\.", key)
    if match is None:
        return None
    limit = config.num_text_layers_used if match.group(1) == "layer" else config.num_visual_layers_used
    if int(match.group(2)) < limit:
        return None
    return f"{match.group(1)}.{match.group(2)} runs after the last co-attention block, whose text output is scored"


def split_state_dict(state_dict: Mapping[str, torch.Tensor], config: VilbertConfig
                     ) -> Tuple[Dict[str, torch.Tensor], Dict[str, str], List[str]]:
    """``(kept, dropped, unexpected)``: kept weights renamed for :class:`VilbertModel`, dropped keys with their
    reason, and keys no rule covers."""
    expected = set(VilbertModel(config).state_dict())
    kept: Dict[str, torch.Tensor] = {}
    dropped: Dict[str, str] = {}
    unexpected: List[str] = []
    for key, value in state_dict.items():
        reason = next((why for pattern, why in DROPPED if re.search(pattern, key)), None)
        reason = reason or _unused_layer_reason(key, config)
        if reason is not None:
            dropped[key] = reason
        elif key.startswith("bert.") and key[len("bert."):] in expected:
            kept[key[len("bert."):]] = value.contiguous()
        else:
            unexpected.append(key)
    return kept, dropped, sorted(unexpected)


def convert(checkpoint: Path, original_config: Path, vocab: Path, out: Path) -> VilbertConfig:
    """Write the converted folder and return its config; task tokens are present iff the checkpoint has
    ``bert.embeddings.task_embeddings.weight``."""
    with reading(checkpoint):
        state_dict = load_original_state_dict(checkpoint)
    with reading(original_config), open(original_config, encoding="utf-8") as handle:
        config = config_from_original(json.load(handle), task_specific_tokens=TASK_EMBEDDINGS_KEY in state_dict)
    kept, dropped, unexpected = split_state_dict(state_dict, config)
    if unexpected:
        raise CheckpointError(f"unexpected keys (no rule keeps or drops them): {unexpected}")
    expected = VilbertModel(config).state_dict()
    missing = sorted(set(expected) - set(kept))
    if missing:
        raise CheckpointError(f"missing weights: {['bert.' + key for key in missing]}")
    wrong = sorted(key for key in kept if kept[key].shape != expected[key].shape)
    if wrong:
        raise CheckpointError("shapes differ from the config: " + ", ".join(
            f"bert.{key} {tuple(kept[key].shape)} vs {tuple(expected[key].shape)}" for key in wrong))
    out.mkdir(parents=True, exist_ok=True)
    save_weights(kept, out, WEIGHTS_NAME, metadata={"format": "pt", "source": checkpoint.name})
    config.save(out)
    shutil.copyfile(vocab, out / VOCAB_FILE)
    for reason in sorted(set(dropped.values())):
        keys = [key for key, why in dropped.items() if why == reason]
        print(f"dropped {len(keys)} keys ({reason}): e.g. {keys[0]}")
    print(f"kept {len(kept)} tensors; task tokens: {config.task_specific_tokens}; wrote {out}")
    return config
