"""Convert an original CLIP ViT checkpoint (OpenAI or OpenCLIP format) into a transformers ``CLIPModel`` folder.

    python -m conversion.convert_clip --checkpoint clip_ViT-B-32.pth --out DIR --model-name ViT-B-32

The command line and the choices it offers (architectures, backbones, normalisations, LoRA modes). The conversion
itself is :mod:`conversion.clip_converter`, imported once the arguments are read, so that ``--help`` loads neither
torch nor transformers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from capeval.commands.arguments import in_flags

ARCHES = ("openai", "openclip")
"""``openai``: QuickGELU; ``openclip``: exact GELU."""

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
INCEPTION_MEAN = (0.5, 0.5, 0.5)
INCEPTION_STD = (0.5, 0.5, 0.5)
NORMALIZATIONS = {"openai": (OPENAI_MEAN, OPENAI_STD), "inception": (INCEPTION_MEAN, INCEPTION_STD)}
DEFAULT_NORMALIZATION = {"openai": "openai", "openclip": "inception"}

# Dimensions that identify the two supported full-size backbones, and the architecture each defaults to:
# OpenAI ViT-B/32 (CLIP-S, PAC-S ViT-B/32) and OpenCLIP ViT-L-14 laion2b_s32b_b82k (PAC-S ViT-L/14).
KNOWN_MODELS: dict[str, dict[str, int]] = {
    "ViT-B-32": {"projection_dim": 512, "vision_width": 768, "vision_layers": 12, "patch_size": 32,
                 "image_size": 224, "text_width": 512, "text_layers": 12},
    "ViT-L-14": {"projection_dim": 768, "vision_width": 1024, "vision_layers": 24, "patch_size": 14,
                 "image_size": 224, "text_width": 768, "text_layers": 12},
}
DEFAULT_ARCH_FOR_MODEL = {"ViT-B-32": "openai", "ViT-L-14": "openclip"}

LORA_MODES = ("merge", "refuse")
"""What to do with the LoRA factors of a PAC-S++ checkpoint: fold them into the weights, or stop."""


def _parser() -> argparse.ArgumentParser:
    """The command line; each option's ``dest`` is the keyword of :func:`conversion.clip_converter.convert_checkpoint`
    it gives, so that the converter's errors name the option (:func:`capeval.commands.arguments.in_flags`)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="OpenAI and OpenCLIP ViT checkpoints have identical key names. Without --arch, a PAC-S++ LoRA "
               "checkpoint or an OpenAI TorchScript archive is 'openai'; otherwise --model-name picks the default "
               "(ViT-B-32 -> openai, ViT-L-14 -> openclip, the PAC-S backbones); with neither the conversion stops "
               "and asks for --arch.",
    )
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="OpenAI state dict or TorchScript archive, PAC-S or PAC-S++ {'state_dict': ...} file, "
                             "or OpenCLIP state dict (read with weights_only=True)")
    parser.add_argument("--out", required=True, type=Path, help="output folder for the CLIPModel files")
    parser.add_argument("--arch", choices=ARCHES, help="openai: QuickGELU; openclip: exact GELU")
    parser.add_argument("--model-name", choices=sorted(KNOWN_MODELS),
                        help="expected backbone; checked against the checkpoint's dimensions")
    parser.add_argument("--bpe", type=Path, dest="bpe_path",
                        help="bpe_simple_vocab_16e6.txt.gz (default: from open_clip / clip)")
    parser.add_argument("--normalization", choices=sorted(NORMALIZATIONS),
                        help="image mean/std: openai constants or inception 0.5 (default: by arch)")
    parser.add_argument("--lora", choices=LORA_MODES, default="merge",
                        help="merge (default): fold PAC-S++ LoRA factors into the weights as the reference computes "
                             "(the MLP factors are never applied there), when the checkpoint holds any; "
                             "refuse: stop if it holds any")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = _parser()
    args = parser.parse_args(argv)
    from conversion.clip_converter import CheckpointError, convert_checkpoint

    try:
        out = convert_checkpoint(args.checkpoint, args.out, arch=args.arch, model_name=args.model_name,
                                 bpe_path=args.bpe_path, normalization=args.normalization, lora=args.lora)
    except CheckpointError as error:
        print(f"error: {in_flags(str(error), parser)}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
