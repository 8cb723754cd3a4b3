"""Reference preprocessing, reproduced exactly.

Images follow the transform of the reference code (OpenAI CLIP / OpenCLIP / PAC-S): ``Resize(224, BICUBIC)`` on the
shortest side with the long side ``int(224 * long / short)``, ``CenterCrop(224)`` with torchvision's half-to-even
offset rounding, ``convert("RGB")`` *after* the crop, ``ToTensor`` and ``Normalize``, on the image as
``Image.open`` gives it (``clipscore.py``, PAC-S's ``ImageDataset``). Polos's reference converts to RGB when it opens
the image, before the same transform (:attr:`ImageTransform.rgb_at_load`). The order matters for images that are not
RGB or grey: PIL resizes RGBA and LA with premultiplied alpha and palette and bilevel images with nearest-neighbour.
The PIL steps run in loader processes and produce uint8 tensors, which travel to the model's device as they are. There
:meth:`ImageTransform.normalize_by_table` looks each (channel, value) up in a table of the 768 possible results, made
on the CPU by torchvision's own float32 operations and cast to the model's dtype, as the reference casts its host
tensor. Computing the division on the device instead would not be the same: CUDA divides by a Python scalar as a
multiplication by its float32 reciprocal, which moves 3 of the 768 values by one fp16 ulp.

Text follows OpenAI's tokenizer: ftfy, HTML unescaped twice, whitespace collapsed, lower-cased, start token + at most
75 BPE tokens + end token (the end token survives truncation), features pooled at the end token.
"""
from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

import ftfy
import numpy as np
import torch
from PIL import Image

from capeval.inputs import InputError

