"""Polos items/s and peak memory of capeval against the ``polos`` wheel's own ``predict`` on the Flickr8k-Expert
shape, full-size model with random weights.

    python speed/polos_speed.py [--images N] [--device cpu|cuda] [--threads T] [--workers W] [--prepare-only]
                                [--original-json FILE] [--json-out FILE] [--data-dir DIR] [--work-dir DIR]

Model: a full-size Polos with seeded random weights (``_models.py``; same shapes and operations as the authors'
``reprod`` checkpoint, so the same cost), built once under ``--work-dir`` in the authors' layout (``reprod.zip``:
``hparams.yaml`` and the Lightning checkpoint, beside the RoBERTa-base folder its hparams name and a ViT-B/32
TorchScript archive) and converted with ``conversion/convert_polos.py``. The build runs in a child process, so that
the timed process's peak memory is the scoring's own.

Workload: the Flickr8k-Expert shape: every distinct (image, candidate) pair of the first ``--images`` images of
``images_224`` (default 20), each with the image's 5 references (``--data-dir``, default ``$CAPEVAL_FLICKR8K_DIR``,
else ``shared/data/flickr8k`` beside the repository). ``<work dir>/polos-workload.json`` lists the items, the
original's files and the warm-up item, for the wheel's runner (speed/README.md); ``--prepare-only`` builds the model
and writes it, then stops.

Timed: ``Polos(model, device=--device, num_workers=--workers).score(paths, candidates, references)`` from file paths
and strings to scores, after the model is loaded and a warm-up item (a seeded random image and captions outside the
workload) is scored. Reported: items, wall and CPU seconds (the process's threads; its decoding workers' separately),
items/s, peak memory (the process's ``VmHWM``; its decoding workers, forked from it, hold a few decoded images each,
and sampling their memory during the call slowed it by about 20% here), the MB of rows the engine's bounded memory
caches hold at the end (``memory_cache_mb``, for ``report.py``'s memory check) and the load average at the start.
``--original-json`` adds the wheel's figures on the same workload, the ratios, and how many per-item scores agree
with the wheel's at batch size 1 and at its default batch size.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from _paths import FLICKR8K_DIR

WORKLOAD_NAME = "polos-workload.json"
AGREEMENT = 1e-6
"""Per-item scores closer than this to the wheel's count as agreeing (the parity tests' tolerance)."""


def parse_arguments(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=20, help="Flickr8k-Expert images of images_224 to score")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument("--workers", type=int, help="capeval's decoding processes (default: capeval's own)")
    parser.add_argument("--data-dir", type=Path, default=FLICKR8K_DIR, help="the Flickr8k folder")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "capeval-bench",
                        help="where the model and the workload file are built and kept")
    parser.add_argument("--prepare-only", action="store_true", help="build the model and the workload file, then stop")
    parser.add_argument("--original-json", type=Path, help="the wheel's figures on the same workload")
    parser.add_argument("--json-out", type=Path, help="also write the results as JSON")
    arguments = parser.parse_args(argv)
    if min(arguments.images, arguments.threads) < 1:
        parser.error("--images and --threads must be positive")
    return arguments


def flickr8k_captions(data_dir: Path) -> List[str]:
    """Every caption of ``Flickr8k.token.txt`` (the text the random model's BPE is trained on)."""
    lines = (data_dir / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1].strip() for line in lines if "\t" in line]


def warm_up_image(work_dir: Path) -> Path:
    """A seeded random 224 x 224 JPEG outside the workload (written on first use)."""
    import numpy as np
    from PIL import Image

    path = work_dir / "polos-warm-up.jpg"
    if not path.is_file():
        pixels = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path)
    return path


def write_workload(arguments: argparse.Namespace, model: Path) -> Dict[str, Any]:
    """The items of the first ``--images`` images, the original's files, the converted ``model`` and the warm-up
    item, written to ``<work dir>/polos-workload.json`` for the wheel's runner. ``workload_id`` hashes the items."""
    from _expert import expert_items
    from _models import random_polos_original
    from _throughput.workloads import WARM_UP_CAPTION

    rated, images, _ = expert_items(arguments.data_dir, arguments.images)
    items = [{"image": str(arguments.data_dir / "images_224" / item.image), "candidate": item.candidate,
              "references": list(item.references)} for item in rated]
    missing = sorted({item["image"] for item in items if not Path(item["image"]).is_file()})
    if missing:
        raise SystemExit(f"{len(missing)} images missing, e.g. {missing[0]}")
    original = random_polos_original(arguments.work_dir, flickr8k_captions(arguments.data_dir))
    workload = {
        "workload_id": hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16],
        "images": len(images), "checkpoint": str(original / "reprod" / "reprod.ckpt"),
        "clip": str(original / "clip.pt"), "archive": str(original / "reprod.zip"), "model": str(model),
        "warm_up": {"image": str(warm_up_image(arguments.work_dir)), "candidate": WARM_UP_CAPTION,
                    "references": ["a reference that is not in the workload either", "and another one"]},
        "items": items,
    }
    (arguments.work_dir / WORKLOAD_NAME).write_text(json.dumps(workload, indent=1), encoding="utf-8")
    return workload


def prepare(arguments: argparse.Namespace) -> Path:
    """Build the original and its converted folder and write the workload file; returns the converted folder."""
    from _models import random_polos_folder

    arguments.work_dir.mkdir(parents=True, exist_ok=True)
    model = random_polos_folder(arguments.work_dir, flickr8k_captions(arguments.data_dir))
    write_workload(arguments, model)
    return model


