"""torchmetrics' ``CLIPScore`` as a peer, given the same model through its callable."""
from __future__ import annotations

import time
from typing import Any, Dict

import torch
from PIL import Image

from _measurement import timed
from _throughput.context import ChildContext, measured
from _throughput.workloads import WARM_UP_CAPTION, Workload, warm_up_image
from capeval.scorers.clipscore import CLIPScore


class _TensorFeatures(torch.nn.Module):
    """Adapter for torchmetrics 1.9, which expects ``get_*_features`` to return tensors: transformers 5 returns a
    ``BaseModelOutputWithPooling`` whose ``pooler_output`` holds the projected features. Same computation."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.config = model.config

    def get_image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


def run_torchmetrics(context: ChildContext, workload: Workload, batch_size: int = 64) -> Dict[str, Any]:
    """torchmetrics' ``CLIPScore`` given the same model through its callable; images decoded to uint8 tensors and
    fed ``batch_size`` pairs per ``update`` with the prompted captions."""
    from torchmetrics.multimodal import CLIPScore as TorchmetricsCLIPScore
    from torchvision.transforms.functional import pil_to_tensor
    from transformers import CLIPModel, CLIPProcessor

    def model_and_processor() -> tuple:
        model = CLIPModel.from_pretrained(context.model_dir).eval()
        return _TensorFeatures(model), CLIPProcessor.from_pretrained(context.model_dir)

    def load(path: str) -> torch.Tensor:  # torchmetrics runs the model on the device of the images
        with Image.open(path) as image:
            return pil_to_tensor(image.convert("RGB")).to(context.device)

    start = time.perf_counter()
    metric = TorchmetricsCLIPScore(model_name_or_path=model_and_processor).to(context.device)
    metric.update([pil_to_tensor(warm_up_image()).to(context.device)], [CLIPScore.prompt + WARM_UP_CAPTION])
    metric.reset()
    load_seconds = time.perf_counter() - start

    def score() -> float:
        for first in range(0, len(workload), batch_size):
            images = [load(path) for path in workload.images[first:first + batch_size]]
            metric.update(images, [CLIPScore.prompt + text for text in workload.candidates[first:first + batch_size]])
        return float(metric.compute())

    return measured(timed(score), load_seconds)
