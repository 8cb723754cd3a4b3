"""The conversion of the Polos authors' checkpoint into a capeval Polos folder; its command line is
``python -m conversion.convert_polos``.

Input: ``reprod.zip`` as the ``polos`` package downloads it (or its extracted folder, or the ``.ckpt`` itself):
``hparams.yaml`` beside the PyTorch Lightning checkpoint (or in the folder above a ``checkpoints/`` folder, Lightning's
own layout), whose ``state_dict`` holds every submodule of the wheel's ``PolosEstimator``:

* ``encoder.model.*``: the sentence encoder (a transformers RoBERTa, ``princeton-nlp/sup-simcse-roberta-base`` as
  trained); its ``config.json``, ``vocab.json`` and ``merges.txt`` come from the model ``pretrained_model`` names, as
  the wheel's ``AutoModel`` / ``AutoTokenizer.from_pretrained`` take them;
* ``scalar_mix.*``: the layer mix (``dropout_mask`` and ``dropout_fill`` are training-only buffers, dropped);
* ``ff.0.ff.linear_<n>.*``: the regressor;
* ``clip.*``: the CLIP model the wheel's ``clip.load`` built (OpenAI key names), converted by the CLIP converter.

The checkpoint is read with a restricted unpickler: it builds tensors, their storages and ``OrderedDict``; the
Lightning metadata a Lightning 1.x checkpoint names (callback classes used as dictionary keys, ``AttributeDict``,
``argparse.Namespace``) becomes inert placeholders that are never imported; any other global is refused before
anything is built. ``torch.load(weights_only=True)`` cannot read such checkpoints (it refuses the Lightning
classes). ``hparams.yaml`` is read with ``yaml.safe_load``.

Output folder: ``config.json`` (:class:`~capeval.models.polos.configuration.PolosConfig`), ``model.safetensors``
(``scalar_mix.*`` and ``ff.0.ff.*``, names and values unchanged), ``encoder/`` (``model.safetensors`` named as
``encoder.model.*`` without that prefix, ``config.json``, tokenizer files) and ``clip/``.
"""
from __future__ import annotations

import json
import pickle
import shutil
import tempfile
import types
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

import torch
import yaml

from capeval.configuration import CONFIG_NAME, WEIGHTS_NAME
from capeval.fetch import reading
from capeval.hub import save_weights
from capeval.models.polos.configuration import CLIP_FOLDER, ENCODER_FOLDER, POOLINGS, PolosConfig
from conversion.clip_converter import convert_original_state_dict

ENCODER_PREFIX, CLIP_PREFIX = "encoder.model.", "clip."
HEAD_PREFIXES = ("scalar_mix.", "ff.")
DROPPED = frozenset({"scalar_mix.dropout_mask", "scalar_mix.dropout_fill"})
"""Training-only buffers of the wheel's ``ScalarMixWithDropout``."""
ENCODER_BUFFERS = frozenset({"embeddings.position_ids", "embeddings.token_type_ids"})
"""Index buffers older transformers versions saved with the encoder (rebuilt by the model, not weights)."""
SENTENCE_ENCODER_ARCHITECTURE: Dict[str, Any] = {
    "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
    "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
"""``RobertaConfig`` values of the sentence encoder of the authors' checkpoint,
``princeton-nlp/sup-simcse-roberta-base`` (roberta-base's architecture): what ``hub_models/generate_configs.py``
writes as the hub folder's ``encoder/config.json`` and ``speed/`` builds its full-size stand-in from. A conversion
copies the ``config.json`` it is given instead."""
ENCODER_TOKENIZER_CONFIG = {"tokenizer_class": "RobertaTokenizer"}
"""The converted encoder's ``tokenizer_config.json``: the class that reads its ``vocab.json`` and ``merges.txt``."""
_ALLOWED_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("collections", "OrderedDict"): OrderedDict,
}
_INERT_MODULES = ("pytorch_lightning", "lightning")
"""Globals of these packages (and ``argparse.Namespace``) become inert placeholders: Lightning 1.x checkpoints name
its callback classes as dictionary keys and store hyper-parameters as ``AttributeDict``."""


class CheckpointError(ValueError):
    """The original cannot be read safely or does not hold a Polos model capeval implements."""


