"""Training BRIDGE's mapping network on COCO (Karpathy splits) with Accelerate (Sarto et al., 2024, Sec. 3.3, 4.1).

Recipe: frozen CLIP and BLIP; BLIP templates of every training image computed once (cached on disk, sharded over the
processes) and saved as ``templates.json``; each epoch visits every training image once, in a seeded order, with one
of its captions drawn at random and ``chunks_per_template`` (2) of its template's noun chunks; loss
``0.01 L1 + 1.0 L2 + 0.01 L3`` (:mod:`capeval.models.bridge.losses`); AdamW, lr 1e-4, global batch 256.

Multi-process training (``accelerate launch``) deals each global batch out in contiguous slices and gathers every
embedding before the losses, which therefore see the whole global batch exactly as one process would; gradients
flow back through the gather, so updates equal the one-process updates up to float rounding. Every random choice
(image order, caption, chunks) is a function of (seed, epoch, image), so resuming from a checkpoint continues the
same run: Accelerate's checkpoints hold the weights (safetensors), optimizer, scheduler and RNG states.

Images whose template caption has no noun chunk take no part in training (counted in the run card).
"""
from __future__ import annotations

import json
import math
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader, Dataset

from capeval.benchmarks.datasets import load_benchmark
from capeval.benchmarks.statistics import correlations
from capeval.engine import EmbeddingEngine
from capeval.configuration import ConfigError
from capeval.inputs import InputError, validate_image
from capeval.models.bridge.configuration import BridgeConfig
from capeval.models.bridge.encoders import TemplateRows, decode_template_row
from capeval.models.bridge.loading import save_bridge
from capeval.models.bridge.losses import LossWeights, bridge_losses
from capeval.models.bridge.modeling import BridgeModel, TemplateBatch
from capeval.models.bridge.templates import MaskedTemplate, NounChunker, Tagger, build_templates
from capeval.models.clip.loading import Backbone, load_backbone
from capeval.models.clip.modeling import pooled_text_states
from capeval.models.clip.preprocessing import pad_token_ids
from capeval.options import check_positive_int
from capeval.processes import ParentWatch
from capeval.runtime import process_state
from capeval.scorers.bridge import BRIDGEScore
from capeval.version import __version__

TRAIN_SPLITS = ("train", "restval")
"""Karpathy splits trained on (113,287 images)."""


