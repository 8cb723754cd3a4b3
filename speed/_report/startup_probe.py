"""The process that ``startup.py`` starts, fresh, once per repeat: it times, from its first line, what a user's script
does before its first score, and prints the figures as one JSON line. Only the standard library is imported before
the clock, so that what it times is the import itself.

    python speed/_report/startup_probe.py '{"import": "torch"}'
    python speed/_report/startup_probe.py '{"scorer": "TIGErScore", "model": FOLDER, "item": ITEM, "nltk_data": ROOT}'

With ``scorer``: ``import_seconds`` (``import capeval`` and the scorer class), then with ``model``
``construction_seconds`` (the scorer made from that local folder on the CPU), with ``item`` ``first_score_seconds``
(from the first line to the first item's score: the import, the construction and the score) and, last,
``weights_seconds`` (every ``*.safetensors`` file of the folder read once: ``safetensors.torch.load_file``, each
tensor copied out of the mapping).
ITEM: ``{"image": FILE}``, ``{"regions": [K, D]}`` (seeded random region features, each box a quarter of a 640 x 480
image) or ``{"video": FILE}``, with ``"candidate"`` and ``"references"``. A failure prints the figures measured
before it with ``"error"``, and the process exits with status 1.
"""
import time

STARTED = time.perf_counter()

import json  # noqa: E402  (the clock starts first)
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Dict, List  # noqa: E402


def first_inputs(item: Dict[str, Any]) -> List[Any]:
    """The one image, region set or video of ``item``, as the scorer's ``score`` takes it."""
    if "image" in item:
        from PIL import Image

        return [Image.open(item["image"])]
    if "regions" in item:
        import numpy as np

        from capeval import RegionFeatures

        rows, dim = item["regions"]
        features = np.random.default_rng(0).random((rows, dim), dtype=np.float32) * 2
        boxes = np.tile(np.array([[0.0, 0.0, 320.0, 240.0]]), (rows, 1))
        return [RegionFeatures(features=features, boxes=boxes, image_size=(640.0, 480.0))]
    return [item["video"]]


def weights_seconds(folder: Path) -> float:
    """Seconds to read every safetensors file under ``folder`` once into memory: ``load_file`` maps the file, and
    each tensor is copied out of the mapping (as loading a state dict into a model copies it), which reads it."""
    from safetensors.torch import load_file

    started = time.perf_counter()
    for path in sorted(folder.rglob("*.safetensors")):
        for tensor in load_file(str(path)).values():
            tensor.clone()
    return time.perf_counter() - started


def main(spec: Dict[str, Any], figures: Dict[str, float]) -> None:
    """Fill ``figures`` stage by stage (so that a stage's failure leaves the earlier stages' figures)."""
    if "import" in spec:
        __import__(spec["import"])
        figures["import_seconds"] = time.perf_counter() - STARTED
        return
    import capeval

    scorer_class = getattr(capeval, spec["scorer"])
    figures["import_seconds"] = time.perf_counter() - STARTED
    if spec.get("model") is None:
        return
    if spec.get("nltk_data"):
        import nltk

        nltk.data.path.insert(0, spec["nltk_data"])
    started = time.perf_counter()
    scorer = scorer_class(model=spec["model"], device="cpu")
    figures["construction_seconds"] = time.perf_counter() - started
    item = spec.get("item")
    if item is not None:
        scorer.score(first_inputs(item), [item["candidate"]], [item["references"]])
        figures["first_score_seconds"] = time.perf_counter() - STARTED
    figures["weights_seconds"] = weights_seconds(Path(spec["model"]))


if __name__ == "__main__":
    measured: Dict[str, Any] = {}
    try:
        main(json.loads(sys.argv[1]), measured)
    except Exception as error:  # reported with the figures measured before it, then the process fails
        print(json.dumps({**measured, "error": f"{type(error).__name__}: {error}"}), flush=True)
        raise SystemExit(1) from None
    print(json.dumps(measured), flush=True)
