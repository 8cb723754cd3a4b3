"""Full-size models with seeded random weights, as converted model folders, for the speed scripts.

Random weights cost exactly what the real ones cost (same shapes, same operations), so timings measured with these
models hold for the released ones: the OpenAI CLIP ViT-B/32 (``openai/clip-vit-base-patch32`` and the PAC-S ViT-B/32
backbone), TIGEr's SCAN with the published COCO vocabulary, the ViLBERT trunk of ``capeval/vilbert-multi-task`` and
Polos (RoBERTa-base sentence encoder, ViT-B/32, the authors' regressor). BRIDGE on that ViT-B/32 with a BLIP-large
captioner is here too. Each folder is built once under a work directory and
reused; nothing is downloaded and nothing is written into the repository. torch and the model code of each family are
imported by the function that builds it, so that a script imports only the family it times (and ``--help`` none).
"""
from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, List, Sequence, Tuple

from _paths import REPO_ROOT

if TYPE_CHECKING:
    import torch

VIT_B_32_ARGS = (512, 224, 12, 768, 32, 77, 49408, 512, 8, 12)
"""``clip.model.CLIP`` arguments of ViT-B/32: embed dim, image size, vision layers, vision width, patch size,
context length, vocabulary size, text width, text heads, text layers."""

SEED = 0

PUBLISHED_SCAN = REPO_ROOT / "hub_models" / "capeval" / "tiger-scan-coco"
"""The published SCAN folder of TIGEr, whose COCO vocabulary the random SCAN takes."""

VILBERT_VOCAB_SIZE = 30522
VILBERT_SPECIAL_TOKENS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
"""Token id -> special token, at their ``bert-base-uncased`` positions."""


POLOS_HIDDEN_SIZES = "2304,1152"
"""The regressor's hidden sizes in the authors' ``configs/polos-trainer.yaml``."""


def _save_weights(model: "torch.nn.Module", path: Path) -> None:
    """``model``'s state dict as a safetensors file."""
    from safetensors.torch import save_file

    save_file({name: value.contiguous() for name, value in model.state_dict().items()}, str(path))


def random_vit_b32_openai() -> "torch.nn.Module":
    """The seeded random-init ``clip.model.CLIP`` ViT-B/32 (fp32, eval mode), every weight an fp16 value as in the
    released OpenAI checkpoints (so that ``clip.load``'s fp16 conversion loses nothing, as with the real weights)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # clip-anytorch's pkg_resources deprecation notice
        from clip.model import CLIP
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = CLIP(*VIT_B_32_ARGS).float().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.half().float())
    return model


def random_vit_b32_folder(work_dir: Path) -> Path:
    """The converted folder of :func:`random_vit_b32_openai` under ``work_dir`` (built on first use)."""
    folder = work_dir / f"random-clip-vit-b-32-seed{SEED}-fp16-values"
    if (folder / "model.safetensors").is_file() and (folder / "tokenizer_config.json").is_file():
        return folder
    import torch

    from conversion.clip_converter import convert_checkpoint

    model = random_vit_b32_openai()
    work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = work_dir / f"random-clip-vit-b-32-seed{SEED}.pt"
    torch.save(model.state_dict(), checkpoint)
    convert_checkpoint(checkpoint, folder, arch="openai", model_name="ViT-B-32")
    checkpoint.unlink()
    return folder


def random_scan_folder(work_dir: Path) -> Path:
    """A converted SCAN folder under ``work_dir`` with the published dimensions and vocabulary and seeded random
    weights (built on first use)."""
    import torch

    from capeval.models.scan.configuration import ScanConfig
    from capeval.configuration import WEIGHTS_NAME
    from capeval.models.scan.modeling import ScanModel
    from capeval.models.scan.tokenization import VOCAB_NAME, read_vocab, write_vocab

    folder = work_dir / f"random-tiger-scan-seed{SEED}"
    if (folder / WEIGHTS_NAME).is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    vocab = read_vocab(PUBLISHED_SCAN / VOCAB_NAME)
    config = ScanConfig(vocab_size=len(vocab))
    torch.manual_seed(SEED)
    _save_weights(ScanModel(config), folder / WEIGHTS_NAME)
    config.save(folder)
    write_vocab(vocab, folder)
    return folder


def random_vilbert_folder(folder: Path, captions: Sequence[str]) -> Path:
    """A full-size ViLBERT trunk with seeded random weights in ``folder``, with a 30,522-token vocabulary made of the
    words of ``captions`` (built on first use)."""
    import torch

    from capeval.models.vilbert import VilbertConfig, VilbertModel

    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = VilbertConfig()
    _save_weights(VilbertModel(config), folder / "model.safetensors")
    config.save(folder)
    specials = [VILBERT_SPECIAL_TOKENS.get(index, f"[unused{index}]") for index in range(104)]
    vocab = caption_vocabulary(captions, specials, VILBERT_VOCAB_SIZE)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return folder


def caption_vocabulary(captions: Sequence[str], specials: Sequence[str], size: int) -> List[str]:
    """A WordPiece vocabulary of ``size`` entries: ``specials``, every word of ``captions`` (lower-cased), then
    filler ``##<n>`` pieces."""
    words = sorted({word for caption in captions for word in re.findall(r"[a-z]+|[^\sa-z]", caption.lower())})
    vocab = [*specials, *words]
    vocab += [f"##{index}" for index in range(size - len(vocab))]
    return vocab[:size]


