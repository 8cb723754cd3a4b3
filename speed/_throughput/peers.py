"""The table of throughput peers: each peer's workload, its run and its description in the report."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from _throughput.context import ChildContext
from _throughput.workloads import Flickr8kFiles, expert_workload, one_caption_workload

Run = Callable[[ChildContext], Dict[str, Any]]


def _run(module: str, function: str, workload: Optional[Callable[[Flickr8kFiles], Any]], *options: Any) -> Run:
    """A peer's run: ``_throughput.<module>.<function>(context[, workload], *options)``, its module imported when the
    peer runs (in its own process), so that reading this table imports no torch."""
    def run(context: ChildContext) -> Dict[str, Any]:
        target = getattr(importlib.import_module(f"_throughput.{module}"), function)
        return target(context, *([] if workload is None else [workload(context.selection)]), *options)

    return run


PEERS: Dict[str, Tuple[str, Run]] = {
    "capeval": ("expert", _run("capeval_peers", "run_capeval", expert_workload, False)),
    "torchmetrics": ("expert", _run("torchmetrics_peer", "run_torchmetrics", expert_workload)),
    "capeval-1cap": ("one-caption", _run("capeval_peers", "run_capeval", one_caption_workload, False)),
    "torchmetrics-1cap": ("one-caption", _run("torchmetrics_peer", "run_torchmetrics", one_caption_workload)),
    "capeval-ref-cold": ("expert", _run("capeval_peers", "run_capeval", expert_workload, True)),
    "capeval-ref-warm": ("expert", _run("capeval_peers", "run_capeval", expert_workload, True)),
    "capeval-images": ("expert", _run("capeval_peers", "run_capeval_images", expert_workload)),
    "capeval-stream": ("stream", _run("capeval_peers", "run_capeval_stream", None)),
    "reference-batched": ("expert", _run("reference_peers", "run_reference_batched", expert_workload)),
    "reference-batched-1cap": ("one-caption", _run("reference_peers", "run_reference_batched",
                                                   one_caption_workload)),
    "decode-limit": ("one-caption", _run("host_peers", "run_decode_limit", one_caption_workload)),
    "capeval-host": ("one-caption", _run("host_peers", "run_capeval_host", one_caption_workload)),
    "capeval-host-expert": ("expert", _run("host_peers", "run_capeval_host", expert_workload)),
    "per-pair": ("expert", _run("reference_peers", "run_per_pair", expert_workload)),
}
"""Peer name -> (workload, run), in run order (acceptance peers first, slow reference-style peers last). The
``-cold``/``-warm`` pair shares one on-disk cache folder (the context's ``cache_dir``), emptied before each cold run;
the other peers get no cache folder."""
HOST_ONLY_PEERS = ["decode-limit", "capeval-host", "capeval-host-expert"]
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
    "capeval-host-expert": "capeval, model forward stubbed (host only)",
    "per-pair": "reference style, per pair (batch 1)",
    "capeval-1cap": "capeval CLIP-S",
    "torchmetrics-1cap": "torchmetrics CLIPScore",
    "capeval-stream": "capeval CLIP-S, generator inputs",
}
"""Peer name -> its row's description in the report."""
