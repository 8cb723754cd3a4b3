"""Where and at what precision a model runs: Accelerate's process state, device and precision resolution.

Model-independent: every model family's loader and every scorer resolve their device and precision here.
"""
from __future__ import annotations

from typing import Protocol, Union

import torch
from accelerate import PartialState

from capeval.options import PRECISION_DTYPES, checked_device

DeviceLike = Union[str, torch.device, None]


def process_state() -> PartialState:
    """Accelerate's process state. Without an accelerator it is created with ``cpu=True``, so that processes started
    by ``torchrun`` or ``accelerate launch --multi_gpu`` on CPU machines are recognised as one multi-CPU job."""
    accelerator = getattr(torch, "accelerator", None)
    has_accelerator = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    return PartialState(cpu=not has_accelerator)


def resolve_device(device: DeviceLike) -> torch.device:
    """``device`` as a ``torch.device`` that exists here (:func:`capeval.options.checked_device` says which do when it
    does not); Accelerate's ``PartialState().device`` when ``None``."""
    return checked_device(device) if device is not None else process_state().device


def precision_dtype(precision: str) -> torch.dtype:
    """The torch dtype of a precision name (see :data:`capeval.options.PRECISION_DTYPES`); ``ValueError`` for an
    unknown name."""
    if precision not in PRECISION_DTYPES:
        raise ValueError(f"precision must be one of {sorted(PRECISION_DTYPES)}, got {precision!r}")
    return getattr(torch, PRECISION_DTYPES[precision])


class RunsOnAccelerator(Protocol):
    """Anything that states the precision its reference code runs at on an accelerator (a metric family)."""

    accelerator_precision: str


def resolve_precision(precision: str, family: RunsOnAccelerator, device: torch.device) -> str:
    """``"auto"`` becomes the reference code's precision on ``device`` (fp32 on CPU, ``family.accelerator_precision``
    elsewhere); other values pass through."""
    if precision != "auto":
        return precision
    return "fp32" if device.type == "cpu" else family.accelerator_precision


def default_batch_size(device: torch.device) -> int:
    """Items per forward pass when none is given: 64 on the CPU (larger batches gain nothing there and bound the
    memory of streamed runs), 256 on an accelerator."""
    return 64 if device.type == "cpu" else 256
