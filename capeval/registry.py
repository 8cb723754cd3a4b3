"""Every metric family capeval implements and every model it downloads, in two tables: :data:`FAMILIES`, read by
the scorers, the ``evaluate`` adapter, the CLI, the training-loop integration and the benchmark runner, and
:data:`MODELS`, read by every model loader (through :func:`capeval.hub.pinned_revision`) and the region detectors.
Adding a metric adds one :class:`MetricFamily` to :data:`FAMILIES` and its models to :data:`MODELS`.

A pure data module: scorer classes are named by dotted path and imported on first use, so importing this module
imports no model code (and no other capeval module).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Dict, Mapping, NamedTuple, Optional, Tuple


class HubModel(NamedTuple):
    """A model capeval downloads from the Hugging Face hub."""

    revision: Optional[str]
    """The revision loaded when none is given, recorded in result signatures: a commit of a third-party repository,
    capeval's release tag of its own; ``None``: not pinned."""
    default_for: Tuple[str, ...] = ()
    """What loads it when given no model: metric families (``clipscore``) or a region detector
    (``detector:bottom-up``)."""


MODELS: Dict[str, HubModel] = {
    # OpenAI CLIP ViT-B/32: CLIP-S's model and EMScore's (clip.load("ViT-B/32") in both reference codes)
    "openai/clip-vit-base-patch32": HubModel("c7244be81152024ce0e99ac8d2e373a8953d9f9a", ("clipscore", "emscore")),
    "capeval/pacs-clip-vit-b-32": HubModel("v1.0", ("pacscore",)),
    "capeval/pacs-openclip-vit-l-14": HubModel("v1.0"),
    "capeval/pacspp-clip-vit-b-32": HubModel("v1.0"),
    "capeval/pacspp-clip-vit-l-14": HubModel("v1.0"),
    # capeval's BRIDGE on OpenAI CLIP ViT-B/32, trained by capeval: the paper's authors released no weights
    "capeval/bridge-clip-vit-b-32": HubModel("v1.0", ("bridge",)),
    # BRIDGE's template captioner, named by BRIDGE configs (with their captioner_revision); capeval knows no commit of
    # it to pin, so it is loaded at the revision the config names (the hub's main branch by default).
    "Salesforce/blip-image-captioning-large": HubModel(None),
    "capeval/tiger-scan-coco": HubModel("v1.0", ("tigerscore",)),
    "capeval/bottom-up-frcnn-r101-vg": HubModel("v1.0", ("detector:bottom-up",)),
    "capeval/vilbert-multi-task": HubModel("v1.0", ("vilbertscore",)),
    "capeval/vilbert-detector-x152-fpn": HubModel("v1.0", ("detector:x152-fpn",)),
    # the Polos authors' reprod checkpoint (SimCSE RoBERTa-base sentence encoder, OpenAI CLIP ViT-B/32, regressor)
    "capeval/polos-clip-vit-b-32": HubModel("v1.0", ("polos",)),
}
"""Hub id -> :class:`HubModel`: every model capeval loads by default or publishes."""


def default_model(user: str) -> str:
    """Hub id of the model ``user`` (a family name, or ``detector:<name>``) loads when given none."""
    for hub_id, model in MODELS.items():
        if user in model.default_for:
            return hub_id
    raise KeyError(f"no default model for {user!r}")


EMSCORE_VIEWS: Mapping[str, str] = {"emscore_video": "EMScore(X,V)", "emscore_refs": "EMScore(X,X*)",
                                    "emscore_video_refs": "EMScore(X,V,X*)"}
"""EMScore result prefix -> the reference's view: the candidate against the video, its references, or both."""
EMSCORE_KEYS: Tuple[str, ...] = ("figr_P", "figr_R", "figr_F", "cogr", "full_P", "full_R", "full_F")
"""The reference's keys within a view: fine-grained P/R/F, coarse-grained, and their means (full P/R/F)."""
EMSCORE_RESULT_KEYS: Mapping[str, str] = {
    f"{prefix}_{key.lower()}": f"{view}['{key}']" for prefix, view in EMSCORE_VIEWS.items() for key in EMSCORE_KEYS
}
"""capeval's EMScore results (``emscore_video_full_f``) -> the reference's (``EMScore(X,V)['full_F']``)."""


