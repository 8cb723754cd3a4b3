"""Tiny, deterministic BRIDGE parts for tests: a part-of-speech tagger trained on a tagged word list, a random BLIP
captioner whose vocabulary is that list, a random BRIDGE model on a tiny CLIP, and synthetic images."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from nltk.tag import DefaultTagger, UnigramTagger
from PIL import Image
from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

from capeval.models.bridge.configuration import BridgeConfig
from capeval.models.bridge.loading import save_bridge
from capeval.models.bridge.modeling import BridgeModel
from capeval.models.bridge.configuration import TemplateConfig
from capeval.models.clip.loading import load_backbone

TAGGED_WORDS: Dict[str, str] = {
    "a": "DT", "an": "DT", "the": "DT", "two": "CD", "man": "NN", "woman": "NN", "dog": "NN", "dogs": "NNS",
    "ball": "NN", "grass": "NN", "street": "NN", "car": "NN", "bike": "NN", "shirt": "NN", "tennis": "NN",
    "white": "JJ", "red": "JJ", "small": "JJ", "black": "JJ", "young": "JJ", "green": "JJ",
    "running": "VBG", "riding": "VBG", "plays": "VBZ", "is": "VBZ", "sits": "VBZ", "with": "IN", "on": "IN",
    "in": "IN", "of": "IN", "down": "RP", "and": "CC", "picture": "NN", ".": ".",
}
"""Penn Treebank tags of every word the tests' captions use."""

SEED = 77
US = 3


def word_tagger():
    """A deterministic tagger: the tag of each word in :data:`TAGGED_WORDS`, ``NN`` for any other word."""
    tagger = UnigramTagger([[(word, tag) for word, tag in TAGGED_WORDS.items()]], backoff=DefaultTagger("NN"))

    def tag(words: List[str]) -> List[str]:
        return [label for _, label in tagger.tag(words)]

    tag.__qualname__ = "test-unigram-tagger"
    return tag


def synthetic_images(count: int, seed: int = 0, size: int = 64) -> List[Image.Image]:
    """Random RGB images, each a different colour field with noise."""
    generator = np.random.default_rng(seed)
    images = []
    for index in range(count):
        base = generator.integers(0, 256, size=3)
        noise = generator.integers(-40, 40, size=(size, size, 3))
        images.append(Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8)))
    return images


def make_tiny_blip(folder: Path) -> Path:
    """A random BLIP captioner (and its processor) whose vocabulary is the tagged words, saved to ``folder``."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]"]
    vocab = specials + sorted(TAGGED_WORDS)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = BertTokenizer(vocab={token: index for index, token in enumerate(vocab)}, do_lower_case=True,
                              bos_token="[DEC]")
    image_processor = BlipImageProcessor(size={"height": 32, "width": 32})
    ids = {token: vocab.index(token) for token in specials}
    tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                initializer_range=1.0)
    text = dict(tiny, vocab_size=len(vocab), max_position_embeddings=64, encoder_hidden_size=32,
                bos_token_id=ids["[DEC]"], sep_token_id=ids["[SEP]"], eos_token_id=ids["[SEP]"],
                pad_token_id=ids["[PAD]"])
    torch.manual_seed(SEED)
    model = BlipForConditionalGeneration(BlipConfig(text_config=text, vision_config=dict(tiny, image_size=32,
                                                                                          patch_size=8)))
    model.text_decoder.generation_config.update(suppress_tokens=[ids[token] for token in specials])
    model.save_pretrained(folder)
    BlipProcessor(image_processor, tokenizer).save_pretrained(folder)
    return folder


def tiny_bridge_config(clip_dir: Path, blip_dir: Path, **overrides) -> BridgeConfig:
    templates = TemplateConfig(captioner=str(blip_dir), num_beams=2, max_length=12, min_length=6,
                               tagger="test-unigram-tagger", unit_size=US)
    settings = dict(backbone=str(clip_dir), num_heads=2, feedforward_dim=64, dropout=0.0, templates=templates)
    settings.update(overrides)
    return BridgeConfig(**settings)


def make_tiny_bridge(folder: Path, config: BridgeConfig, seed: int = SEED) -> Path:
    """A random BRIDGE model (mapping network and regulariser at a fixed seed) saved to ``folder``."""
    clip = load_backbone(config.backbone, device="cpu").model
    torch.manual_seed(seed)
    model = BridgeModel(config, clip)
    with torch.no_grad():  # a visible mask embedding, so that the mapping network's inputs depend on it
        model.mask_embedding.normal_(0, 0.5)
    return save_bridge(model, folder)
