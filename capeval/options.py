"""Checks of scorer options, made before any model work: numbers, device and the model reference.

Each check raises :class:`capeval.InputError` (or, for a model reference, returns the problem so that the loader
raises its own error type) with a message naming the option and what is wrong with it.
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Union

from capeval.inputs import InputError

if TYPE_CHECKING:
    import torch

PRECISION_DTYPES: Dict[str, str] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""Precision names accepted by every loader, scorer and the CLI, each with the name of the ``torch`` dtype the model
runs in (names, so that the CLI reads them without importing torch; :func:`capeval.runtime.precision_dtype` resolves
them)."""

CHECKPOINT_SUFFIXES = frozenset({".pth", ".pt", ".bin", ".ckpt", ".tar", ".safetensors"})
"""File name endings of original (unconverted) checkpoints."""


def check_positive_int(value: object, name: str, *, optional: bool = False, minimum: int = 1) -> None:
    """``value`` must be an integer (not a bool, not a string) of at least ``minimum`` (1, or 0); ``None`` too when
    ``optional``."""
    if value is None and optional:
        return
    kind = "a positive" if minimum == 1 else "a non-negative"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be {kind} integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be {kind} integer, got {value}")


def check_scorer_options(**options: object) -> None:
    """Check a scorer's numeric options by name: each may be ``None`` (the default for the device), ``num_workers``
    may be 0 (decode in the scoring process), the others must be positive."""
    for name, value in options.items():
        check_positive_int(value, name, optional=True, minimum=0 if name == "num_workers" else 1)


def available_devices() -> List[str]:
    """Devices torch can use here: ``cpu``, then every CUDA / XPU device and ``mps`` when present."""
    import torch

    devices = ["cpu"]
    for kind in ("cuda", "xpu"):
        backend = getattr(torch, kind, None)
        if backend is not None and backend.is_available():
            devices.extend(f"{kind}:{index}" for index in range(backend.device_count()))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def checked_device(device: Union[str, "torch.device"]) -> "torch.device":
    """``device`` as a ``torch.device`` that exists here.

    Raises :class:`InputError` for a malformed name, or for a device that is not available, listing those that are.
    """
    import torch

    if not isinstance(device, (str, torch.device)):
        raise InputError(f"device must be a string such as 'cpu' or 'cuda:0', got {type(device).__name__}")
    try:
        target = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise InputError(f"device={str(device)!r} is not a torch device name ({error})") from None
    if target.type == "cpu":
        return target
    available = available_devices()
    of_type = [name for name in available if name.split(":")[0] == target.type]
    kind = target.type.upper() if target.type in ("cuda", "xpu", "mps") else target.type
    if not of_type:
        raise InputError(f"device={str(device)!r}: no {kind} device is available; available devices: "
                         f"{', '.join(available)}")
    if target.index is not None and f"{target.type}:{target.index}" not in of_type and target.type != "mps":
        raise InputError(f"device={str(device)!r}: there is no {kind} device {target.index}; available devices: "
                         f"{', '.join(available)}")
    return target


def local_model_problem(model: Union[str, "os.PathLike[str]"], converter: str, parameter: str = "model"
                        ) -> Optional[str]:
    """Why ``model`` cannot be a model reference, when it names a local path that is not a model folder; the message
    names it as the keyword ``parameter`` (``regions`` for a scorer's detector) that took it.

    A model is a hub id (``namespace/name``) or a folder written by ``converter`` (``conversion/convert_clip.py``). A path object,
    or a string that looks like a path (absolute, starting with ``.`` or ``~``, with more than one ``/``, or ending
    in a checkpoint suffix), must name an existing folder; a checkpoint file must be converted first.
    """
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return None
    convert = f"convert it first with {converter} and pass the folder it writes"
    if path.is_file():
        if path.suffix.lower() in CHECKPOINT_SUFFIXES:
            return f"{parameter}={text!r} is a checkpoint file, not a converted model folder: {convert}"
        return f"{parameter}={text!r} is a file; pass a converted model folder or a hub id"
    looks_like_path = (
        not isinstance(model, str)
        or path.is_absolute()
        or text.startswith((".", "~"))
        or "\\" in text
        or text.count("/") > 1
        or path.suffix.lower() in CHECKPOINT_SUFFIXES
    )
    if not looks_like_path:
        return None
    if path.suffix.lower() in CHECKPOINT_SUFFIXES:
        return f"{parameter}={text!r}: no such file; a checkpoint must exist and be converted: {convert}"
    return (f"{parameter}={text!r}: no such folder (a local model folder must exist; hub ids have the form "
            "namespace/name)")
