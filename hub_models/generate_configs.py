"""Regenerate the config, image-processor and tokenizer files of every hub_models model folder, and the list of
original files in every model card.

Each CLIP folder gets exactly the non-weight files ``conversion/convert_clip.py`` writes for a checkpoint of its
architecture; the full-size original model is built on the meta device, so nothing is downloaded or allocated.
Each Polos folder gets the ``config.json`` of the authors' checkpoint (:class:`PolosConfig`'s defaults), under
``clip/`` the files ``conversion/convert_polos.py`` writes for its OpenAI ViT-B/32, and under ``encoder/`` the
tokenizer config the conversion writes and a ``config.json`` of the sentence encoder's architecture
(:data:`conversion.polos_converter.SENTENCE_ENCODER_ARCHITECTURE`; a conversion copies the encoder's own
``config.json`` instead). The encoder's ``vocab.json`` and ``merges.txt`` are the original files themselves.
Each card of a model with original files gets, between ``<!--originals-->`` and ``<!--/originals-->``, the list
that :func:`capeval.originals.card_section` writes from the table the fetcher reads.

    python -m hub_models.generate_configs           # rewrite the files
    python -m hub_models.generate_configs --check   # exit 1 if a committed file differs from a regenerated one
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

import torch
from torch import nn

from capeval.models.polos.configuration import CLIP_FOLDER, ENCODER_FOLDER, PolosConfig
from capeval.originals import SECTION_END, SECTION_START, SOURCES, card_section
from conversion.clip_converter import (clip_config_from_state_dict, default_bpe_path, write_image_processor,
                                       write_tokenizer)
from conversion.convert_clip import DEFAULT_NORMALIZATION
from conversion.polos_converter import SENTENCE_ENCODER_ARCHITECTURE, write_tokenizer_config
from conversion.publish import metadata_differences
from capeval.configuration import WEIGHTS_NAME

HUB_MODELS_DIR = Path(__file__).resolve().parent
# What ``CLIPModel.save_pretrained`` adds to the config of the fp32 model that convert_clip.py saves.
SAVED_DTYPE = "float32"
SAVED_ARCHITECTURES = ["CLIPModel"]
ENCODER_ARCHITECTURES = ["RobertaModel"]
"""The class of the sentence encoder's weights (the checkpoint's ``encoder.model.*``, which ``AutoModel`` loads)."""


def meta_openai_vit_b_32() -> nn.Module:
    """OpenAI CLIP ViT-B/32 (clip-anytorch) on the meta device."""
    import clip.model

    with torch.device("meta"):
        return clip.model.CLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12)


def meta_openai_vit_l_14() -> nn.Module:
    """OpenAI CLIP ViT-L/14 (clip-anytorch) on the meta device."""
    import clip.model

    with torch.device("meta"):
        return clip.model.CLIP(768, 224, 24, 1024, 14, 77, 49408, 768, 12, 12)


def meta_openclip_vit_l_14() -> nn.Module:
    """OpenCLIP ``ViT-L-14`` (the laion2b_s32b_b82k architecture) on the meta device."""
    import open_clip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return open_clip.create_model("ViT-L-14", device="meta")


class HubModel(NamedTuple):
    """A hub_models folder: the original architecture it was converted from and convert_clip's ``arch``."""

    build_original: Callable[[], nn.Module]
    arch: str


HUB_MODELS: dict[str, HubModel] = {
    "capeval/pacs-clip-vit-b-32": HubModel(meta_openai_vit_b_32, "openai"),
    "capeval/pacs-openclip-vit-l-14": HubModel(meta_openclip_vit_l_14, "openclip"),
    # PAC-S++: the plain OpenAI backbones, which is what convert_clip.py leaves once the LoRA factors are merged
    "capeval/pacspp-clip-vit-b-32": HubModel(meta_openai_vit_b_32, "openai"),
    "capeval/pacspp-clip-vit-l-14": HubModel(meta_openai_vit_l_14, "openai"),
}
POLOS_MODELS: dict[str, HubModel] = {
    # the authors' reprod checkpoint: its CLIP is the OpenAI ViT-B/32 the polos package's clip.load builds
    "capeval/polos-clip-vit-b-32": HubModel(meta_openai_vit_b_32, "openai"),
}


