"""What the image decoding worker processes run: decode and transform groups of images to uint8 arrays.

Workers are started by ``fork`` where there is one (Linux; :mod:`capeval.processes` says why) and end with the process
that started them. A forked worker runs only the loader's loop over this module's code; the cache's SQLite connections
it inherits are never closed there (the parent closes each as soon as its cache is gone). An image given as a file path
is read here, in the worker, and its content checked against the hash its validation took
(:meth:`capeval.inputs.ImageItem.open`).
"""
from __future__ import annotations

from typing import Any, Iterator, List, Union

import numpy as np
import torch

from capeval.inputs import ImageItem, InputError
from capeval.models.clip.preprocessing import ImageTransform
from capeval.processes import ParentWatch, forking_quietly


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


def started_workers(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    """``iter(loader)``: the loader's worker processes started (:func:`capeval.processes.forking_quietly`), each ended
    as soon as this process dies (:class:`capeval.processes.ParentWatch`, made here: it depends on the thread that
    starts them)."""
    loader.worker_init_fn = ParentWatch.here()
    with forking_quietly():
        return iter(loader)