PREPROCESSING_VERSION = "1"
"""Bumped whenever preprocessing output changes; part of every on-disk cache key (the transform's settings are too:
:meth:`ImageTransform.cache_settings`)."""

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageTransform:
    """The reference image transform for one backbone (size and normalisation constants from its config)."""

    size: int = 224
    mean: Tuple[float, float, float] = OPENAI_CLIP_MEAN
    std: Tuple[float, float, float] = OPENAI_CLIP_STD
    rgb_at_load: bool = field(default=False, repr=False)
    """Convert to RGB before the resize (Polos's ``Image.open(path).convert("RGB")``) rather than after the crop;
    left out of ``repr``, which keys the on-disk rows of the reference order as it always has (:meth:`cache_settings`
    keys both)."""

    def cache_settings(self) -> str:
        """What on-disk rows of images transformed here are keyed on: size, normalisation and conversion order."""
        return repr(self) + ("|rgb-at-load" if self.rgb_at_load else "")

    def resized_shape(self, width: int, height: int) -> Tuple[int, int]:
        """(width, height) after the shortest-side resize, with torchvision's ``int()`` truncation of the long side."""
        if width <= height:
            return self.size, int(self.size * height / width)
        return int(self.size * width / height), self.size

    def crop_box(self, width: int, height: int) -> Tuple[int, int, int, int]:
        """PIL crop box of the centre crop; offsets rounded half to even, as ``torchvision`` ``center_crop`` does."""
        top = int(round((height - self.size) / 2.0))
        left = int(round((width - self.size) / 2.0))
        return left, top, left + self.size, top + self.size

    def size_problem(self, width: int, height: int) -> Optional[str]:
        """Why a ``width`` x ``height`` image cannot go through this transform, or ``None``: a side of 0 pixels, or a
        shortest-side resize larger than ``PIL.Image.MAX_IMAGE_PIXELS`` (the limit capeval applies to every decoded
        image; about 1,783 times as long as wide for a 224 transform), which the reference would allocate in full
        before its centre crop (224 x 22,400,000 pixels, 15 GB, for a 1 x 100,000 image)."""
        if width < 1 or height < 1:
            return f"is {width}x{height} pixels: an image needs at least one pixel on each side"
        limit = Image.MAX_IMAGE_PIXELS
        resized_width, resized_height = self.resized_shape(width, height)
        if limit is None or resized_width * resized_height <= limit:
            return None
        return (f"is {width}x{height} pixels: CLIP's transform resizes its shorter side to {self.size} pixels, which "
                f"makes it {resized_width:,}x{resized_height:,} ({resized_width * resized_height:,} pixels) before "
                f"the centre crop, more than PIL.Image.MAX_IMAGE_PIXELS ({limit:,}); the longer side may be at most "
                f"about {limit / self.size ** 2:,.0f} times the shorter")

    def to_uint8(self, image: Image.Image, name: str) -> torch.Tensor:
        """Resize, crop and convert one PIL image (convert, resize and crop with :attr:`rgb_at_load`); returns a
        ``uint8`` tensor of shape ``(3, size, size)``. An image of a shape the transform cannot take
        (:meth:`size_problem`) raises :class:`InputError` naming it as ``name`` (``images[3] (path)``)."""
        width, height = image.size
        problem = self.size_problem(width, height)
        if problem is not None:
            raise InputError(f"{name} {problem}")
        if self.rgb_at_load:
            image = image.convert("RGB")
        resized = image.resize(self.resized_shape(width, height), Image.BICUBIC)
        cropped = resized.crop(self.crop_box(*resized.size)).convert("RGB")
        array = np.asarray(cropped, dtype=np.uint8)
        return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()

    def normalize(self, pixels: torch.Tensor) -> torch.Tensor:
        """``ToTensor`` scaling and ``Normalize`` of a uint8 batch ``(N, 3, H, W)``, in float32 as torchvision does
        (on the CPU: see the module docstring for why not elsewhere)."""
        values = pixels.to(torch.float32).div(255)
        mean = torch.as_tensor(self.mean, dtype=torch.float32, device=values.device).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=torch.float32, device=values.device).view(-1, 1, 1)
        return values.sub_(mean).div_(std)

    @functools.lru_cache(maxsize=8)
    def normalized_table(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``normalize`` of every uint8 value of every channel, computed on the CPU and cast to ``dtype``, on
        ``device``: a flat ``(3 * 256,)`` table, channel-major."""
        values = torch.arange(256, dtype=torch.uint8).expand(1, 3, 1, 256)
        return self.normalize(values).to(dtype).reshape(-1).to(device)

    def normalize_by_table(self, pixels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``normalize(pixels.cpu()).to(dtype)`` on ``pixels``' device, bit for bit, by table look-up."""
        table = self.normalized_table(dtype, pixels.device)
        offsets = torch.arange(0, table.numel(), 256, device=pixels.device).view(1, -1, 1, 1)
        return torch.take(table, pixels.long() + offsets)


_WHITESPACE = re.compile(r"\s+")


def needs_fixing(text: str) -> bool:
    """Whether ftfy and HTML unescaping can change ``text``. They cannot change printable ASCII without ``&``: each
    of ftfy's fixers acts only on ``&`` entities, non-ASCII characters (mojibake, C1 controls, ligatures, full-width
    forms, curly quotes, surrogates), line breaks, terminal escapes or control characters, and NFC leaves ASCII as it
    is (``tests/clip/test_parity.py`` checks this against clip's own cleaning). Skipping ftfy there makes the
    cleaning of a typical caption 4-8x faster (``speed/README.md``)."""
    return not (text.isascii() and text.isprintable() and "&" not in text)


def clean_text(text: str) -> str:
    """OpenAI CLIP's text cleaning: ftfy, HTML unescape twice, whitespace collapse, lower case."""
    if needs_fixing(text):
        text = html.unescape(html.unescape(ftfy.fix_text(text)))
    return _WHITESPACE.sub(" ", text).strip().lower()


class TextTransform:
    """Prompting, cleaning and tokenisation with OpenAI's truncation rule (the end token is kept)."""

    def __init__(self, tokenizer: Callable[..., Any], context_length: int = 77, end_token_id: int = 49407) -> None:
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.end_token_id = end_token_id

    def prepare(self, texts: Sequence[str], prompt: str) -> List[str]:
        """The exact strings the tokenizer sees: prompt + text, cleaned (each distinct text cleaned once)."""
        cleaned = {text: clean_text(prompt + text) for text in dict.fromkeys(texts)}
        return [cleaned[text] for text in texts]

    def tokenize(self, prepared: Sequence[str]) -> List[List[int]]:
        """Token ids of prepared texts, cut to ``context_length`` with the last kept token replaced by the end token."""
        return self.tokenize_with_cuts(prepared)[0]

    def tokenize_with_cuts(self, prepared: Sequence[str]) -> Tuple[List[List[int]], List[bool]]:
        """:meth:`tokenize`'s ids of prepared texts and whether each was cut (what :meth:`truncated` says of it), from
        one pass of the tokenizer."""
        encoded = self.tokenizer(list(prepared), add_special_tokens=True, truncation=False)["input_ids"]
        limit = self.context_length
        cut = [len(tokens) > limit for tokens in encoded]
        return [tokens[: limit - 1] + [self.end_token_id] if was_cut else tokens
                for tokens, was_cut in zip(encoded, cut)], cut

    def truncated(self, prepared: Sequence[str]) -> List[bool]:
        """Whether each prepared text exceeds the context. Each distinct text is tokenised once, and only if it has
        more UTF-8 bytes than the context can hold BPE tokens (each token spans at least one byte). The engine's own
        tokenisation cannot answer this: it sees only the texts whose rows are not cached."""
        long_texts = list(dict.fromkeys(text for text in prepared if len(text.encode("utf-8")) > self.context_length - 2))
        if not long_texts:
            return [False] * len(prepared)
        encoded = self.tokenizer(long_texts, add_special_tokens=True, truncation=False)["input_ids"]
        cut = {text for text, tokens in zip(long_texts, encoded) if len(tokens) > self.context_length}
        return [text in cut for text in prepared]


def pad_token_ids(ids: Sequence[Sequence[int]], length: Optional[int] = None) -> torch.Tensor:
    """Zero-pad token id lists to ``length``, or to the longest one when ``None`` (zeros as ``clip.tokenize`` pads;
    pooling uses the first end token)."""
    batch = np.zeros((len(ids), length or max(len(tokens) for tokens in ids)), dtype=np.int64)
    for row, tokens in enumerate(ids):  # NumPy's row assignment from a list: 25x faster than a tensor per row
        batch[row, : len(tokens)] = tokens
    return torch.from_numpy(batch)
