"""The table of throughput peers: each peer's workload, its run and its description in the report."""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from _throughput.capeval_peers import run_capeval, run_capeval_images, run_capeval_stream
from _throughput.context import ChildContext
from _throughput.host_peers import run_capeval_host, run_decode_limit
from _throughput.reference_peers import run_per_pair, run_reference_batched
from _throughput.torchmetrics_peer import run_torchmetrics
from _throughput.workloads import expert_workload, one_caption_workload

PEERS: Dict[str, Tuple[str, Callable[[ChildContext], Dict[str, Any]]]] = {
    "capeval": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), with_references=False)),
    "torchmetrics": ("expert", lambda c: run_torchmetrics(c, expert_workload(c.selection))),
    "capeval-1cap": ("one-caption", lambda c: run_capeval(c, one_caption_workload(c.selection), False)),
    "torchmetrics-1cap": ("one-caption", lambda c: run_torchmetrics(c, one_caption_workload(c.selection))),
    "capeval-ref-cold": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), True, c.cache_dir)),
    "capeval-ref-warm": ("expert", lambda c: run_capeval(c, expert_workload(c.selection), True, c.cache_dir)),
    "capeval-images": ("expert", lambda c: run_capeval_images(c, expert_workload(c.selection))),
    "capeval-stream": ("stream", run_capeval_stream),
    "reference-batched": ("expert", lambda c: run_reference_batched(c, expert_workload(c.selection))),
    "reference-batched-1cap": ("one-caption", lambda c: run_reference_batched(c, one_caption_workload(c.selection))),
    "decode-limit": ("one-caption", lambda c: run_decode_limit(c, one_caption_workload(c.selection))),
    "capeval-host": ("one-caption", lambda c: run_capeval_host(c, one_caption_workload(c.selection))),
    "per-pair": ("expert", lambda c: run_per_pair(c, expert_workload(c.selection))),
}
"""Peer name -> (workload, run), in run order (acceptance peers first, slow reference-style peers last). The
``-cold``/``-warm`` pair shares one on-disk cache folder, emptied before each cold run."""
HOST_ONLY_PEERS = ["decode-limit", "capeval-host"]
"""The peers of ``--host-only``."""

DESCRIPTIONS = {
    "capeval-images": "capeval image path only (distinct files)",
    "capeval": "capeval CLIP-S",
    "torchmetrics": "torchmetrics CLIPScore",
    "capeval-ref-cold": "capeval CLIP-S+RefCLIP-S, cold disk cache",
    "capeval-ref-warm": "capeval CLIP-S+RefCLIP-S, warm disk cache",
    "reference-batched": "clipscore.py loop (8 workers, no dedup)",
    "reference-batched-1cap": "clipscore.py loop (8 workers, no dedup)",
    "decode-limit": "decode limit (cpu_count worker processes)",
    "capeval-host": "capeval, model forward stubbed (host only)",
    "per-pair": "reference style, per pair (batch 1)",
    "capeval-1cap": "capeval CLIP-S",
    "torchmetrics-1cap": "torchmetrics CLIPScore",
    "capeval-stream": "capeval CLIP-S, generator inputs",
}
"""Peer name -> its row's description in the report."""
