"""ViLBERTScore's text inputs: lower-cased text, BERT uncased WordPiece, ``[CLS] ... [SEP]``, cut or padded to 37.

The reference (``dataset.py`` of ViLBERTScore with pytorch-transformers 1.2.0's ``BertTokenizer``) lower-cases the
caption with Python's ``str.lower`` before tokenising, so a literal ``[SEP]`` in a caption is the three wordpieces
``[``, ``sep``, ``]``. The tokenizer cleans control characters, splits CJK characters and punctuation, strips accents
and maps words without a WordPiece split (emoji, words over 100 characters) to ``[UNK]``. The sequence is then
``tokens[:37]``: the tail is cut, so a caption of 36 or more wordpieces loses its ``[SEP]``. Padding ids are 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, NamedTuple, Sequence, Union

import numpy as np
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordPiece

MAX_LENGTH = 37
"""``CaptioningDataset(max_len=37)`` of the reference."""

CLS_TOKEN, SEP_TOKEN, UNK_TOKEN = "[CLS]", "[SEP]", "[UNK]"
PADDING_ID = 0
MAX_WORD_CHARACTERS = 100
"""BERT's ``max_input_chars_per_word``: longer words become ``[UNK]``."""


class EncodedTexts(NamedTuple):
    """Model inputs of N captions."""

    input_ids: np.ndarray
    """(N, max_length) int64."""
    attention_mask: np.ndarray
    """(N, max_length) int64, 1 on kept tokens."""
    truncated: np.ndarray
    """(N,) bool: the caption had more than ``max_length`` tokens and was cut."""


class VilbertTokenizer:
    """bert-base-uncased WordPiece over a ``vocab.txt`` (one token per line, id = line number)."""

    def __init__(self, vocab_file: Union[str, Path]) -> None:
        self.vocab_file = Path(vocab_file)
        tokenizer = Tokenizer(WordPiece.from_file(str(vocab_file), unk_token=UNK_TOKEN,
                                                  max_input_chars_per_word=MAX_WORD_CHARACTERS))
        tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                          strip_accents=None, lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tokenizer = tokenizer
        ids = [tokenizer.token_to_id(token) for token in (CLS_TOKEN, SEP_TOKEN, UNK_TOKEN)]
        if None in ids:
            raise ValueError(f"{vocab_file} lacks one of {CLS_TOKEN}, {SEP_TOKEN}, {UNK_TOKEN}")
        self.cls_id, self.sep_id, self.unk_id = ids

    def wordpiece_ids(self, captions: Sequence[str]) -> List[List[int]]:
        """Wordpiece ids of each caption after ``str.lower()``, without special tokens."""
        encodings = self._tokenizer.encode_batch([caption.lower() for caption in captions],
                                                 add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def encode(self, captions: Sequence[str], max_length: int = MAX_LENGTH) -> EncodedTexts:
        """``([CLS] + wordpieces + [SEP])[:max_length]`` of each caption, padded with id 0 and mask 0."""
        input_ids = np.full((len(captions), max_length), PADDING_ID, dtype=np.int64)
        attention_mask = np.zeros((len(captions), max_length), dtype=np.int64)
        truncated = np.zeros(len(captions), dtype=bool)
        for row, ids in enumerate(self.wordpiece_ids(captions)):
            sequence = [self.cls_id] + ids + [self.sep_id]
            truncated[row] = len(sequence) > max_length
            sequence = sequence[:max_length]
            input_ids[row, :len(sequence)] = sequence
            attention_mask[row, :len(sequence)] = 1
        return EncodedTexts(input_ids, attention_mask, truncated)