class BenchmarkMetric(NamedTuple):
    """One per-item result of a family's scorer, run as a benchmark metric."""

    result_key: str
    """Per-item result of the scorer (``ref_clip_scores``)."""
    uses_references: bool
    """Whether the scorer is called with the references."""
    label: str
    """Display name in benchmark reports (``RefCLIP-S``)."""


@dataclass(frozen=True)
class MetricFamily:
    """One metric family: its scorer, names, results, references mode and precision; its default model is in
    :data:`MODELS`."""

    name: str
    """Family name: the ``metrics/<name>`` folder, ``capeval score --metric <name>``."""
    scorer_path: str
    """``module:Class`` of the scorer."""
    label: str
    """Human-readable metric name (``CLIP-S``)."""
    description: str
    main_result: str
    """The scorer's ``metric_name`` (one of :attr:`result_keys`); the result signature starts with it."""
    result_keys: Mapping[str, str]
    """Corpus result (each also reported per item as ``<key>s``; reference-based ones only with references) -> how
    the reference code prints it (the CLI prints it so)."""
    references: str
    """``"optional"`` (reference-based results are added when references are given), ``"required"``, or ``"unused"``
    (a reference-free metric: giving references is an error)."""
    accelerator_precision: str
    """The precision the reference code runs at on an accelerator (on CPU every family runs fp32)."""
    benchmark_metrics: Mapping[str, BenchmarkMetric]
    """Benchmark metric name (``ref_clip_s``) -> which result it reads."""
    detector: Optional[str] = None
    """For a scorer that reads image regions: the region detector that makes them from images (a name of
    ``capeval.models.regions.detectors.DETECTORS``, whose default weights are the ``detector:<name>`` model of
    :data:`MODELS`); ``None`` for the others."""
    inputs: str = "images"
    """What the captions describe: ``"images"`` or ``"videos"`` (the scorer's first argument)."""
    also_videos: bool = False
    """For an image family: whether its scorer also scores videos, given as ``score(videos=..., candidates=...)`` in
    place of the images (PAC-S: video PAC-S, EMScore's arithmetic on its backbone)."""
    extra_options: Tuple[str, ...] = ()
    """Scorer keywords beyond the model, revision, device, batch size, precision and cache folder that every family
    takes; the ``evaluate`` module and ``capeval score`` pass them on."""

    @property
    def entries(self) -> Tuple[str, ...]:
        """The scorer's keywords for what the captions describe: ``("images",)``, ``("videos",)``, or ``("images",
        "videos")`` for an image family that also scores videos."""
        return (self.inputs, "videos") if self.also_videos else (self.inputs,)

    @property
    def default_model(self) -> str:
        """Hub id of the model the scorer loads when given none (a key of :data:`MODELS`)."""
        return default_model(self.name)

    @property
    def region_features(self) -> bool:
        """Whether the scorer reads image regions, so that precomputed region features (``--regions FILE``) can stand
        in for the images."""
        return self.detector is not None

    def scorer_class(self) -> type:
        """The scorer class (imported now)."""
        module, name = self.scorer_path.split(":")
        return getattr(importlib.import_module(module), name)


