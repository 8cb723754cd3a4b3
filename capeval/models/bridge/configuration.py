"""BRIDGE's configuration: every choice the paper leaves open is a field here, saved as ``config.json`` beside the
trained weights and recorded in the result signature."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional

from capeval.configuration import JsonConfig

DEFAULT_GRAMMAR = "NP: {<DT>?<JJ.*>*<NN.*>+}"
"""Noun chunk grammar (NLTK ``RegexpParser``): optional determiner, adjectives, one or more nouns."""



@dataclass(frozen=True)
class TemplateConfig(JsonConfig):
    """How template captions are made (every field is recorded in the result signature)."""

    captioner: str = "Salesforce/blip-image-captioning-large"
    """BLIP captioner (``BlipForConditionalGeneration``): hub id or local folder. The paper's BLIP ViT-L finetuned on
    COCO captioning is this checkpoint."""
    captioner_revision: Optional[str] = None
    prompt: str = "a picture of "
    """Decoder prompt, removed from the caption (BLIP's COCO captioning prompt)."""
    num_beams: int = 3
    max_length: int = 20
    min_length: int = 5
    repetition_penalty: float = 1.0
    """Beam search 3, length 5 to 20 tokens, no repetition penalty: BLIP's own COCO captioning settings."""
    grammar: str = DEFAULT_GRAMMAR
    tagger: str = "nltk-averaged-perceptron-eng"
    """Name of the part-of-speech tagger (an injected tagger brings its own name)."""
    unit_size: int = 3
    """Pseudo-tokens per masked chunk (the paper's US = 3)."""

    def decoding(self) -> Dict[str, Any]:
        return {"num_beams": self.num_beams, "max_length": self.max_length, "min_length": self.min_length,
                "repetition_penalty": self.repetition_penalty}


@dataclass(frozen=True)
class BridgeConfig(JsonConfig):
    """Architecture and scoring settings of one BRIDGE model.

    Stated by the paper: frozen CLIP; grid = last-layer features of every vision token; linear ``f_c`` to the text
    width; a mapping network of 2 transformer layers (self-attention over the template, cross-attention to the
    grid); unit size 3; ``C = Linear(ReLU(Linear))``; BRIDGE = 0.5 * (CLIP-S + w * max(cos(t*, t), 0)). The other
    fields are choices documented in the model card.
    """

    sort_keys: ClassVar[bool] = True

    backbone: str = "openai/clip-vit-base-patch32"
    """Frozen CLIP backbone (hub id or local folder of a converted CLIP model)."""
    backbone_revision: Optional[str] = None
    visual_projection_first: bool = False
    """Whether ``visual.proj`` is applied to the grid before ``f_c`` (the paper's 50 x 768 grid says no)."""
    num_layers: int = 2
    num_heads: int = 8
    feedforward_dim: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    norm_first: bool = False
    """Post-norm decoder layers (``torch.nn.TransformerDecoderLayer`` with these settings is the Transformer of
    Vaswani et al., which the paper cites for the mapping network)."""
    position_embeddings: bool = True
    """Add CLIP's frozen position embeddings to the mapping network's inputs (its token embeddings are CLIP's
    frozen token embeddings, with a learnable mask embedding at masked positions)."""
    regularizer_hidden_dim: Optional[int] = None
    """Hidden width of ``C``; the CLIP projection width when ``None``."""
    normalize_before_mean: bool = True
    """Normalise each pseudo-caption embedding before averaging them into t*."""
    weight: float = 2.5
    """w of CLIP-S and of the pseudo-caption term."""
    prompt: str = "A photo depicts "
    """Prompt before candidate captions, as capeval's CLIP-S."""
    templates: TemplateConfig = field(default_factory=TemplateConfig)
