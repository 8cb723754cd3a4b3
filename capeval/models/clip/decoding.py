"""What the image decoding worker processes run: decode and transform groups of images to uint8 arrays.

Workers are started by ``fork`` where there is one (Linux): ``spawn`` and ``forkserver`` import the user's main
module again in every worker, which fails in a script without an ``if __name__ == "__main__":`` guard (as under
``accelerate launch``). A forked worker runs only the loader's loop over this module's code; the cache's SQLite
connections it inherits are never closed there (the parent closes each as soon as its cache is gone).
"""
from __future__ import annotations

import multiprocessing
import sys
import warnings
from multiprocessing.context import BaseContext
from typing import Any, Iterator, List, Union

import numpy as np
import torch

from capeval.inputs import ImageItem, InputError
from capeval.models.clip.preprocessing import ImageTransform


class DecodedImages(torch.utils.data.Dataset):
    """The loader's dataset. The sampler's "indices" are the :class:`ImageItem` groups themselves; a group becomes one
    uint8 array ``(n, 3, size, size)``, or the :class:`InputError` of its first undecodable image (returned, not
    raised, so that the error reaches the caller as it is)."""

    def __init__(self, transform: ImageTransform) -> None:
        self.transform = transform

    def __getitem__(self, item: ImageItem) -> torch.Tensor:
        return self.transform.to_uint8(item.open(), f"images[{item.index}] ({item.label})")

    def __getitems__(self, items: List[ImageItem]) -> Union[np.ndarray, InputError]:
        try:
            return torch.stack([self[item] for item in items]).numpy()
        except InputError as error:
            return error


class Groups(torch.utils.data.Sampler):
    """The loader's batch sampler: the groups of the current request, replaced before each iteration."""

    def __init__(self) -> None:
        self.groups: List[List[ImageItem]] = []

    def __iter__(self) -> Iterator[List[ImageItem]]:
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)


def as_is(group: Union[np.ndarray, InputError]) -> Union[np.ndarray, InputError]:
    """The loader's collate function: groups are already stacked by :meth:`DecodedImages.__getitems__`."""
    return group


def worker_context() -> BaseContext:
    """``fork`` on Linux, else the platform's default start method."""
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


_FORK_WITH_THREADS = r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"


def started_workers(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    """``iter(loader)``: the loader's worker processes started, without the ``DeprecationWarning`` that ``os.fork``
    gives from Python 3.12 on whenever the process has other threads, as a scoring process always has (validation
    threads, torch's and the tokenizer's pools). PyTorch's DataLoader forks the same way on Linux; the workers run
    only its worker loop and the decoding of media with PIL or PyAV and NumPy, and neither the tokenizer's nor
    torch's pools are used in them (torch re-initialises its pool after a fork)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_FORK_WITH_THREADS, category=DeprecationWarning)
        return iter(loader)
