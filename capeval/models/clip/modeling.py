"""Inference forward passes of CLIP's two towers, computing only what the pooled features depend on.

Same weights and the same arithmetic as transformers' ``CLIPVisionTransformer`` / ``CLIPTextTransformer`` (pre-norm
encoder layers: ``x + attention(layer_norm1(x))``, then ``x + mlp(layer_norm2(x))``), with three differences in what
is computed, none in what is returned:

* the last encoder layer computes keys and values for every position but queries, attention output, MLP and the
  final layer norm only for the pooled row (the image's class token; the text's first end token), since no other row
  of that layer reaches the features (for ViT-B/32 images this skips 6.6% of the model's multiply-adds);
* intermediate results are written into buffers allocated once per batch and reused by every layer, and the
  activation runs in place, instead of allocating fresh tensors per operation;
* query, key and value projections write into one buffer.

Per-feature results equal transformers' forward to float32 rounding (tests/clip/test_towers.py).

In reduced precision (fp16, bf16) the towers instead run operation for operation as OpenAI CLIP's fp16 model
(``clip.load`` on CUDA) runs them, so that fp16 features equal the reference's bit for bit
(tests/clip/test_precision.py), on the CPU and, since the same operations on tensors of the same shapes select the same
kernels, on CUDA: every layer over every position, sequence-first, through ``torch.nn.functional``'s multi-head
attention with one packed query/key/value product and, for texts, the additive causal mask of ``-inf`` (not
``is_causal``, which selects another attention kernel on CUDA); layer norms in float32 rounded back (OpenAI's
``LayerNorm`` subclass); the text's final layer norm over every position before the end token's row is taken; and
the projections as products with the contiguous ``(width, dim)`` matrix (OpenAI's ``x @ self.proj``, rounded unlike
``nn.Linear``'s transposed-weight product). None of the float32 shortcuts above applies there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # transformers is imported by the model's loading, not by this module
    from transformers.models.clip.modeling_clip import CLIPEncoderLayer

FORWARD_VERSION = "1"
"""Changes whenever these forwards could return different floats in float32; on-disk feature caches are keyed by it
(through :func:`forward_version`)."""
REDUCED_PRECISION_FORWARD_VERSION = "3"
"""The same for fp16 and bf16 (2: layer norms in float32, projections and the last layer as OpenAI CLIP computes
them; 3: every layer through the same attention function and products as OpenAI CLIP's fp16 model)."""


def forward_version(dtype: torch.dtype) -> str:
    """The version of these forwards' floats in ``dtype``."""
    return FORWARD_VERSION if dtype == torch.float32 else REDUCED_PRECISION_FORWARD_VERSION


@dataclass
class _Workspace:
    """Buffers reused by every encoder layer of one forward pass over ``rows`` token rows of width ``width``."""

    qkv: torch.Tensor  # (3, rows, width)
    projected: torch.Tensor  # (rows, width)
    hidden: torch.Tensor  # (rows, intermediate)
    scratch: torch.Tensor  # (rows, intermediate)

    @classmethod
    def for_layer(cls, layer: CLIPEncoderLayer, rows: int, like: torch.Tensor) -> "_Workspace":
        width, intermediate = layer.mlp.fc1.in_features, layer.mlp.fc1.out_features
        return cls(like.new_empty(3, rows, width), like.new_empty(rows, width),
                   like.new_empty(rows, intermediate), like.new_empty(rows, intermediate))


def layer_norm(module: torch.nn.LayerNorm, inputs: torch.Tensor) -> torch.Tensor:
    """``module(inputs)`` computed in float32 and rounded back to the input's dtype, as OpenAI CLIP's ``LayerNorm``
    does under ``clip.load``'s fp16 model (a no-op difference in float32)."""
    if inputs.dtype == torch.float32:
        return module(inputs)
    return F.layer_norm(inputs.float(), module.normalized_shape, module.weight.float(), module.bias.float(),
                        module.eps).to(inputs.dtype)


def project(features: torch.Tensor, projection: torch.nn.Linear) -> torch.Tensor:
    """``projection(features)`` (bias-free): in float32 as ``nn.Linear``; in reduced precision as OpenAI CLIP's
    ``features @ proj`` with ``proj`` the contiguous ``(width, dim)`` matrix."""
    if features.dtype == torch.float32:
        return projection(features)
    return features @ projection.weight.t().contiguous()


def _linear(inputs: torch.Tensor, module: torch.nn.Linear, out: torch.Tensor) -> torch.Tensor:
    """``module(inputs)`` into ``out`` (the same ``addmm`` as ``torch.nn.Linear``)."""
    return torch.addmm(module.bias, inputs, module.weight.t(), out=out)


def _mlp_(hidden: torch.Tensor, layer: CLIPEncoderLayer, workspace: _Workspace) -> torch.Tensor:
    """``layer.mlp`` of ``hidden`` (2-D); the activation overwrites the fc1 output."""
    rows = hidden.shape[0]
    fc1 = _linear(hidden, layer.mlp.fc1, workspace.hidden[:rows])
    activation = layer.mlp.activation_fn
    if _is_quick_gelu(activation):  # x * sigmoid(1.702 * x), as OpenAI CLIP
        gate = torch.mul(fc1, 1.702, out=workspace.scratch[:rows]).sigmoid_()
        fc1.mul_(gate)
    else:
        fc1 = activation(fc1)
    return _linear(fc1, layer.mlp.fc2, workspace.projected[:rows])


def _encoder_layer(states: torch.Tensor, layer: CLIPEncoderLayer, workspace: _Workspace, causal: bool,
                   rows: Optional[torch.Tensor] = None, key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One encoder layer over ``states`` ``(batch, length, width)``.

    Without ``rows``: every position, updating ``states`` in place and returning them flattened. With ``rows``: only
    position ``rows[b]`` of each sequence ``b`` (keys and values still from every position; ``key_mask``
    ``(batch, 1, 1, length)`` says which may be attended), returned as ``(batch, width)``.
    """
    batch, length, width = states.shape
    attention = layer.self_attn
    flat = states.view(batch * length, width)
    normed = layer_norm(layer.layer_norm1, flat)
    for index, projection in ((1, attention.k_proj), (2, attention.v_proj)):
        _linear(normed, projection, workspace.qkv[index])
    if rows is None:
        residual, query_input = flat, normed
    else:
        positions = torch.arange(batch, device=states.device) * length + rows
        residual, query_input = flat[positions], normed[positions]
    query = _linear(query_input, attention.q_proj, workspace.qkv[0][: len(query_input)])
    query, key, value = (part.view(batch, -1, attention.num_heads, attention.head_dim).transpose(1, 2)
                         for part in (query, workspace.qkv[1], workspace.qkv[2]))
    attended = F.scaled_dot_product_attention(query, key, value, attn_mask=key_mask, is_causal=causal and rows is None,
                                              scale=attention.scale)
    attended = attended.transpose(1, 2).reshape(len(residual), width)
    residual.add_(_linear(attended, attention.out_proj, workspace.projected[: len(residual)]))
    return residual.add_(_mlp_(layer_norm(layer.layer_norm2, residual), layer, workspace))


def _run_layers(states: torch.Tensor, layers: torch.nn.ModuleList, causal: bool) -> _Workspace:
    """Run every layer but the last over all positions of ``states`` (updated in place); returns the workspace."""
    batch, length, _ = states.shape
    workspace = _Workspace.for_layer(layers[0], batch * length, states)
    for layer in layers[:-1]:
        _encoder_layer(states, layer, workspace, causal)
    return workspace


def _is_quick_gelu(activation: torch.nn.Module) -> bool:
    """Whether ``activation`` is transformers' ``QuickGELUActivation`` (transformers is already imported by then:
    it built the model)."""
    from transformers.activations import QuickGELUActivation

    return isinstance(activation, QuickGELUActivation)


def _activation(layer: CLIPEncoderLayer, hidden: torch.Tensor) -> torch.Tensor:
    """``layer.mlp``'s activation; QuickGELU written as OpenAI CLIP's ``x * torch.sigmoid(1.702 * x)``."""
    if _is_quick_gelu(layer.mlp.activation_fn):
        return hidden * torch.sigmoid(1.702 * hidden)
    return layer.mlp.activation_fn(hidden)


def _reference_order_layer(states: torch.Tensor, layer: CLIPEncoderLayer,
                           attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
    """One encoder layer over sequence-first ``states`` ``(length, batch, width)`` as OpenAI CLIP's
    ``ResidualAttentionBlock`` computes it: ``nn.MultiheadAttention``'s function with the packed ``in_proj`` (the
    rows of q, k and v stacked, as the original checkpoint stores them) and ``nn.Linear`` products on 3-D inputs."""
    attention, mlp = layer.self_attn, layer.mlp
    normed = layer_norm(layer.layer_norm1, states)
    packed_weight = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight])
    packed_bias = torch.cat([attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias])
    attended = F.multi_head_attention_forward(
        normed, normed, normed, attention.embed_dim, attention.num_heads, packed_weight, packed_bias, None, None,
        False, 0.0, attention.out_proj.weight, attention.out_proj.bias, training=False, need_weights=False,
        attn_mask=attention_mask)[0]
    states = states + attended
    hidden = F.linear(layer_norm(layer.layer_norm2, states), mlp.fc1.weight, mlp.fc1.bias)
    return states + F.linear(_activation(layer, hidden), mlp.fc2.weight, mlp.fc2.bias)


def _reference_order_states(states: torch.Tensor, layers: torch.nn.ModuleList, causal: bool) -> torch.Tensor:
    """Every layer over every position of ``states`` ``(batch, length, width)`` in reduced precision, as OpenAI
    CLIP's fp16 model runs them (:func:`_reference_order_layer`; texts under its additive mask, ``-inf`` above the
    diagonal); returns ``(batch, length, width)``."""
    length = states.shape[1]
    mask = None
    if causal:
        mask = torch.full((length, length), float("-inf"), device=states.device).triu_(1).to(states.dtype)
    sequence_first = states.transpose(0, 1)
    for layer in layers:
        sequence_first = _reference_order_layer(sequence_first, layer, mask)
    return sequence_first.transpose(0, 1)


def _encode(states: torch.Tensor, layers: torch.nn.ModuleList, rows: torch.Tensor, causal: bool,
            key_mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Run ``layers`` over ``states`` (consumed; float32) and return the last layer's output at ``rows``."""
    workspace = _run_layers(states, layers, causal)
    return _encoder_layer(states, layers[-1], workspace, causal, rows, key_mask)