FAMILIES: Dict[str, MetricFamily] = {
    family.name: family
    for family in (
        MetricFamily("clipscore", "capeval.scorers.clipscore:CLIPScore", "CLIP-S", references="optional",
                     description="CLIP-S / RefCLIP-S (Hessel et al., 2021) on OpenAI CLIP ViT-B/32",
                     main_result="clip_score",
                     result_keys={"clip_score": "CLIPScore", "ref_clip_score": "RefCLIPScore"},
                     accelerator_precision="fp16",  # clip.load on CUDA
                     benchmark_metrics={"clip_s": BenchmarkMetric("clip_scores", False, "CLIP-S"),
                                        "ref_clip_s": BenchmarkMetric("ref_clip_scores", True, "RefCLIP-S")}),
        MetricFamily("pacscore", "capeval.scorers.clipscore:PACScore", "PAC-S", references="optional",
                     description="PAC-S / RefPAC-S (Sarto et al., 2023) on the PAC-S fine-tuned CLIP backbones",
                     main_result="pac_score",
                     result_keys={"pac_score": "PAC-S", "ref_pac_score": "RefPAC-S"},
                     accelerator_precision="fp32",  # its code calls model.float()
                     benchmark_metrics={"pac_s": BenchmarkMetric("pac_scores", False, "PAC-S"),
                                        "ref_pac_s": BenchmarkMetric("ref_pac_scores", True, "RefPAC-S")},
                     also_videos=True),
        MetricFamily("emscore", "capeval.scorers.emscore:EMScore", "EMScore", references="optional",
                     description="EMScore (Shi et al., 2022): fine- and coarse-grained matching of a video's CLIP "
                                 "frame embeddings and the caption's token embeddings, with and without references",
                     main_result="emscore_video_full_f",
                     result_keys=EMSCORE_RESULT_KEYS,
                     accelerator_precision="fp16",  # clip.load on CUDA
                     benchmark_metrics={"emscore": BenchmarkMetric("emscore_video_full_fs", False, "EMScore"),
                                        "ref_emscore": BenchmarkMetric("emscore_video_refs_full_fs", True,
                                                                       "EMScoreRef")},
                     inputs="videos", extra_options=("idf", "idf_corpus", "num_frames")),
        MetricFamily("bridge", "capeval.scorers.bridge:BRIDGEScore", "BRIDGE", references="unused",
                     description="BRIDGE (Sarto et al., 2024): CLIP-S joined by pseudo-captions of the image's "
                                 "template caption filled from CLIP grid features",
                     main_result="bridge_score",
                     result_keys={"bridge_score": "BRIDGE"},
                     accelerator_precision="fp32",  # no reference code exists; capeval trains and runs it in fp32
                     benchmark_metrics={"bridge": BenchmarkMetric("bridge_scores", False, "BRIDGE")}),
        MetricFamily("tigerscore", "capeval.scorers.tigerscore:TIGErScore", "TIGEr", references="required",
                     description="TIGEr (Jiang et al., 2019): SCAN text-to-image grounding of candidate and references",
                     main_result="tiger_score",
                     result_keys={"tiger_score": "TIGEr"},
                     accelerator_precision="fp32",  # SCAN as trained; the grounding maths is float64 NumPy
                     benchmark_metrics={"tiger": BenchmarkMetric("tiger_scores", True, "TIGEr")},
                     detector="bottom-up"),
        MetricFamily("vilbertscore", "capeval.scorers.vilbertscore:ViLBERTScore", "ViLBERTScore",
                     references="required",
                     description="ViLBERTScore P / R / F (Lee et al., 2020) on the 12-in-1 ViLBERT, from detector regions",
                     main_result="vilbert_f1",
                     result_keys={"vilbert_precision": "P", "vilbert_recall": "R", "vilbert_f1": "F"},
                     accelerator_precision="fp32",
                     benchmark_metrics={"vilbert_p": BenchmarkMetric("vilbert_precisions", True, "ViLBERTScore-P"),
                                        "vilbert_r": BenchmarkMetric("vilbert_recalls", True, "ViLBERTScore-R"),
                                        "vilbert_f": BenchmarkMetric("vilbert_f1s", True, "ViLBERTScore-F")},
                     detector="x152-fpn"),
        MetricFamily("polos", "capeval.scorers.polos:Polos", "Polos", references="required",
                     description="Polos (Wada et al., 2024): a regressor trained on human judgments over SimCSE "
                                 "sentence embeddings and CLIP ViT-B/32 features of image, candidate and references",
                     main_result="polos_score",
                     result_keys={"polos_score": "Polos"},
                     accelerator_precision="fp16",  # clip.load("ViT-B/32", device="cuda"); encoder and regressor fp32
                     benchmark_metrics={"polos": BenchmarkMetric("polos_scores", True, "Polos")}),
    )
}
"""Metric family name -> :class:`MetricFamily`."""

BENCHMARK_METRICS: Dict[str, Tuple[str, BenchmarkMetric]] = {
    name: (family.name, metric) for family in FAMILIES.values() for name, metric in family.benchmark_metrics.items()
}
"""Benchmark metric name -> (family name, which result it reads)."""


def family(name: str) -> MetricFamily:
    """The family called ``name``; ``KeyError`` naming the known families otherwise."""
    if name not in FAMILIES:
        raise KeyError(f"unknown metric {name!r}; known metrics: {', '.join(sorted(FAMILIES))}")
    return FAMILIES[name]


def scorer_class(name: str) -> type:
    """The scorer class of the family called ``name``."""
    return family(name).scorer_class()
