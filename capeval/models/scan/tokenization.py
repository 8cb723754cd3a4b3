"""SCAN caption tokenisation, as the TIGEr code (CapEval ``data_util.cap_preprocessing``, SCAN ``data.py``) does it.

The original runs on Python 2: ``nltk.word_tokenize(str(caption).lower().decode('utf-8'))``. ``str.lower`` on a
Python 2 byte string lower-cases ASCII letters only, so "CAFÉ" becomes "cafÉ" (then ``<unk>``). ``word_tokenize`` is
Punkt sentence splitting (NLTK's ``punkt_tab`` English parameters) followed by NLTK's Treebank word tokenizer on each
sentence, so "a dog. a cat" keeps the first period as its own token. The ids are ``<start>``, one id per token
(``<unk>`` for words outside the vocabulary) and ``<end>``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Union

from capeval.hub import ModelNotAvailableError

VOCAB_NAME = "vocab.json"
START, END, UNKNOWN = "<start>", "<end>", "<unk>"
PUNKT_RESOURCE = "tokenizers/punkt_tab/english/"

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lower-case A-Z only, as Python 2 ``str.lower`` does on UTF-8 bytes."""
    return text.translate(_ASCII_LOWER)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def punkt_parameters(directory: Optional[Union[str, "os.PathLike[str]"]] = None):
    """NLTK's Punkt parameters from ``directory`` (a ``punkt_tab/<language>`` folder), or the English ``punkt_tab``
    model found by ``nltk.data.find``. A missing model is downloaded with ``nltk.download("punkt_tab")`` unless
    ``HF_HUB_OFFLINE`` is set; when it cannot be had, :class:`ModelNotAvailableError` says how to install it."""
    from nltk.data import find
    from nltk.tokenize.punkt import load_punkt_params

    if directory is not None:
        return _read_punkt_folder(Path(directory))
    try:
        return load_punkt_params(find(PUNKT_RESOURCE))
    except LookupError:
        if not _offline():
            import nltk

            nltk.download("punkt_tab", quiet=True)
            try:
                return load_punkt_params(find(PUNKT_RESOURCE))
            except LookupError:
                pass
    raise ModelNotAvailableError(
        "TIGEr tokenises captions with nltk.word_tokenize, which needs NLTK's 'punkt_tab' data (English), and it is "
        "not installed" + (" (HF_HUB_OFFLINE is set, so it was not downloaded)" if _offline() else "")
        + ". Install it once with network access: python -m nltk.downloader punkt_tab "
        "(or set NLTK_DATA to a folder holding tokenizers/punkt_tab/english/)"
    )


def _read_punkt_folder(folder: Path):
    """Punkt parameters from the four ``punkt_tab`` files of ``folder``, decoded as NLTK's ``load_punkt_params``
    decodes them (read here directly: NLTK only opens files under ``nltk.data.path``)."""
    from nltk.tabdata import PunktDecoder
    from nltk.tokenize.punkt import PunktParameters

    decoder, params = PunktDecoder(), PunktParameters()
    try:
        with (folder / "collocations.tab").open(encoding="utf-8") as handle:
            params.collocations = set(decoder.tab2tups(handle))
        with (folder / "sent_starters.txt").open(encoding="utf-8") as handle:
            params.sent_starters = decoder.txt2set(handle)
        with (folder / "abbrev_types.txt").open(encoding="utf-8") as handle:
            params.abbrev_types = decoder.txt2set(handle)
        with (folder / "ortho_context.tab").open(encoding="utf-8") as handle:
            params.ortho_context = decoder.tab2intdict(handle)
    except FileNotFoundError as error:
        raise ModelNotAvailableError(f"{folder} is not a punkt_tab model folder: {error}") from None
    return params


class ScanTokenizer:
    """Caption -> SCAN vocabulary ids, exactly as the original TIGEr preprocessing (see the module docstring)."""

    def __init__(self, word_to_id: Mapping[str, int], punkt=None) -> None:
        from nltk.tokenize import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktSentenceTokenizer

        missing = [token for token in (START, END, UNKNOWN) if token not in word_to_id]
        if missing:
            raise ValueError(f"SCAN vocabulary lacks the special tokens {missing}")
        self.word_to_id: Dict[str, int] = dict(word_to_id)
        self.punkt = punkt if punkt is not None else punkt_parameters()
        self._sentences = PunktSentenceTokenizer(self.punkt)
        self._words = NLTKWordTokenizer()
        self._fingerprint: Optional[str] = None

    @property
    def fingerprint(self) -> str:
        """Hash of the vocabulary, the Punkt parameters and the NLTK version: what decides the ids of a caption."""
        if self._fingerprint is None:
            import nltk

            params = self.punkt
            state = (nltk.__version__, sorted(self.word_to_id.items()), sorted(params.abbrev_types),
                     sorted(params.collocations), sorted(params.sent_starters), sorted(params.ortho_context.items()))
            self._fingerprint = hashlib.blake2b(repr(state).encode("utf-8"), digest_size=16).hexdigest()
        return self._fingerprint

    def __len__(self) -> int:
        return len(self.word_to_id)

    def tokenize(self, caption: str) -> List[str]:
        """``nltk.word_tokenize`` of the ASCII-lower-cased caption."""
        text = ascii_lower(caption)
        return [word for sentence in self._sentences.tokenize(text) for word in self._words.tokenize(sentence)]

    def encode(self, caption: str) -> List[int]:
        """``<start>`` + ids of the tokens (``<unk>`` when out of vocabulary) + ``<end>``."""
        vocab, unknown = self.word_to_id, self.word_to_id[UNKNOWN]
        return [vocab[START], *(vocab.get(word, unknown) for word in self.tokenize(caption)), vocab[END]]

    @classmethod
    def from_folder(cls, folder: Union[str, Path], punkt=None) -> "ScanTokenizer":
        return cls(read_vocab(Path(folder) / VOCAB_NAME), punkt)


def read_vocab(path: Union[str, Path]) -> Dict[str, int]:
    """A ``{word: id}`` JSON file whose ids are exactly ``0 .. len - 1``."""
    word_to_id = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(word_to_id, dict) or not all(isinstance(v, int) for v in word_to_id.values()):
        raise ValueError(f"{path}: a SCAN vocabulary is a JSON object mapping words to integer ids")
    if sorted(word_to_id.values()) != list(range(len(word_to_id))):
        raise ValueError(f"{path}: vocabulary ids must be exactly 0 .. {len(word_to_id) - 1}, each once")
    return word_to_id


def write_vocab(word_to_id: Mapping[str, int], folder: Union[str, Path]) -> Path:
    path = Path(folder) / VOCAB_NAME
    ordered = dict(sorted(word_to_id.items(), key=lambda item: item[1]))
    path.write_text(json.dumps(ordered, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    return path