BLIP_LARGE_VISION = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                         image_size=384, patch_size=16)
"""``Salesforce/blip-image-captioning-large``'s vision tower (ViT-L/16 at 384 px)."""
BLIP_TEXT = dict(vocab_size=30524, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, encoder_hidden_size=1024)
"""Its BERT-base text decoder with cross-attention to the vision tower."""
BLIP_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]"]


def random_blip_large_folder(folder: Path, captions: Sequence[str]) -> Path:
    """A BLIP-large captioner (``BlipForConditionalGeneration``, the dimensions of
    ``Salesforce/blip-image-captioning-large``) with seeded random weights and a 30,524-entry vocabulary of the words
    of ``captions``, with its processor, in ``folder`` (built on first use). With random weights the decoder rarely
    ends a caption early, so captions run to the decoding's ``max_length``: at most the real model's cost."""
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, \
        BlipProcessor

    if (folder / "config.json").is_file() and (folder / "vocab.txt").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    vocab = caption_vocabulary(captions, BLIP_SPECIALS, BLIP_TEXT["vocab_size"])
    ids = {token: vocab.index(token) for token in BLIP_SPECIALS}
    text = dict(BLIP_TEXT, bos_token_id=ids["[DEC]"], sep_token_id=ids["[SEP]"], eos_token_id=ids["[SEP]"],
                pad_token_id=ids["[PAD]"])
    torch.manual_seed(SEED)
    model = BlipForConditionalGeneration(BlipConfig(text_config=text, vision_config=BLIP_LARGE_VISION)).eval()
    model.save_pretrained(folder)
    tokenizer = BertTokenizer(vocab={token: index for index, token in enumerate(vocab)}, do_lower_case=True,
                              bos_token="[DEC]")
    size = BLIP_LARGE_VISION["image_size"]
    BlipProcessor(BlipImageProcessor(size={"height": size, "width": size}), tokenizer).save_pretrained(folder)
    return folder


def random_bridge_folder(work_dir: Path, captions: Sequence[str]) -> Path:
    """A BRIDGE model with capeval's default architecture (:class:`BridgeConfig`) and seeded random mapping network
    on the random ViT-B/32 of :func:`random_vit_b32_folder`, captioning with :func:`random_blip_large_folder`
    (built on first use)."""
    import torch

    from capeval.models.bridge.configuration import BridgeConfig, TemplateConfig
    from capeval.models.bridge.loading import save_bridge
    from capeval.models.bridge.modeling import BridgeModel
    from capeval.models.clip.loading import load_backbone

    folder = work_dir / f"random-bridge-seed{SEED}"
    if (folder / "model.safetensors").is_file():
        return folder
    clip_dir = random_vit_b32_folder(work_dir)
    blip_dir = random_blip_large_folder(work_dir / f"random-blip-large-seed{SEED}", captions)
    config = BridgeConfig(backbone=str(clip_dir), templates=TemplateConfig(captioner=str(blip_dir)))
    torch.manual_seed(SEED)
    return save_bridge(BridgeModel(config, load_backbone(str(clip_dir), device="cpu").model), folder)


def caption_bpe_merges(captions: Sequence[str], vocab_size: int) -> List[Tuple[str, str]]:
    """The merges of a byte-level BPE (RoBERTa's pre-tokenisation, no prefix space) trained on ``captions``, at most
    ``vocab_size`` tokens with the 256 byte symbols and RoBERTa's 5 special tokens."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(captions, vocab_size=vocab_size - 5, min_frequency=2, show_progress=False)
    merges = json.loads(tokenizer._tokenizer.to_str())["model"]["merges"]
    return [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in merges]


def random_polos_original(work_dir: Path, captions: Sequence[str]) -> Path:
    """A full-size Polos original with seeded random weights under ``work_dir``, in the authors' layout (built on
    first use by ``tests/fixtures/polos_checkpoints.py``'s ``build_polos_original``): ``roberta/`` (RoBERTa-base
    with a byte-level BPE trained on ``captions``), ``clip.pt`` (:func:`random_vit_b32_openai` as a TorchScript
    archive), ``reprod/hparams.yaml`` + ``reprod/reprod.ckpt`` (hidden sizes 2304,1152) and ``reprod.zip``."""
    folder = work_dir / f"polos-original-seed{SEED}"
    if (folder / "reprod.zip").is_file():
        return folder
    tests = str(REPO_ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from transformers import RobertaConfig

    from conversion.polos_converter import SENTENCE_ENCODER_ARCHITECTURE
    from fixtures.polos_checkpoints import build_polos_original

    merges = caption_bpe_merges(captions, SENTENCE_ENCODER_ARCHITECTURE["vocab_size"])
    build_polos_original(folder, SEED, encoder_config=RobertaConfig(**SENTENCE_ENCODER_ARCHITECTURE), merges=merges,
                         clip_model=random_vit_b32_openai(), hidden_sizes=POLOS_HIDDEN_SIZES)
    return folder


def random_polos_folder(work_dir: Path, captions: Sequence[str]) -> Path:
    """:func:`random_polos_original` converted by ``conversion/convert_polos.py`` under ``work_dir`` (built on
    first use)."""
    folder = work_dir / f"polos-random-seed{SEED}"
    if (folder / "config.json").is_file():
        return folder
    from conversion.convert_polos import main

    encoder = random_polos_original(work_dir, captions) / "roberta"
    main(["--checkpoint", str(encoder.parent / "reprod.zip"), "--encoder-config", str(encoder / "config.json"),
          "--vocab", str(encoder / "vocab.json"), "--merges", str(encoder / "merges.txt"), "--out", str(folder)])
    return folder