def write_metadata(state_dict: Mapping[str, torch.Tensor], arch: str, out_dir: Path,
                   bpe_path: Path | None = None) -> None:
    """Write the files convert_clip.py writes for ``state_dict``, except the weights (shapes are all it reads)."""
    config = clip_config_from_state_dict(state_dict, arch)
    config.dtype = SAVED_DTYPE
    config.architectures = SAVED_ARCHITECTURES
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    write_image_processor(out_dir, config.vision_config.image_size, DEFAULT_NORMALIZATION[arch])
    write_tokenizer(out_dir, bpe_path or default_bpe_path(), config.text_config.max_position_embeddings)


def write_encoder_metadata(out_dir: Path) -> None:
    """The Polos sentence encoder's ``config.json`` (its architecture, as ``save_pretrained`` writes it for the fp32
    weights the conversion saves) and the ``tokenizer_config.json`` the conversion writes."""
    from transformers import RobertaConfig

    config = RobertaConfig(**SENTENCE_ENCODER_ARCHITECTURE)
    config.dtype = SAVED_DTYPE
    config.architectures = ENCODER_ARCHITECTURES
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    write_tokenizer_config(out_dir)


def write_polos_metadata(state_dict: Mapping[str, torch.Tensor], arch: str, out_dir: Path) -> None:
    """A Polos folder's files besides the weights and the encoder's vocabulary: its config, ``clip/`` as the
    conversion writes it for the CLIP ``state_dict``, and ``encoder/``'s configs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    PolosConfig().save(out_dir)
    write_metadata(state_dict, arch, out_dir / CLIP_FOLDER)
    write_encoder_metadata(out_dir / ENCODER_FOLDER)


def generate(repo_id: str, out_dir: Path) -> None:
    """Write the metadata files of hub model ``repo_id`` into ``out_dir``."""
    if repo_id in POLOS_MODELS:
        hub_model = POLOS_MODELS[repo_id]
        write_polos_metadata(hub_model.build_original().state_dict(), hub_model.arch, out_dir)
        return
    hub_model = HUB_MODELS[repo_id]
    write_metadata(hub_model.build_original().state_dict(), hub_model.arch, out_dir)


def check(repo_id: str) -> list[str]:
    """Differences between the committed files of ``repo_id`` and freshly generated ones (subfolders included)."""
    with tempfile.TemporaryDirectory() as scratch:
        generated = Path(scratch)
        generate(repo_id, generated)
        names = sorted(path.relative_to(generated).as_posix() for path in generated.rglob("*")
                       if path.is_file() and path.name != WEIGHTS_NAME)
        return metadata_differences(generated, HUB_MODELS_DIR / repo_id, names)


def card_models() -> list[str]:
    """The models with original files whose card is in hub_models."""
    return [model for model, source in SOURCES.items() if source.files and (HUB_MODELS_DIR / model).is_dir()]


def card_with_originals(model: str) -> str:
    """The card of ``model`` with its list of original files regenerated from the table."""
    card = HUB_MODELS_DIR / model / "README.md"
    text = card.read_text(encoding="utf-8")
    if text.count(SECTION_START) != 1 or text.count(SECTION_END) != 1:
        raise ValueError(f"{card} needs one {SECTION_START} ... {SECTION_END} pair where the originals are listed")
    before, rest = text.split(SECTION_START)
    return before + card_section(model) + rest.split(SECTION_END)[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (or with ``--check`` compare) every hub model folder's metadata files and cards."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    failed = False
    for repo_id in [*HUB_MODELS, *POLOS_MODELS]:
        if args.check:
            differences = check(repo_id)
            for difference in differences:
                print(f"{repo_id}: {difference}")
            failed = failed or bool(differences)
        else:
            generate(repo_id, HUB_MODELS_DIR / repo_id)
            print(f"wrote {HUB_MODELS_DIR / repo_id}")
    for model in card_models():
        card = HUB_MODELS_DIR / model / "README.md"
        if args.check:
            if card.read_text(encoding="utf-8") != card_with_originals(model):
                print(f"{model}: README.md does not list the originals of capeval/originals.py")
                failed = True
        else:
            card.write_text(card_with_originals(model), encoding="utf-8")
            print(f"wrote {card}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
