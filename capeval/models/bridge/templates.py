"""BRIDGE's template captions: a BLIP caption of the image, its noun chunks, and one CLIP-token template per chunk
with that chunk masked.

The paper (Sarto et al., 2024, Sec. 3.2 and 4.1) captions each image with BLIP (ViT-L, COCO-finetuned), finds the
noun chunks with NLTK, and replicates the caption once per chunk with that chunk replaced by [MASK]; the mapping
network fills each mask with ``unit_size`` pseudo-tokens. The grammar, the tagger and the decoding settings are not
stated; each is a field of :class:`TemplateConfig`.

Words are found by a regular expression (no tokenizer data needed), tagged by the configured tagger (NLTK's
averaged perceptron by default, downloaded on first use), and chunked by NLTK's ``RegexpParser``. Leading
determiners of a chunk stay in the template ("a [MASK] running with a [MASK]").
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
from PIL import Image

from capeval.folder_kinds import check_folder_kind
from capeval.hub import ModelNotAvailableError, check_weights, resolve_model_folder, without_loading_bars
from capeval.models.bridge.configuration import DEFAULT_GRAMMAR, TemplateConfig
from capeval.models.clip.preprocessing import TextTransform, clean_text

Tagger = Callable[[List[str]], List[str]]
"""Part-of-speech tagger: words -> Penn Treebank tags, one per word."""

DETERMINER_TAGS = frozenset({"DT", "PDT", "WDT"})
"""Tags of leading chunk words kept in the template, outside the mask."""

_WORD = re.compile(r"\w+(?:[-']\w+)*|[^\w\s]")

_BLIP_FILES = ["config.json", "generation_config.json", "model.safetensors", "preprocessor_config.json",
               "processor_config.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "tokenizer.json"]


def perceptron_tagger() -> Tagger:
    """NLTK's averaged perceptron tagger; its data is downloaded on first use (not when ``HF_HUB_OFFLINE`` is set).
    ``ModelNotAvailableError`` when the data is absent and cannot be downloaded."""
    import nltk
    from nltk.tag import PerceptronTagger

    try:
        tagger = PerceptronTagger()
    except LookupError:
        offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}
        if offline or not nltk.download("averaged_perceptron_tagger_eng", quiet=True, raise_on_error=False):
            raise ModelNotAvailableError(
                "BRIDGE's noun chunks need NLTK's 'averaged_perceptron_tagger_eng' data, which is not installed and "
                "could not be downloaded. Run `python -m nltk.downloader averaged_perceptron_tagger_eng` with network "
                "access, or pass a tagger (words -> tags) to the scorer.") from None
        tagger = PerceptronTagger()
    return lambda words: [tag for _, tag in tagger.tag(words)]


@dataclass(frozen=True)
class NounChunk:
    """One noun chunk of a caption: the masked words (leading determiners excluded) and their character span."""

    text: str
    start: int
    end: int


class NounChunker:
    """Noun chunks of a caption by part-of-speech tags and a ``RegexpParser`` grammar."""

    def __init__(self, grammar: str = DEFAULT_GRAMMAR, tagger: Optional[Tagger] = None) -> None:
        import nltk

        self.parser = nltk.RegexpParser(grammar)
        self._tagger = tagger

    @property
    def tagger(self) -> Tagger:
        if self._tagger is None:
            self._tagger = perceptron_tagger()
        return self._tagger

    def chunks(self, caption: str) -> List[NounChunk]:
        """Chunks of ``caption`` in order; spans index into ``caption``."""
        matches = list(_WORD.finditer(caption))
        if not matches:
            return []
        words = [match.group() for match in matches]
        tags = self.tagger(words)
        if len(tags) != len(words):
            raise ValueError(f"the tagger returned {len(tags)} tags for {len(words)} words")
        tree = self.parser.parse([(str(index), tag) for index, tag in enumerate(tags)])
        found = []
        for subtree in tree:
            if not hasattr(subtree, "label"):
                continue
            members = [(int(index), tag) for index, tag in subtree.leaves()]
            while members and members[0][1] in DETERMINER_TAGS:
                members = members[1:]
            if members:
                start, end = matches[members[0][0]].start(), matches[members[-1][0]].end()
                found.append(NounChunk(caption[start:end], start, end))
        return found


@dataclass(frozen=True)
class MaskedTemplate:
    """One template in CLIP tokens: start token, prefix, ``unit_size`` masked positions, suffix, end token. Masked
    positions hold id 0 (their embeddings are replaced). ``chunk`` is the masked text ("" for the unmasked caption
    used when a caption has no noun chunk)."""

    token_ids: Tuple[int, ...]
    masked: Tuple[bool, ...]
    chunk: str


def _bpe(text_transform: TextTransform, text: str) -> List[int]:
    """BPE ids of ``text`` without start and end tokens."""
    if not text:
        return []
    return list(text_transform.tokenizer(text, add_special_tokens=False)["input_ids"])


def build_templates(caption: str, chunker: NounChunker, text_transform: TextTransform, unit_size: int
                    ) -> List[MaskedTemplate]:
    """One template per noun chunk of ``caption`` (cleaned as CLIP cleans text), that chunk masked; chunks whose
    template would exceed CLIP's context are left out. A caption with no (fitting) chunk gives one unmasked template
    of the whole caption."""
    text = clean_text(caption)
    start_id = text_transform.tokenizer.bos_token_id
    end_id = text_transform.end_token_id
    templates = []
    for chunk in chunker.chunks(text):
        prefix, suffix = _bpe(text_transform, text[:chunk.start].strip()), _bpe(text_transform, text[chunk.end:].strip())
        ids = [start_id, *prefix, *([0] * unit_size), *suffix, end_id]
        if len(ids) > text_transform.context_length:
            continue
        masked = [False] * (1 + len(prefix)) + [True] * unit_size + [False] * (len(suffix) + 1)
        templates.append(MaskedTemplate(tuple(ids), tuple(masked), chunk.text))
    if not templates:
        ids = text_transform.tokenize([text])[0]
        templates.append(MaskedTemplate(tuple(ids), (False,) * len(ids), ""))
    return templates


def captioner_folder(model: str, revision: Optional[str] = None) -> Path:
    """The folder of a BLIP captioner (hub id at ``revision``, the hub's main branch by default, or local folder)
    holding the files :meth:`BlipCaptioner.load` reads."""
    return resolve_model_folder(model, revision, _BLIP_FILES, "BlipForConditionalGeneration.save_pretrained")


class BlipCaptioner:
    """BLIP captions of PIL images with the configured prompt and decoding settings."""

    def __init__(self, model: Any, processor: Any, config: TemplateConfig) -> None:
        self.model = model.eval()
        self.processor = processor
        self.config = config

    @classmethod
    def load(cls, config: TemplateConfig, device: torch.device, dtype: torch.dtype = torch.float32
             ) -> "BlipCaptioner":
        """Load ``config.captioner`` (hub id or local folder of a ``BlipForConditionalGeneration``)."""
        from transformers import BlipForConditionalGeneration, BlipProcessor

        folder = captioner_folder(config.captioner, config.captioner_revision)
        check_folder_kind(folder, "blip")
        check_weights(folder)
        with without_loading_bars():
            model = BlipForConditionalGeneration.from_pretrained(folder, use_safetensors=True).to(device=device,
                                                                                                  dtype=dtype)
        return cls(model, BlipProcessor.from_pretrained(folder), config)

    @torch.inference_mode()
    def caption(self, images: Sequence[Image.Image]) -> List[str]:
        """One caption per image, the prompt removed."""
        model = self.model
        inputs = self.processor(images=list(images), text=[self.config.prompt] * len(images), return_tensors="pt")
        pixels = inputs["pixel_values"].to(device=model.device, dtype=model.dtype)
        generated = model.generate(pixel_values=pixels, input_ids=inputs["input_ids"].to(model.device),
                                   **self.config.decoding())
        captions = self.processor.batch_decode(generated, skip_special_tokens=True)
        prompt = self.config.prompt.strip().lower()
        return [caption.strip()[len(prompt):].strip() if caption.strip().lower().startswith(prompt)
                else caption.strip() for caption in captions]