@dataclass(frozen=True)
class TrainingConfig:
    """Every setting of a training run (written to the run card)."""

    annotations: str
    """Karpathy's ``dataset_coco.json``."""
    images: str
    """COCO image root; an image is ``<images>/<filepath>/<filename>``."""
    output_dir: str
    model: BridgeConfig = field(default_factory=BridgeConfig)
    epochs: int = 10
    batch_size: int = 256
    """Global batch (images), split over the processes."""
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    """AdamW's default (unstated in the paper)."""
    schedule: str = "constant"
    """``constant`` or ``cosine`` (after ``warmup_steps`` of linear warm-up); unstated in the paper."""
    warmup_steps: int = 0
    losses: LossWeights = field(default_factory=LossWeights)
    chunks_per_template: int = 2
    chunk_weights: str = "sampled"
    """``N_i`` of the weighted losses: ``sampled`` (pseudo-captions of image i in the batch, as the formula's sums
    count them) or ``template`` (noun chunks of image i's template)."""
    chunk_prompt: str = "a photo of a "
    """Prompt of L3's chunk texts."""
    seed: int = 0
    mixed_precision: str = "no"
    checkpoint_every: int = 1000
    """Steps between checkpoints (one is also written at the end of every run)."""
    max_steps: Optional[int] = None
    """Stop after this many steps in all (for short runs); all epochs when ``None``."""
    num_workers: int = 4
    caption_batch_size: int = 32
    validation_root: Optional[str] = None
    """Flickr8k folder (``ExpertAnnotations.txt`` + ``Flickr8k.token.txt`` or ``flickr8k.json``); with it, Kendall
    and Pearson correlations on Flickr8k-Expert are measured after every epoch."""
    validation_images: Optional[str] = None
    """Folder of the Flickr8k images (default: ``<validation_root>/Flicker8k_Dataset``)."""

    def __post_init__(self) -> None:
        """:class:`InputError` naming the option when a setting cannot train (no step, a learning rate that is not a
        positive number, an unknown schedule...), before any data or model is loaded."""
        for name in ("epochs", "batch_size", "checkpoint_every", "chunks_per_template", "caption_batch_size"):
            check_positive_int(getattr(self, name), name)
        check_positive_int(self.max_steps, "max_steps", optional=True)
        for name in ("warmup_steps", "num_workers", "seed"):
            check_positive_int(getattr(self, name), name, minimum=0)
        for name, value, low in (("learning_rate", self.learning_rate, 0.0), ("weight_decay", self.weight_decay, None),
                                 ("temperature", self.losses.temperature, 0.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
                    (value <= low if low is not None else value < 0):
                kind = "a positive" if low is not None else "a non-negative"
                raise InputError(f"{name} must be {kind} finite number, got {value!r}")
        for name, value, allowed in (("schedule", self.schedule, ("constant", "cosine")),
                                     ("chunk_weights", self.chunk_weights, ("sampled", "template")),
                                     ("mixed_precision", self.mixed_precision, ("no", "fp16", "bf16"))):
            if value not in allowed:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "TrainingConfig":
        """The run of a dict :meth:`to_dict` gave; :class:`~capeval.configuration.ConfigError` for unknown keys."""
        values = dict(data)
        for owner, known, given in (("TrainingConfig", {f.name for f in fields(cls)}, values),
                                    ("LossWeights", {f.name for f in fields(LossWeights)}, values.get("losses", {}))):
            unknown = sorted(set(given) - known)
            if unknown:
                raise ConfigError(f"unknown {owner} fields: {unknown}")
        values["model"] = BridgeConfig.from_dict(values.get("model", {}))
        values["losses"] = LossWeights(**values.get("losses", {}))
        return cls(**values)


@dataclass(frozen=True)
class CocoImage:
    path: str
    """Relative to the image root."""
    captions: Tuple[str, ...]


def read_karpathy(annotations: Path, splits: Sequence[str] = TRAIN_SPLITS) -> List[CocoImage]:
    """Images of ``splits`` in Karpathy's ``dataset_coco.json``, in file order."""
    data = json.loads(Path(annotations).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise InputError(f"{annotations} is not Karpathy's dataset_coco.json (no 'images' list)")
    found = []
    for index, entry in enumerate(data["images"]):
        if entry.get("split") not in splits:
            continue
        captions = tuple(sentence["raw"].strip() for sentence in entry.get("sentences", ()) if sentence["raw"].strip())
        if not captions:
            raise InputError(f"{annotations}: image {index} ({entry.get('filename')}) has no caption")
        found.append(CocoImage(str(Path(entry.get("filepath", "")) / entry["filename"]), captions))
    if not found:
        raise InputError(f"{annotations} has no image in splits {', '.join(splits)}")
    return found


def prepare_templates(config: TrainingConfig, images: Sequence[CocoImage], chunk: int = 1024) -> Dict[str, str]:
    """BLIP template caption of every image (relative path -> caption): read from ``<output_dir>/templates.json`` if
    it covers them, else computed (sharded over processes, cached on disk) and written there."""
    output = Path(config.output_dir)
    path = output / "templates.json"
    known: Dict[str, str] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    missing = [image.path for image in images if image.path not in known]
    if missing:
        state = process_state()
        rows = TemplateRows(config.model.templates, state.device, config.caption_batch_size)
        engine = EmbeddingEngine([rows], cache_dir=output / "cache")
        root = Path(config.images)
        for start in range(0, len(missing), chunk):
            part = missing[start:start + chunk]
            items = [validate_image(root / name, start + index) for index, name in enumerate(part)]
            known.update(zip(part, map(decode_template_row, engine.row_list("template", items))))
        if state.is_main_process:
            output.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, indent=0, sort_keys=True), encoding="utf-8")
        state.wait_for_everyone()
    return known


def _rng(*keys: int) -> np.random.Generator:
    return np.random.default_rng(list(keys))


class EpochData(Dataset):
    """The training samples of one epoch, in its seeded order: uint8 pixels, one caption, the sampled templates."""

    def __init__(self, config: TrainingConfig, images: Sequence[CocoImage], templates: Sequence[List[MaskedTemplate]],
                 backbone: Backbone, epoch: int) -> None:
        self.config, self.images, self.templates, self.backbone, self.epoch = config, images, templates, backbone, epoch
        self.order = _rng(config.seed, epoch).permutation(len(images))

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, position: int) -> Dict[str, Any]:
        from PIL import Image

        index = int(self.order[position])
        image, templates = self.images[index], self.templates[index]
        rng = _rng(self.config.seed, self.epoch, index)
        caption = image.captions[int(rng.integers(len(image.captions)))]
        count = min(self.config.chunks_per_template, len(templates))
        chosen = sorted(rng.choice(len(templates), size=count, replace=False).tolist())
        with Image.open(Path(self.config.images) / image.path) as opened:
            pixels = self.backbone.image_transform.to_uint8(opened, f"training image {image.path}")
        return {"pixels": pixels, "caption": caption, "templates": [templates[i] for i in chosen],
                "chunks": len(templates)}


