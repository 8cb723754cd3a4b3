"""BRIDGE throughput on the Flickr8k-Expert shape, end to end from image files, and its pseudo-caption forward's FLOP
rate.

    python speed/bridge_speed.py [--images N] [--device cpu|cuda] [--threads T] [--forward] [--work-dir DIR]
                                 [--json-out FILE]

Models, with seeded random weights, built once under ``--work-dir`` (``_models.py``): the full-size CLIP ViT-B/32 of
the other CLIP scripts, a BLIP-large captioner (the dimensions of ``Salesforce/blip-image-captioning-large``: ViT-L/16
at 384 px and a BERT-base decoder, with a vocabulary of the Flickr8k words) and a BRIDGE mapping network of capeval's
default architecture on that CLIP. Random weights cost what the real ones cost, except that the random captioner
rarely stops before ``max_length`` (20 tokens), where BLIP's real captions are shorter: its figure is an upper bound.
Part-of-speech tags: NLTK's averaged perceptron when its data is found (``--nltk-data``), else a rule-based stand-in
(articles, prepositions, ``-ing`` verbs, nouns otherwise); tagging is well under 1% of BRIDGE's time either way.

Workload: the Flickr8k-Expert shape (``_expert.py``): every distinct (image, candidate) pair of the first ``--images``
images (``images_224/``), scored with ``BRIDGEScore.score(paths, candidates)`` (BRIDGE takes no references), after a
warm-up item; timed from file paths and strings to scores. Reported: items/s, CPU seconds, peak memory (``VmHWM``), the
seconds inside BLIP's captioning. ``--forward`` then times the pseudo-caption forward alone (CLIP's grid, the mapping
network and CLIP's text tower over every template of a batch of images, templates made from the images' reference
captions), best of 3, with its model FLOPs (``_flops.py``).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from _expert import expert_items, expert_parser

FORWARD_IMAGES = 16


def tagger(nltk_data: Optional[Path]) -> Tuple[Optional[Callable[[List[str]], List[str]]], str]:
    """``(tagger, name)``: ``(None, "nltk-averaged-perceptron-eng")`` (BRIDGE's default) when NLTK's tagger data is
    found, else the rule-based stand-in."""
    import nltk
    from nltk.tag import RegexpTagger

    if nltk_data is not None:
        nltk.data.path.insert(0, str(nltk_data))
    try:
        nltk.data.find("taggers/averaged_perceptron_tagger_eng")
        return None, "nltk-averaged-perceptron-eng"
    except LookupError:
        pass
    rules = RegexpTagger([(r"^(a|an|the)$", "DT"), (r"^(in|on|at|with|of|near|by|under|over|through)$", "IN"),
                          (r"^(is|are|and)$", "CC"), (r".*ing$", "VBG"), (r".*", "NN")])

    def tag(words: List[str]) -> List[str]:
        return [label for _, label in rules.tag(words)]

    tag.__qualname__ = "speed-rule-based-stand-in"
    return tag, tag.__qualname__


def pseudo_caption_forward(scorer: Any, paths: List[str], references: List[Sequence[str]]) -> Dict[str, float]:
    """The pseudo-caption forward alone on the first images of ``paths``, one template per noun chunk of each image's
    first reference: best of 3 seconds and the model FLOP rate."""
    import torch
    from PIL import Image

    from _flops import bridge_pseudo_caption_macs
    from _measurement import forward_rate
    from capeval.models.bridge.modeling import TemplateBatch
    from capeval.models.bridge.templates import build_templates

    bridge, chunker = scorer.bridge, scorer.engine.pseudo_captions.chunker
    backbone, model = bridge.backbone, bridge.model
    pixels = torch.stack([backbone.image_transform.to_uint8(Image.open(path)) for path in paths[:FORWARD_IMAGES]])
    values = backbone.image_transform.normalize(pixels.to(backbone.device)).to(backbone.dtype)
    templates, owner, macs = [], [], 0
    for index, refs in enumerate(references[:len(pixels)]):
        built = build_templates(refs[0], chunker, backbone.text_transform, bridge.config.templates.unit_size)
        templates += built
        owner += [index] * len(built)
        macs += bridge_pseudo_caption_macs(Path(backbone.folder), bridge.config,
                                           [len(template.token_ids) for template in built])
    batch = TemplateBatch.collate(templates, owner).to(backbone.device)

    def forward() -> float:
        with torch.inference_mode():
            return float(model.pseudo_caption_embeddings(model.image_grid(values), batch)[0, 0])

    return forward_rate(forward, macs)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = expert_parser(" ".join(__doc__.split("\n\n")[0].split()), "capeval-bench",
                           "also time the pseudo-caption forward alone")
    parser.add_argument("--nltk-data", type=Path, help="NLTK data root holding taggers/averaged_perceptron_tagger_eng")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from PIL import Image

    from _measurement import peak_rss_mb, timed
    from _models import random_bridge_folder
    from capeval.models.bridge.templates import BlipCaptioner
    from capeval.scorers.bridge import BRIDGEScore

    if args.threads:
        torch.set_num_threads(args.threads)
    items, images, captions = expert_items(args.data_dir, args.images)
    folder = random_bridge_folder(args.work_dir, captions)
    pos_tagger, tagger_name = tagger(args.nltk_data)
    scorer = BRIDGEScore(model=folder, device=args.device, tagger=pos_tagger, tagger_name=tagger_name)
    captioning = {"seconds": 0.0}
    caption = BlipCaptioner.caption

    def timed_caption(self: BlipCaptioner, *args: Any, **kwargs: Any) -> List[str]:
        start = time.perf_counter()
        try:
            return caption(self, *args, **kwargs)
        finally:
            captioning["seconds"] += time.perf_counter() - start

    BlipCaptioner.caption = timed_caption  # type: ignore[method-assign]
    noise = np.random.default_rng(0).integers(0, 256, size=(224, 224, 3), dtype=np.uint8)
    scorer.score([Image.fromarray(noise)], ["a warm-up caption that is not in the workload"])
    captioning["seconds"] = 0.0
    paths = [str(args.data_dir / "images_224" / item.image) for item in items]
    seconds, cpu_seconds, _ = timed(lambda: scorer.score(paths, [item.candidate for item in items]))
    report: Dict[str, Any] = {
        "family": "bridge", "device": args.device, "threads": torch.get_num_threads(), "images": len(images),
        "items": len(items), "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "items_per_second": round(len(items) / seconds, 2), "captioning_seconds": round(captioning["seconds"], 2),
        "tagger": tagger_name, "computed": dict(scorer.engine.encoded), "peak_rss_mb": round(peak_rss_mb(), 1),
        "memory_cache_mb": round(scorer.engine.memory_cache_nbytes / 2**20, 1)}
    if args.forward:
        distinct = list(dict.fromkeys(paths))
        report["forward"] = {"pseudo_captions": pseudo_caption_forward(
            scorer, distinct, [next(item.references for item in items if item.image == Path(path).name)
                               for path in distinct])}
    print(json.dumps(report))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
