"""Convert the Polos authors' checkpoint (``reprod.zip``) into a capeval Polos folder.

    python -m conversion.convert_polos --checkpoint reprod.zip --encoder-config config.json \\
        --vocab vocab.json --merges merges.txt --out DIR

``config.json``, ``vocab.json`` and ``merges.txt`` are those of the sentence encoder the checkpoint's hparams name
(``princeton-nlp/sup-simcse-roberta-base``). The command line; the conversion itself (the keys kept and dropped, the
safe reading of the Lightning checkpoint) is :mod:`conversion.polos_converter`, imported once the arguments are
read, so that ``--help`` loads no torch.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="reprod.zip, its extracted folder, or the Lightning .ckpt (hparams.yaml beside it)")
    parser.add_argument("--encoder-config", type=Path, required=True, help="the sentence encoder's config.json")
    parser.add_argument("--vocab", type=Path, required=True, help="the sentence encoder's vocab.json")
    parser.add_argument("--merges", type=Path, required=True, help="the sentence encoder's merges.txt")
    parser.add_argument("--bpe", type=Path, default=None,
                        help="OpenAI's bpe_simple_vocab_16e6.txt.gz (default: the installed clip / open_clip copy)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    from conversion.polos_converter import CheckpointError, convert

    try:
        convert(args.checkpoint, args.encoder_config, args.vocab, args.merges, args.out, bpe_path=args.bpe)
    except CheckpointError as error:
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    main()