def _collate(samples: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return samples


class _GatherWithGrad(torch.autograd.Function):
    """Rows of every process concatenated in rank order (sizes may differ); the backward pass sums the gradients of
    all processes' losses and returns this process's slice."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
        dist.all_gather(sizes, torch.tensor([tensor.shape[0]]))
        sizes_list = [int(size) for size in sizes]
        padded = tensor.new_zeros((max(sizes_list), *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in sizes_list]
        dist.all_gather(parts, padded.contiguous())
        ctx.sizes, ctx.rank = sizes_list, dist.get_rank()
        return torch.cat([part[:size] for part, size in zip(parts, sizes_list)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start:start + ctx.sizes[ctx.rank]]


def gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenation over processes (identity in one process), differentiable."""
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


class BridgeTrainer:
    """One training run: data, model, optimiser, checkpoints, validation and run card."""

    def __init__(self, config: TrainingConfig, tagger: Optional[Tagger] = None) -> None:
        self.config = config
        self.output = Path(config.output_dir)
        process_state()
        self.accelerator = Accelerator(mixed_precision=config.mixed_precision,
                                       dataloader_config=DataLoaderConfiguration(split_batches=True))
        set_seed(config.seed)
        self.tagger = tagger
        model_config = config.model
        self.backbone = load_backbone(model_config.backbone, model_config.backbone_revision,
                                      self.accelerator.device, "fp32")
        images = read_karpathy(Path(config.annotations))
        captions = prepare_templates(config, images)
        chunker = NounChunker(model_config.templates.grammar, tagger)
        built = [build_templates(captions[image.path], chunker, self.backbone.text_transform,
                                 model_config.templates.unit_size) for image in images]
        keep = [index for index, templates in enumerate(built) if templates[0].chunk != ""]
        self.without_chunks = len(images) - len(keep)
        self.images = [images[index] for index in keep]
        self.templates = [built[index] for index in keep]
        self.steps_per_epoch = len(self.images) // config.batch_size
        if self.steps_per_epoch == 0:
            raise InputError(f"{len(self.images)} usable training images cannot fill one batch of {config.batch_size}")
        self.total_steps = self.steps_per_epoch * config.epochs
        if config.max_steps is not None:
            self.total_steps = min(self.total_steps, config.max_steps)
        torch.manual_seed(config.seed)
        model = BridgeModel(model_config, self.backbone.model).to(self.accelerator.device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_factor)
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        self.step = 0
        self.history: List[Dict[str, float]] = []
        self.validation: List[Dict[str, Any]] = []

    def _lr_factor(self, step: int) -> float:
        warmup = self.config.warmup_steps
        if step < warmup:
            return (step + 1) / warmup
        if self.config.schedule == "cosine":
            progress = (step - warmup) / max(1, self.steps_per_epoch * self.config.epochs - warmup)
            return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        if self.config.schedule != "constant":
            raise ValueError(f"schedule must be 'constant' or 'cosine', not {self.config.schedule!r}")
        return 1.0

    # -- checkpoints -------------------------------------------------------------------------------------------
    def _checkpoints(self) -> List[Path]:
        folder = self.output / "checkpoints"
        return sorted(folder.glob("step-*"), key=lambda path: int(path.name.split("-")[1])) if folder.is_dir() else []

    def save_checkpoint(self) -> Path:
        path = self.output / "checkpoints" / f"step-{self.step}"
        self.accelerator.save_state(str(path), safe_serialization=True)
        if self.accelerator.is_main_process:
            (path / "trainer_state.json").write_text(json.dumps(
                {"step": self.step, "history": self.history, "validation": self.validation}, indent=1))
        self.accelerator.wait_for_everyone()
        return path

    def resume(self) -> bool:
        """Continue from the latest checkpoint under ``<output_dir>/checkpoints``; ``False`` if there is none."""
        checkpoints = self._checkpoints()
        if not checkpoints:
            return False
        self.accelerator.load_state(str(checkpoints[-1]))
        state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
        self.step, self.history, self.validation = state["step"], state["history"], state["validation"]
        return True

    # -- one step ----------------------------------------------------------------------------------------------
    def _local_batches(self, epoch: int, first_step: int) -> Iterator[List[Dict[str, Any]]]:
        """This process's contiguous slice of every global batch of ``epoch`` from ``first_step`` on."""
        state = self.accelerator.state
        world, rank = state.num_processes, state.process_index
        size = self.config.batch_size
        if size % world:
            raise ValueError(f"batch_size {size} is not divisible by the {world} processes")
        local = size // world
        data = EpochData(self.config, self.images, self.templates, self.backbone, epoch)
        sampler = [list(range(step * size + rank * local, step * size + (rank + 1) * local))
                   for step in range(first_step, self.steps_per_epoch)]
        loader = DataLoader(data, batch_sampler=sampler, collate_fn=_collate, num_workers=self.config.num_workers,
                            worker_init_fn=ParentWatch.here())  # its workers end with this process
        yield from loader

    @torch.no_grad()
    def _text_embeddings(self, texts: List[str], prompt: str) -> torch.Tensor:
        transform = self.backbone.text_transform
        ids = pad_token_ids(transform.tokenize(transform.prepare(texts, prompt))).to(self.accelerator.device)
        clip = self.backbone.model
        return clip.text_projection(pooled_text_states(clip.text_model, ids, transform.end_token_id))

    def train_step(self, samples: List[Dict[str, Any]]) -> Dict[str, float]:
        device = self.accelerator.device
        templates, owner = [], []
        for index, sample in enumerate(samples):
            templates.extend(sample["templates"])
            owner.extend([index] * len(sample["templates"]))
        batch = TemplateBatch.collate(templates, owner).to(device)
        pixels = torch.stack([sample["pixels"] for sample in samples]).to(device)
        values = self.backbone.image_transform.normalize(pixels)
        with self.accelerator.autocast():
            images, pseudo, regularized = self.model(values, batch)
        captions = self._text_embeddings([sample["caption"] for sample in samples], self.backbone_prompt)
        prompts = self._text_embeddings([template.chunk for template in templates], self.config.chunk_prompt)
        counts = gather(torch.tensor([len(samples)], device=device))
        offset = int(counts[: self.accelerator.process_index].sum())
        owner_all = gather(batch.image_index + offset)
        if self.config.chunk_weights == "sampled":
            weights = torch.bincount(owner_all, minlength=int(counts.sum()))
        elif self.config.chunk_weights == "template":
            weights = gather(torch.tensor([sample["chunks"] for sample in samples], device=device))
        else:
            raise ValueError(f"chunk_weights must be 'sampled' or 'template', not {self.config.chunk_weights!r}")
        losses = bridge_losses(gather(images.float()), gather(captions.float()), gather(pseudo.float()),
                               gather(regularized.float()), gather(prompts.float()), owner_all, weights,
                               self.config.losses)
        self.accelerator.backward(losses["loss"])
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {name: float(value.detach()) for name, value in losses.items()}

    @property
    def backbone_prompt(self) -> str:
        """Ground-truth captions are prompted as candidates are at scoring time."""
        return self.config.model.prompt

    # -- the run -----------------------------------------------------------------------------------------------
    def train(self) -> Path:
        """Train to ``total_steps`` (from a checkpoint if one exists); save the model, the card, a checkpoint."""
        self.resume()
        self.model.train()
        while self.step < self.total_steps:
            epoch, first = divmod(self.step, self.steps_per_epoch)
            for samples in self._local_batches(epoch, first):
                losses = self.train_step(samples)
                self.step += 1
                self.history.append({"step": self.step, **losses})
                if self.step % self.steps_per_epoch == 0:
                    self.validate(self.step // self.steps_per_epoch)
                if self.step % self.config.checkpoint_every == 0 and self.step < self.total_steps:
                    self.save_checkpoint()
                if self.step >= self.total_steps:
                    break
        self.save_checkpoint()
        return self.save_model(self.output / "model")

    def save_model(self, folder: Path) -> Path:
        if self.accelerator.is_main_process:
            save_bridge(self.accelerator.unwrap_model(self.model), folder)
            self.write_card(folder)
        self.accelerator.wait_for_everyone()
        return folder

    def validate(self, epoch: int) -> None:
        """Correlations with Flickr8k-Expert after ``epoch`` (when ``validation_root`` is given)."""
        if self.config.validation_root is None:
            return
        folder = self.save_model(self.output / "epochs" / f"epoch-{epoch}")
        root = Path(self.config.validation_root)
        benchmark = load_benchmark("flickr8k-expert", root)
        image_dir = Path(self.config.validation_images) if self.config.validation_images else root / "Flicker8k_Dataset"
        scorer = BRIDGEScore(model=folder, device=self.accelerator.device, precision="fp32",
                             cache_dir=self.output / "cache", backbone=self.backbone.folder, tagger=self.tagger,
                             tagger_name=self.config.model.templates.tagger)
        result = scorer.score([str(image_dir / item.image) for item in benchmark.items],
                              [item.candidate for item in benchmark.items])
        values = correlations(result["bridge_scores"], [item.human for item in benchmark.items])
        self.validation.append({"epoch": epoch, "step": self.step, "flickr8k_expert": values})
        self.model.train()

    def write_card(self, folder: Path) -> Path:
        """``run_card.json`` beside the weights: data, seed, every hyperparameter, versions, losses, validation."""
        card = {
            "capeval_version": __version__,
            "capeval_commit": _commit(),
            "torch": torch.__version__,
            "processes": self.accelerator.num_processes,
            "config": self.config.to_dict(),
            "data": {"annotations": self.config.annotations, "images": self.config.images,
                     "splits": list(TRAIN_SPLITS), "training_images": len(self.images),
                     "images_without_noun_chunks": self.without_chunks,
                     "steps_per_epoch": self.steps_per_epoch},
            "steps": self.step,
            "loss_history": self.history,
            "validation": self.validation,
        }
        path = folder / "run_card.json"
        path.write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
        return path


def _commit() -> str:
    """The git commit of the capeval checkout, or ``unknown`` outside one."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                                   capture_output=True, text=True, timeout=10)
    except OSError:
        return "unknown"
    return completed.stdout.strip() if completed.returncode == 0 else "unknown"

