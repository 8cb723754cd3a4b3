"""Multiply-accumulates (MACs) of the model forwards the speed scripts time, computed from the models' configs and
the shapes they run on: a ViT image forward (CLIP), a CLIP text forward, the ViLBERT trunk, SCAN's bidirectional GRU,
region projection and grounding, and BRIDGE's pseudo-caption forward. One MAC is two FLOPs. Only products are
counted (linear layers, attention scores and weighted sums, recurrent gates): normalisation, activations and softmax
are a few percent of any of these forwards and are the work a matmul rate does not measure.

Nothing here imports torch: the configs are read as JSON (or as capeval's config dataclasses, which are plain data).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence


def transformer_layer_macs(tokens: int, width: int, intermediate: int, queries: int | None = None,
                           keys: int | None = None) -> int:
    """One post- or pre-norm transformer layer: Q, K, V and output projections, attention scores and weighted sum,
    and a two-layer MLP. ``queries`` rows ask (default: all ``tokens``), over ``keys`` rows (default: ``tokens``)."""
    queries = tokens if queries is None else queries
    keys = tokens if keys is None else keys
    return (2 * keys * width * width + 2 * queries * width * width + 2 * queries * keys * width
            + 2 * queries * width * intermediate)


def _clip_config(model_dir: Path) -> Mapping[str, Any]:
    return json.loads((model_dir / "config.json").read_text())


def vit_image_macs(model_dir: Path, pooled_last_layer: bool = False, projection: bool = True) -> int:
    """One image through the vision tower and projection, from the model's config: patch embedding, per layer QKV,
    attention scores and weighted sum, output projection and MLP, then the projection (``projection=False``: the
    grid of every token's states, as BRIDGE reads it). ``pooled_last_layer``: what capeval executes for CLIP-S, the
    last layer computing keys and values for every token but the rest for the class token only
    (capeval/models/clip/modeling.py)."""
    config = _clip_config(model_dir)
    vision, projection_dim = config["vision_config"], config["projection_dim"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    tokens, width, hidden = patches + 1, vision["hidden_size"], vision["intermediate_size"]
    patch_embedding = patches * vision.get("num_channels", 3) * vision["patch_size"] ** 2 * width
    layers = vision["num_hidden_layers"]
    last = transformer_layer_macs(tokens, width, hidden, queries=1 if pooled_last_layer else tokens)
    encoder = (layers - 1) * transformer_layer_macs(tokens, width, hidden) + last
    return patch_embedding + encoder + (width * projection_dim if projection else 0)


def clip_text_macs(model_dir: Path, tokens: int) -> int:
    """One text of ``tokens`` tokens through CLIP's text tower and the projection of its pooled row."""
    config = _clip_config(model_dir)
    text = config["text_config"]
    width = text["hidden_size"]
    return (text["num_hidden_layers"] * transformer_layer_macs(tokens, width, text["intermediate_size"])
            + width * config["projection_dim"])


def vilbert_macs(config: Any, text_tokens: int, regions: int) -> int:
    """One (regions, text) pair through the ViLBERT trunk as capeval runs it (``capeval.models.vilbert.modeling``:
    the text and visual layers before the last co-attention block, and every co-attention block): ``text_tokens``
    text rows (the task token included) and ``regions`` region rows (the global region included)."""
    text_width, visual_width, bi_width = config.hidden_size, config.v_hidden_size, config.bi_hidden_size
    embeddings = regions * (config.v_feature_size + 5) * visual_width
    text_layers = config.num_text_layers_used * transformer_layer_macs(text_tokens, text_width,
                                                                        config.intermediate_size)
    visual_layers = config.num_visual_layers_used * transformer_layer_macs(regions, visual_width,
                                                                           config.v_intermediate_size)
    co_attention = (3 * text_tokens * text_width * bi_width + 3 * regions * visual_width * bi_width  # Q, K, V
                    + 2 * 2 * text_tokens * regions * bi_width  # both directions: scores and weighted sums
                    + regions * bi_width * visual_width + text_tokens * bi_width * text_width  # biOutput
                    + 2 * regions * visual_width * config.v_intermediate_size  # visual feed-forward
                    + 2 * text_tokens * text_width * config.intermediate_size)  # text feed-forward
    return embeddings + text_layers + visual_layers + len(config.v_biattention_id) * co_attention


def gru_macs(config: Any, tokens: int) -> int:
    """SCAN's text encoder over ``tokens`` tokens (summed over captions): per token and direction, the input and
    hidden products of the three gates, ``3 * embed_size * (word_dim + embed_size)`` per layer."""
    macs = 0
    inputs = config.word_dim
    for _ in range(config.num_layers):
        macs += 2 * tokens * 3 * config.embed_size * (inputs + config.embed_size)
        inputs = 2 * config.embed_size
    return macs


def scan_region_macs(config: Any, regions: int) -> int:
    """SCAN's image encoder (``Linear(img_dim -> embed_size)``) over ``regions`` region rows."""
    return regions * config.img_dim * config.embed_size


def grounding_macs(config: Any, words: int, regions: int) -> int:
    """TIGEr's grounding of one caption of ``words`` words in ``regions`` regions: word-region cosines and the
    attention-weighted sums of regions per word (SCAN's t2i attention)."""
    return 2 * words * regions * config.embed_size


def bridge_pseudo_caption_macs(model_dir: Path, bridge: Any, template_lengths: Sequence[int]) -> int:
    """BRIDGE's pseudo-captions of one image (capeval/models/bridge/modeling.py): the image's grid (the vision tower
    without pooling), ``f_c`` over it, then per template of ``template_lengths`` tokens the mapping network (self-
    attention over the template, cross-attention to the grid, feed-forward) and CLIP's text tower."""
    config = _clip_config(model_dir)
    vision = config["vision_config"]
    grid_tokens = (vision["image_size"] // vision["patch_size"]) ** 2 + 1
    text_width = config["text_config"]["hidden_size"]
    grid = vit_image_macs(model_dir, projection=False) + grid_tokens * vision["hidden_size"] * text_width
    per_template = 0
    for length in template_lengths:
        self_attention = transformer_layer_macs(length, text_width, 0)
        cross_attention = transformer_layer_macs(length, text_width, bridge.feedforward_dim, keys=grid_tokens)
        per_template += bridge.num_layers * (self_attention + cross_attention) + clip_text_macs(model_dir, length)
    return grid + per_template
