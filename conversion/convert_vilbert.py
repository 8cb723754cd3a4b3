"""Convert a vilbert-multi-task checkpoint into a capeval ViLBERT folder for ViLBERTScore.

    python -m conversion.convert_vilbert --checkpoint multi_task_model.bin \\
        --config bert_base_6layer_6conect.json --vocab vocab.txt --out DIR

The command line; the conversion itself (the keys kept and dropped) is :mod:`conversion.vilbert_converter`, imported
once the arguments are read, so that ``--help`` loads no torch.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="multi_task_model.bin or pretrained_model.bin")
    parser.add_argument("--config", type=Path, required=True,
                        help="original BertConfig JSON (bert_base_6layer_6conect.json)")
    parser.add_argument("--vocab", type=Path, required=True, help="bert-base-uncased vocab.txt")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    from conversion.vilbert_converter import CheckpointError, convert

    try:
        convert(args.checkpoint, args.config, args.vocab, args.out)
    except CheckpointError as error:
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    main()
