"""``capeval train``: train the learned parts of a metric. ``capeval train bridge`` trains BRIDGE's mapping network
on COCO (run under ``accelerate launch`` for several processes or mixed precision)."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict

from capeval.commands.arguments import set_handler
from capeval.inputs import InputError, read_utf8
from capeval.models.bridge.configuration import BridgeConfig

if TYPE_CHECKING:
    from capeval.training.bridge import TrainingConfig


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add the ``train`` subcommand, with one subcommand per trainable model, to the capeval command's subparsers."""
    train = subparsers.add_parser("train", help="train a learned metric (bridge)",
                                  description="Train the learned parts of a metric.")
    register_bridge(train.add_subparsers(dest="model", required=True, metavar="MODEL"))


def register_bridge(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add ``bridge`` to the subparsers of ``capeval train``."""
    parser = subparsers.add_parser(
        "bridge", help="train BRIDGE's mapping network on COCO (Karpathy splits)",
        description="Train BRIDGE (Sarto et al., 2024) on COCO: BLIP templates are computed once and cached, then the "
                    "mapping network is trained with the paper's losses. Resumes from the latest checkpoint in "
                    "--output-dir. Defaults are the paper's where it states them (see the model card).")
    parser.add_argument("--annotations", required=True, type=Path, help="Karpathy's dataset_coco.json")
    parser.add_argument("--images", required=True, type=Path, help="COCO image root (<root>/<filepath>/<filename>)")
    parser.add_argument("--output-dir", required=True, type=Path, help="checkpoints, templates, model and run card")
    parser.add_argument("--model-config", type=Path,
                        help="JSON of BridgeConfig fields (architecture, backbone, captioner...) replacing defaults")
    parser.add_argument("--backbone", help="CLIP backbone (hub id or local folder); default openai ViT-B/32")
    parser.add_argument("--captioner", help="BLIP captioner (hub id or local folder)")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int, help="global batch of images (default 256)")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--schedule", choices=["constant", "cosine"])
    parser.add_argument("--warmup-steps", type=int)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--mixed-precision", choices=["no", "fp16", "bf16"])
    parser.add_argument("--checkpoint-every", type=int)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--num-workers", type=int)
    parser.add_argument("--validation-root", help="Flickr8k folder: Flickr8k-Expert correlations after each epoch")
    parser.add_argument("--validation-images", help="folder of the Flickr8k images")
    set_handler(parser, run_bridge)


def _model_config(path: Path) -> Dict[str, Any]:
    """The JSON object of ``--model-config``; :class:`InputError` naming the file otherwise."""
    try:
        values = json.loads(read_utf8(path))
    except json.JSONDecodeError as error:
        raise InputError(f"--model-config {path} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise InputError(f"--model-config {path} must hold a JSON object of BridgeConfig fields, found "
                         f"{type(values).__name__}")
    return values


def build_config(args: argparse.Namespace) -> "TrainingConfig":
    """The training run that the arguments of ``capeval train bridge`` describe."""
    from capeval.models.bridge.losses import LossWeights
    from capeval.training.bridge import TrainingConfig

    model = BridgeConfig.from_dict(_model_config(args.model_config)) if args.model_config else BridgeConfig()
    if args.backbone:
        model = dataclasses.replace(model, backbone=args.backbone, backbone_revision=None)
    if args.captioner:
        model = dataclasses.replace(model, templates=dataclasses.replace(model.templates, captioner=args.captioner,
                                                                          captioner_revision=None))
    losses = LossWeights() if args.temperature is None else LossWeights(temperature=args.temperature)
    options = {"epochs": args.epochs, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
               "schedule": args.schedule, "warmup_steps": args.warmup_steps, "seed": args.seed,
               "mixed_precision": args.mixed_precision, "checkpoint_every": args.checkpoint_every,
               "max_steps": args.max_steps, "num_workers": args.num_workers,
               "validation_root": args.validation_root, "validation_images": args.validation_images}
    return TrainingConfig(annotations=str(args.annotations), images=str(args.images), output_dir=str(args.output_dir),
                          model=model, losses=losses,
                          **{name: value for name, value in options.items() if value is not None})


def run_bridge(args: argparse.Namespace) -> int:
    """Handler of ``capeval train bridge``."""
    from capeval.training.bridge import BridgeTrainer

    folder = BridgeTrainer(build_config(args)).train()
    print(f"BRIDGE model and run card written to {folder}")
    return 0