def pooled_image_states(vision_model: torch.nn.Module, pixel_values: torch.Tensor) -> torch.Tensor:
    """``vision_model(pixel_values).pooler_output``: the post-layer-normed class token."""
    states = layer_norm(vision_model.pre_layrnorm, vision_model.embeddings(pixel_values)).contiguous()
    layers = vision_model.encoder.layers
    if states.dtype == torch.float32:
        rows = torch.zeros(states.shape[0], dtype=torch.long, device=states.device)
        pooled = _encode(states, layers, rows, causal=False, key_mask=None)
    else:
        pooled = _reference_order_states(states, layers, causal=False)[:, 0]
    return layer_norm(vision_model.post_layernorm, pooled)


def _every_position(states: torch.Tensor, layers: torch.nn.ModuleList, causal: bool) -> torch.Tensor:
    """Every layer over every position of ``states`` ``(batch, length, width)`` (consumed in float32), returning the
    last layer's output at every position."""
    if states.dtype != torch.float32:
        return _reference_order_states(states, layers, causal)
    states = states.contiguous()
    workspace = _run_layers(states, layers, causal)
    _encoder_layer(states, layers[-1], workspace, causal)
    return states


def image_grid_states(vision_model: torch.nn.Module, pixel_values: torch.Tensor) -> torch.Tensor:
    """``post_layernorm(vision_model(pixel_values).last_hidden_state)``: the post-layer-normed state of every vision
    token, class token first, shape ``(batch, 1 + patches, width)`` (row 0 is :func:`pooled_image_states`)."""
    states = layer_norm(vision_model.pre_layrnorm, vision_model.embeddings(pixel_values))
    return layer_norm(vision_model.post_layernorm, _every_position(states, vision_model.encoder.layers, causal=False))


