"""ViLBERTScore's region inputs, computed as the reference's ``CaptioningDataset.img_preprocess``.

The mean of the region features is prepended as a global region; locations are 5-d,
``(x1/W, y1/H, x2/W, y2/H, (y2-y1)(x2-x1)/(W·H))`` in float32, and ``[0, 0, 1, 1, 1]`` for the global region.
All regions are attended (mask of ones).
"""
from __future__ import annotations

from typing import Tuple

import numpy as np
import torch

from capeval.models.regions.features import RegionFeatures

GLOBAL_LOCATION = (0.0, 0.0, 1.0, 1.0, 1.0)


def region_inputs(regions: RegionFeatures) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(features, locations)`` of one image: (R + 1, D) and (R + 1, 5) float32 tensors, global region first.

    ``regions`` must hold boxes and the image size (``RegionFeatures.validated(..., needs_boxes=True)``). The global
    feature is ``sum / R`` over float32 rows as the reference computes it with torch; the box arithmetic runs on a
    float32 array in the reference's order.
    """
    features = torch.from_numpy(np.ascontiguousarray(regions.features, dtype=np.float32))
    global_feature = torch.sum(features, dim=0) / features.shape[0]
    width, height = (float(v) for v in regions.image_size)
    location = np.zeros((features.shape[0], 5), dtype=np.float32)
    location[:, :4] = regions.boxes
    location[:, 4] = (location[:, 3] - location[:, 1]) * (location[:, 2] - location[:, 0]) / (width * height)
    location[:, 0] = location[:, 0] / width
    location[:, 1] = location[:, 1] / height
    location[:, 2] = location[:, 2] / width
    location[:, 3] = location[:, 3] / height
    locations = np.concatenate([np.asarray([GLOBAL_LOCATION], dtype=np.float32), location], axis=0)
    return torch.cat([global_feature[None], features], dim=0), torch.from_numpy(locations)