def run_capeval(arguments: argparse.Namespace, workload: Dict[str, Any]) -> Dict[str, Any]:
    """Load the model, score the warm-up item, then time the workload in this process."""
    import torch

    from _measurement import peak_rss_mb, timed, worker_cpu_seconds
    from capeval import Polos

    torch.set_num_threads(arguments.threads)
    load, started = os.getloadavg()[0], time.strftime("%H:%M:%S")
    scorer = Polos(model=workload["model"], device=arguments.device, num_workers=arguments.workers)
    warm = workload["warm_up"]
    scorer.score([warm["image"]], [warm["candidate"]], [warm["references"]])
    items = workload["items"]
    images = [item["image"] for item in items]
    candidates = [item["candidate"] for item in items]
    references = [item["references"] for item in items]
    workers_before = worker_cpu_seconds()  # the decoding workers persist from the warm-up on
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seconds, cpu_seconds, result = timed(lambda: scorer.score(images, candidates, references))
    workers = worker_cpu_seconds() - workers_before
    return {"tool": "capeval", "device": arguments.device, "threads": torch.get_num_threads(),
            "images": workload["images"], "items": len(items), "seconds": seconds, "cpu_seconds": cpu_seconds,
            "worker_cpu_seconds": workers,
            "peak_rss_mb": peak_rss_mb(), "memory_cache_mb": round(scorer.engine.memory_cache_nbytes / 2**20, 1),
            "load_average_at_start": load,
            "started": started, "workload_id": workload["workload_id"], "scores": result["polos_scores"]}


def _row(tool: str, result: Dict[str, Any]) -> str:
    seconds = result["seconds"]
    cpu = result["cpu_seconds"] + result.get("worker_cpu_seconds", 0.0)
    return (f"{tool:34s} {result['items']:>6,d} {seconds:>8.1f} {cpu:>8.1f} {result['items'] / seconds:>8.2f} "
            f"{result['peak_rss_mb']:>8,.0f} {result['load_average_at_start']:>5.1f}")


def agreement(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """How many per-item scores are within :data:`AGREEMENT` of the other's, and the largest difference."""
    import numpy as np

    differences = np.abs(np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64))
    return (f"{int(np.sum(differences <= AGREEMENT))} of {len(differences)} items within {AGREEMENT:g} "
            f"(largest difference {differences.max():.1e})")


def report(ours: Dict[str, Any], original: Optional[Dict[str, Any]]) -> List[str]:
    """The table, and with the wheel's figures the ratios and the per-item agreement."""
    header = (f"{'tool':34s} {'items':>6s} {'wall s':>8s} {'CPU s':>8s} {'items/s':>8s} {'peak MB':>8s} "
              f"{'load':>5s}")
    lines = [f"{ours['images']} images, {ours['items']} items; capeval on {ours['device']}, {ours['threads']} threads",
             header, "-" * len(header), _row("capeval", ours)]
    if original is None:
        return lines
    lines.append(_row(f"wheel predict, batch size {original['batch_size']}", original))
    wheel_cpu = original["cpu_seconds"] + original.get("worker_cpu_seconds", 0.0)
    lines += ["", f"capeval {original['seconds'] / ours['seconds']:.2f}x the wheel by wall time, "
                  f"{wheel_cpu / (ours['cpu_seconds'] + ours['worker_cpu_seconds']):.2f}x per CPU second; peak "
                  f"memory {ours['peak_rss_mb']:,.0f} MB against {original['peak_rss_mb']:,.0f} MB"]
    return lines + score_agreement(ours["scores"], original)


def score_agreement(ours: Sequence[float], original: Dict[str, Any]) -> List[str]:
    """How capeval's per-item scores agree with the wheel's: at batch size 1 where the runner ran it, and at its
    default batch size (a line each)."""
    lines = []
    if "scores_batch_1" in original:
        lines.append(f"Per-item scores against the wheel at batch size 1 ({original['seconds_batch_1']:.1f} s): "
                     f"{agreement(ours, original['scores_batch_1'])}")
    return lines + [f"Per-item scores against the wheel at batch size {original['batch_size']} (they differ by design: "
                    "its layer mix normalises over the batch and it keeps the batch's fewest references): "
                    f"{agreement(ours, original['scores'])}"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    arguments = parse_arguments(argv)
    if arguments.prepare_only:
        print(f"model: {prepare(arguments)}\nworkload: {arguments.work_dir / WORKLOAD_NAME}")
        return
    # built in a child process, so that this process's peak memory is the scoring's own
    command = [sys.executable, str(Path(__file__).resolve()), "--prepare-only", "--images", str(arguments.images),
               "--data-dir", str(arguments.data_dir), "--work-dir", str(arguments.work_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    workload = json.loads((arguments.work_dir / WORKLOAD_NAME).read_text(encoding="utf-8"))
    original = None
    if arguments.original_json is not None:
        original = json.loads(arguments.original_json.read_text(encoding="utf-8"))
        if original["workload_id"] != workload["workload_id"]:
            raise SystemExit(f"--original-json is of another workload ({original['workload_id']}, this one "
                             f"{workload['workload_id']}): run the wheel's runner on {WORKLOAD_NAME} of this --images")
    ours = run_capeval(arguments, workload)
    print("\n".join(report(ours, original)))
    if arguments.json_out is not None:
        arguments.json_out.write_text(json.dumps({"capeval": ours, "original": original}, indent=1) + "\n",
                                      encoding="utf-8")


if __name__ == "__main__":
    main()