def text_token_states(text_model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """``text_model(input_ids).last_hidden_state``: the final-layer-normed state of every position under the causal
    mask, shape ``(batch, length, width)``; what EMScore's ``encode_text(local=True)`` projects. A position never
    attends to the ones after it, so the states up to a row's end token do not depend on its padding."""
    states = text_model.embeddings(input_ids=input_ids)
    return layer_norm(text_model.final_layer_norm, _every_position(states, text_model.encoder.layers, causal=True))


def end_token_rows(input_ids: torch.Tensor, end_token_id: int) -> torch.Tensor:
    """Position of the first ``end_token_id`` in each id row; ``ValueError`` if a row has none."""
    is_end = input_ids == end_token_id
    if not bool(is_end.any(dim=1).all()):
        raise ValueError(f"every token row must contain the end token {end_token_id}")
    return is_end.int().argmax(dim=1)


def pooled_text_states(text_model: torch.nn.Module, input_ids: torch.Tensor, end_token_id: int) -> torch.Tensor:
    """``text_model(input_ids).pooler_output`` for id rows that each hold ``end_token_id``: the final-layer-normed
    state at the first end token, under the causal mask (positions after it cannot change it)."""
    rows = end_token_rows(input_ids, end_token_id)
    return pooled_text_states_from_embeddings(text_model, text_model.embeddings.token_embedding(input_ids), rows)


def pooled_text_states_from_embeddings(text_model: torch.nn.Module, token_embeddings: torch.Tensor,
                                       end_rows: torch.Tensor) -> torch.Tensor:
    """The text tower run on token embeddings ``(batch, length, width)`` instead of token ids: position embeddings
    added, causal mask, final layer norm, pooled at ``end_rows`` (the end token's position in each row), exactly as
    :func:`pooled_text_states` (which calls this with the token embeddings of its ids).

    When gradients are needed (grad mode on and the embeddings require grad, as in BRIDGE's training, where the
    embeddings hold a mapping network's outputs) the layers run as transformers' own ``CLIPEncoderLayer`` modules
    over every position; otherwise through the pruned in-place forward. Both give the same values to float32
    rounding (tests/bridge/test_bridge.py).
    """
    states = text_model.embeddings(inputs_embeds=token_embeddings)
    layers = text_model.encoder.layers
    if torch.is_grad_enabled() and states.requires_grad:
        length = states.shape[1]
        causal = torch.full((length, length), float("-inf"), dtype=states.dtype, device=states.device).triu(1)
        for layer in layers:
            states = layer(states, causal[None, None])
        pooled = states[torch.arange(states.shape[0], device=states.device), end_rows]
        return text_model.final_layer_norm(pooled)
    if states.dtype != torch.float32:
        normed = layer_norm(text_model.final_layer_norm, _reference_order_states(states, layers, causal=True))
        return normed[torch.arange(len(end_rows), device=normed.device), end_rows]
    states = states.contiguous()
    positions = torch.arange(states.shape[1], device=states.device)
    key_mask = (positions[None, :] <= end_rows[:, None])[:, None, None, :]
    pooled = _encode(states, layers, end_rows, causal=True, key_mask=key_mask)
    return layer_norm(text_model.final_layer_norm, pooled)