class _Inert(dict):
    """Stands in for a Lightning class or object: built without running anything, its state kept as data."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __setstate__(self, state: Any) -> None:
        self["__state__"] = state


class RestrictedUnpickler(pickle.Unpickler):
    """Builds tensors, storages and ``OrderedDict``; Lightning metadata as :class:`_Inert`; refuses the rest."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return _ALLOWED_GLOBALS[(module, name)]
        if module.split(".")[0] in _INERT_MODULES or (module, name) == ("argparse", "Namespace"):
            return type(name, (_Inert,), {"__module__": f"inert:{module}"})
        raise pickle.UnpicklingError(f"refused to load the global {module}.{name}: a Polos checkpoint holds only "
                                     "tensors, plain containers and Lightning metadata")


restricted_pickle = types.ModuleType("capeval_polos_restricted_pickle")
restricted_pickle.Unpickler = RestrictedUnpickler  # type: ignore[attr-defined]
restricted_pickle.load = lambda file, **kwargs: RestrictedUnpickler(file, **kwargs).load()  # type: ignore[attr-defined]
restricted_pickle.__doc__ = "The pickle module torch.load uses for Lightning checkpoints: the restricted unpickler."


def read_state_dict(checkpoint: Path) -> Dict[str, torch.Tensor]:
    """The ``state_dict`` of a Lightning checkpoint, read with :class:`RestrictedUnpickler`."""
    try:
        loaded = torch.load(checkpoint, map_location="cpu", pickle_module=restricted_pickle, weights_only=False)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError) as error:
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} refused: {error}") from error
    state = loaded.get("state_dict") if isinstance(loaded, Mapping) else None
    if not isinstance(state, Mapping) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} is not a Lightning checkpoint: no state_dict of tensors")
    return {str(key): value for key, value in state.items()}


def _hparams_beside(checkpoint: Path) -> Path:
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (folder / "hparams.yaml").is_file():
            return folder / "hparams.yaml"
    raise CheckpointError(f"no hparams.yaml beside {str(checkpoint)!r} (the polos package reads it from there)")


def _single_checkpoint(paths: list, where: str) -> Any:
    if len(paths) != 1:
        raise CheckpointError(f"{where} holds {len(paths)} .ckpt files ({sorted(map(str, paths))}); expected one")
    return paths[0]


def locate_original(original: Path, scratch: Path) -> Tuple[Path, Path]:
    """The checkpoint and ``hparams.yaml`` of a ``reprod.zip`` (extracted into ``scratch``), a folder or a
    ``.ckpt``."""
    if original.is_file() and original.suffix == ".ckpt":  # a torch.save file is itself a zip archive
        checkpoint = original
    elif zipfile.is_zipfile(original):
        with zipfile.ZipFile(original) as archive:
            names = [name for name in archive.namelist() if name.endswith(".ckpt")]
            member = _single_checkpoint(names, str(original))
            wanted = [member] + [name for name in archive.namelist() if name.endswith("hparams.yaml")]
            for name in wanted:
                if Path(name).is_absolute() or ".." in Path(name).parts:
                    raise CheckpointError(f"{str(original)!r}: refusing the member path {name!r}")
                archive.extract(name, scratch)
        checkpoint = scratch / member
    elif original.is_dir():
        checkpoint = _single_checkpoint(sorted(original.rglob("*.ckpt")), str(original))
    else:
        raise CheckpointError(f"{str(original)!r} is neither a zip archive, a folder nor a checkpoint file")
    return checkpoint, _hparams_beside(checkpoint)


def polos_config(hparams: Mapping[str, Any]) -> PolosConfig:
    """The :class:`PolosConfig` of the wheel's hparams; settings the wheel cannot run, or capeval does not
    implement, are refused."""
    if hparams.get("model") != "PolosEstimator":
        raise CheckpointError(f"hparams name the model {hparams.get('model')!r}; capeval implements PolosEstimator")
    if hparams.get("encoder_model") != "BERT":
        raise CheckpointError(f"encoder_model {hparams.get('encoder_model')!r}: capeval implements the transformers "
                              "encoder (BERT); the fairseq XLM-R encoder is not supported")
    missing = [key for key in ("pretrained_model", "layer", "pool", "hidden_sizes", "activations") if key not in hparams]
    if missing:
        raise CheckpointError(f"hparams lack {missing}, which the wheel reads")
    if hparams["pool"] not in POOLINGS:
        raise CheckpointError(f"pool {hparams['pool']!r}: the wheel's PolosEstimator runs only with {POOLINGS}")
    layer = hparams["layer"] if hparams["layer"] == "mix" else int(hparams["layer"])
    sizes = hparams["hidden_sizes"]
    hidden_sizes = tuple(int(size) for size in str(sizes).split(","))
    final = hparams.get("final_activation", "Sigmoid")  # the wheel's default for checkpoints without it
    try:
        return PolosConfig(pretrained_model=str(hparams["pretrained_model"]), layer=layer, pool=str(hparams["pool"]),
                           hidden_sizes=hidden_sizes, activations=str(hparams["activations"]),
                           final_activation=str(final) if final else None)
    except ValueError as error:
        raise CheckpointError(str(error)) from error


def split_state_dict(state: Mapping[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], ...]:
    """(encoder weights without ``encoder.model.``, CLIP weights without ``clip.``, head weights as named); every
    other key but the training-only buffers is refused."""
    encoder = {key[len(ENCODER_PREFIX):]: value for key, value in state.items() if key.startswith(ENCODER_PREFIX)}
    encoder = {key: value for key, value in encoder.items() if key not in ENCODER_BUFFERS}
    clip = {key[len(CLIP_PREFIX):]: value for key, value in state.items() if key.startswith(CLIP_PREFIX)}
    head = {key: value for key, value in state.items() if key.startswith(HEAD_PREFIXES) and key not in DROPPED}
    unknown = sorted(key for key in state if not key.startswith((ENCODER_PREFIX, CLIP_PREFIX, *HEAD_PREFIXES)))
    if unknown or not encoder or not clip:
        raise CheckpointError(f"not a PolosEstimator state dict: unexpected keys {unknown[:10]}, "
                              f"{len(encoder)} encoder and {len(clip)} CLIP weights")
    return encoder, clip, head


def write_encoder(weights: Mapping[str, torch.Tensor], encoder_config: Path, vocab: Path, merges: Path,
                  folder: Path) -> None:
    """The sentence encoder's transformers folder; its weights must be exactly the model's (names and shapes)."""
    from transformers import AutoConfig, AutoModel

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(encoder_config, folder / CONFIG_NAME)
    with reading(encoder_config):
        config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        shapes = {name: tensor.shape for name, tensor in AutoModel.from_config(config).state_dict().items()
                  if name not in ENCODER_BUFFERS}
    wrong = sorted(name for name in set(shapes) & set(weights) if weights[name].shape != shapes[name])
    if set(shapes) != set(weights) or wrong:
        raise CheckpointError(f"encoder weights do not match {str(encoder_config)!r}: missing "
                              f"{sorted(set(shapes) - set(weights))[:10]}, unexpected "
                              f"{sorted(set(weights) - set(shapes))[:10]}, wrong shapes {wrong[:10]}")
    save_weights({name: tensor.float().contiguous() for name, tensor in weights.items()}, folder, WEIGHTS_NAME,
                 metadata={"format": "pt"})
    shutil.copyfile(vocab, folder / "vocab.json")
    shutil.copyfile(merges, folder / "merges.txt")
    write_tokenizer_config(folder)


def write_tokenizer_config(folder: Path) -> None:
    """The encoder folder's ``tokenizer_config.json`` (:data:`ENCODER_TOKENIZER_CONFIG`)."""
    (folder / "tokenizer_config.json").write_text(json.dumps(ENCODER_TOKENIZER_CONFIG) + "\n", encoding="utf-8")


def convert(checkpoint: Path, encoder_config: Path, vocab: Path, merges: Path, out: Path,
            bpe_path: Path | None = None) -> Path:
    """Convert the original (``reprod.zip``, its folder or its ``.ckpt``) into a capeval Polos folder ``out``."""
    checkpoint, encoder_config, vocab, merges, out = map(Path, (checkpoint, encoder_config, vocab, merges, out))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as scratch, reading(checkpoint):
        ckpt, hparams_path = locate_original(checkpoint, Path(scratch))
        try:
            hparams = yaml.safe_load(hparams_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise CheckpointError(f"{hparams_path.name}: not plain YAML ({error})") from error
        if not isinstance(hparams, Mapping):
            raise CheckpointError(f"{hparams_path.name} holds no mapping of hyper-parameters")
        config = polos_config(hparams)
        encoder, clip, head = split_state_dict(read_state_dict(ckpt))
    write_encoder(encoder, encoder_config, vocab, merges, out / ENCODER_FOLDER)
    convert_original_state_dict(clip, out / CLIP_FOLDER, arch="openai", bpe_path=bpe_path)
    save_weights({name: tensor.float().contiguous() for name, tensor in head.items()}, out, WEIGHTS_NAME,
                 metadata={"format": "pt"})
    config.save(out)
    return out
