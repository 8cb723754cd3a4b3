"""EMScore's functional core against the original code (ShiYaya/emscore): goldens in tests/data/emscore.

The goldens hold the original's per-item outputs on a tiny random CLIP together with the inputs it matched (raw
token outputs, token ids, frame embeddings, IDF tables); see tests/data/emscore/NOTE.md. Every value computed here
from those inputs must equal the original's within 1e-5 wherever the original is defined and independent of its
batch; where it is not, the tests check the result the module defines.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest

from capeval.functional import emscore as F
from fixtures.paths import TESTS_DATA

DATA = TESTS_DATA / "emscore"
GOLDENS = np.load(DATA / "goldens.npz")
META = json.loads((DATA / "goldens.json").read_text())
TOLERANCE = 1e-5
CONFIGS = list(META["configs"])
IDF_CONFIGS = [name for name, config in META["configs"].items() if config["idf"] is not False]
START, END = 49406, 49407


def _split(values: np.ndarray, offsets: np.ndarray) -> List[np.ndarray]:
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


TOKEN_IDS = dict(zip(META["texts"], _split(GOLDENS["token_ids"], GOLDENS["token_offsets"])))
TOKEN_EMBEDDINGS = dict(zip(META["texts"], _split(GOLDENS["token_embeddings"], GOLDENS["token_offsets"])))
FRAMES = _split(GOLDENS["frames"], GOLDENS["frame_offsets"])
ITEMS = META["items"]


def idf_of(config: str) -> F.IdfWeights:
    """The IDF table the original matched with (as em_cos_score received it), or uniform weights."""
    if META["configs"].get(config, {}).get("idf") is False:
        return F.UNIFORM
    keys, values = GOLDENS[f"{config}/idf_keys"], GOLDENS[f"{config}/idf_values"]
    return F.IdfWeights(dict(zip(keys.tolist(), values.tolist())), float(GOLDENS[f"{config}/idf_unseen"]))


def caption_of(text: str, idf: F.IdfWeights) -> F.Caption:
    return F.caption(TOKEN_EMBEDDINGS[text], idf(TOKEN_IDS[text]))


def scores_of(config: str, index: int, idf: Optional[F.IdfWeights] = None) -> F.ItemScores:
    """capeval's scores of item ``index`` with the inputs of ``config``."""
    setup, item = META["configs"][config], ITEMS[index]
    idf = idf_of(config) if idf is None else idf
    target = F.video(FRAMES[index]) if setup["video"] else None
    references = [caption_of(text, idf) for text in item["references"]] if setup["references"] else None
    return F.item_scores(caption_of(item["candidate"], idf), target, references)


def as_table(scores: F.ItemScores) -> np.ndarray:
    """(views, keys) in the goldens' layout, NaN where a view is absent."""
    table = np.full((len(F.VIEWS), len(F.KEYS)), np.nan)
    for v, view in enumerate(F.VIEWS):
        if view in scores.scores:
            table[v] = scores.scores[view]
    return table


def test_goldens_layout_matches_module() -> None:
    assert tuple(META["views"]) == F.VIEWS and tuple(META["keys"]) == F.KEYS
    assert META["reference"]["commit"].startswith("20bce0a")


@pytest.mark.parametrize("config", CONFIGS)
def test_items_match_original_scored_alone(config: str) -> None:
    """Every view and key of every item equals the original scoring that item in a call of its own."""
    golden = GOLDENS[f"{config}/alone"]
    ours = np.stack([as_table(scores_of(config, i)) for i in range(len(ITEMS))])
    assert np.array_equal(np.isnan(ours), np.isnan(golden))
    assert np.nanmax(np.abs(ours - golden)) < TOLERANCE
    assert np.isfinite(golden[:, :, :]).sum() >= len(ITEMS) * 7  # real values were compared


@pytest.mark.parametrize("config", [name for name in CONFIGS if META["configs"][name]["references"]])
def test_each_reference_matches_original_pair(config: str) -> None:
    """Each (candidate, reference) pair equals the original scoring that pair alone; the item's figr_* and cogr are
    the maxima over its pairs taken separately."""
    idf = idf_of(config)
    pairs = iter(GOLDENS[f"{config}/pairs"])
    for index, item in enumerate(ITEMS):
        candidate = caption_of(item["candidate"], idf)
        ours = [F.with_full(F.reference_match(candidate, caption_of(text, idf)).values) for text in item["references"]]
        golden = np.stack([next(pairs) for _ in item["references"]])
        assert np.abs(np.stack(ours) - golden).max() < TOLERANCE
        item_values = scores_of(config, index).scores[F.REFERENCES]
        assert np.abs(item_values[:4] - golden[:, :4].max(axis=0)).max() < TOLERANCE


def test_full_score_of_references_is_not_the_papers_max_of_full_scores() -> None:
    """Eq. 8 of the PAC-S paper maximises the full score over references; the code maximises fine and coarse
    separately, which is larger wherever the two maxima come from different references."""
    pairs = iter(GOLDENS["refs_video_idf/pairs"])
    gaps = []
    for index, item in enumerate(ITEMS):
        golden_pairs = np.stack([next(pairs) for _ in item["references"]])
        code_full_f = GOLDENS["refs_video_idf/alone"][index, 1, 6]
        gaps.append(code_full_f - golden_pairs[:, 6].max())
    assert min(gaps) > -TOLERANCE
    assert [index for index, gap in enumerate(gaps) if gap > 1e-3] == [0, 2, 4]  # fine F and coarse from two refs
    assert gaps[4] == pytest.approx(0.0098, abs=1e-4)


def _padded_video_values(candidate: F.Caption, frames: np.ndarray, frames_padded: bool,
                         tokens_padded: bool) -> np.ndarray:
    """The original's video-view figr_P/R/F and cogr for an item whose frames (tokens) are zero-padded in its batch:
    a padded side contributes a similarity 0 to every maximum over it."""
    sim = candidate.tokens @ frames.T
    word_precision = sim.max(axis=1)
    word_recall = sim.max(axis=0)
    if frames_padded:
        word_precision = np.maximum(word_precision, 0)
    if tokens_padded:
        word_recall = np.maximum(word_recall, 0)
    precision = (word_precision * candidate.weights / candidate.weights.sum()).sum()
    recall = word_recall.sum() / len(frames)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = 2 * precision * recall / (precision + recall)
    return np.array([precision, recall, f, candidate.pooled @ F.video(frames).pooled])


@pytest.mark.parametrize("config", [name for name in CONFIGS if META["configs"][name]["video"]])
def test_original_batch_dependence_is_its_zero_padding(config: str) -> None:
    """Scored in one batch, the original pads frames and candidate tokens with zeros that enter its maxima: its
    values then differ from the item's own (those of capeval) exactly as max(., 0) of the padded side predicts."""
    idf = idf_of(config)
    batched, alone = GOLDENS[f"{config}/batched"][:, 0, :4], GOLDENS[f"{config}/alone"][:, 0, :4]
    most_frames = max(len(frames) for frames in FRAMES)
    longest = max(len(TOKEN_IDS[item["candidate"]]) for item in ITEMS)
    differing = 0
    for index, item in enumerate(ITEMS):
        candidate = caption_of(item["candidate"], idf)
        expected = _padded_video_values(candidate, FRAMES[index], len(FRAMES[index]) < most_frames,
                                        len(TOKEN_IDS[item["candidate"]]) < longest)
        assert np.allclose(batched[index], expected, atol=TOLERANCE, equal_nan=True)
        ours = F.video_match(candidate, F.video(FRAMES[index])).values
        assert np.abs(ours - alone[index]).max() < TOLERANCE
        differing += not np.allclose(batched[index], ours, atol=TOLERANCE)
    assert differing >= 5  # random weights: many token-frame similarities are negative
    assert np.isnan(batched[4, 2])  # the item with all similarities negative: padded P = R = 0, F = 0/0


@pytest.mark.parametrize("config", ["refs_idf", "refs_noidf"])
def test_original_batch_of_references_equals_items_alone(config: str) -> None:
    """Text-text similarities of the tiny model are all positive, so the references' zero padding changes nothing."""
    assert np.abs(GOLDENS[f"{config}/batched"] - GOLDENS[f"{config}/alone"])[:, 1].max() < TOLERANCE


def test_frames_are_used_as_given() -> None:
    """The original's feature-cache path does not normalise frame rows (item 3 has unnormalised rows)."""
    assert ITEMS[3]["frames"] == "unnormalised"
    norms = np.linalg.norm(FRAMES[3], axis=1)
    assert norms.min() < 0.9 and norms.max() > 1.5
    candidate = caption_of(ITEMS[3]["candidate"], idf_of("video_idf"))
    golden = GOLDENS["video_idf/alone"][3, 0, :4]
    as_given = F.video_match(candidate, F.video(FRAMES[3])).values
    normalised = F.video_match(candidate, F.video(FRAMES[3] / norms[:, None])).values
    assert np.abs(as_given - golden).max() < TOLERANCE
    assert np.abs(normalised - golden)[:2].max() > 1e-2


def _documents(texts: List[str]) -> List[np.ndarray]:
    return [TOKEN_IDS[text] for text in texts]


def _corpus() -> List[np.ndarray]:
    return _split(GOLDENS["corpus_token_ids"], GOLDENS["corpus_token_offsets"])


def idf_corpus_of(config: str) -> List[np.ndarray]:
    """The documents the original's IDF came from: all references flattened, else the candidates, or the corpus."""
    setup = META["configs"][config]
    if setup["idf"] == "corpus":
        return _corpus()
    if setup["references"]:
        return _documents([text for item in ITEMS for text in item["references"]])
    return _documents([item["candidate"] for item in ITEMS])


@pytest.mark.parametrize("config", IDF_CONFIGS + ["nan_one_reference", "nan_one_candidate"])
def test_idf_table_matches_original(config: str) -> None:
    if config == "nan_one_reference":
        documents = _documents(["a brown dog is running across the grass"])
    elif config == "nan_one_candidate":
        documents = _documents(["a dog runs"])
    else:
        documents = idf_corpus_of(config)
    ours, golden = F.idf_weights(documents), idf_of(config)
    assert sorted(ours.table) == sorted(golden.table)
    assert max(abs(ours.table[token] - golden.table[token]) for token in ours.table) < 1e-12
    assert ours.unseen == golden.unseen == math.log(len(documents) + 1)
    assert ours.table[START] == 0.0
    assert 0 < ours.table[END] or len(documents) == 1


def test_idf_rules() -> None:
    corpus = _corpus()  # 10 documents: one twice, one 77 tokens long (no padding), one with the token "!" (id 0)
    total = len(corpus)
    assert [len(d) for d in corpus].count(F.CONTEXT_LENGTH) == 1 and sum(0 in d for d in corpus) == 1
    idf = F.idf_weights(corpus)
    padded_sets = [set(d.tolist()) | ({0} if len(d) < F.CONTEXT_LENGTH else set()) for d in corpus]
    counts = Counter(token for tokens in padded_sets for token in tokens)
    before_end = {token: math.log((total + 1) / (count + 1)) for token, count in counts.items()}
    assert set(idf.table) == set(before_end)
    assert all(idf.table[token] == before_end[token] for token in before_end if token != END)
    assert before_end[START] == before_end[END] == 0.0  # in every document
    assert idf.table[END] == pytest.approx(sum(before_end.values()) / len(before_end))
    # id 0: padding of 9 documents, one of which also holds "!~": log(11 / 10)
    assert idf.table[0] == pytest.approx(math.log(11 / 10))
    walk = int(TOKEN_IDS[ITEMS[6]["references"][0]][6])  # "walk": only in the 77-token document ("walks" differs)
    assert idf.table[walk] == pytest.approx(math.log(11 / 2))
    weights = idf(np.array([START, walk, 12345, END]))
    assert weights.tolist() == [0.0, idf.table[walk], math.log(11), idf.table[END]]
    assert F.UNIFORM(np.array([START, 0, 12345, END])).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert F.idf_weights(corpus + corpus[:1]).unseen == math.log(12)  # documents count with repetition
    with pytest.raises(ValueError, match="no document"):
        F.idf_weights([])


def test_one_document_corpus_weights_tokens_equally() -> None:
    """One item with one reference and idf on: every reference token weighs 0, the original's R is NaN; capeval
    weighs that reference's tokens equally and keeps everything else."""
    golden = GOLDENS["nan_one_reference/batched"][0]
    idf = idf_of("nan_one_reference")
    candidate = caption_of("a dog runs", idf)
    reference_text = "a brown dog is running across the grass"
    assert not idf(TOKEN_IDS[reference_text]).any()
    ours = F.item_scores(candidate, F.video(FRAMES[1]), [caption_of(reference_text, idf)])
    assert ours.equal_weights and not ours.zero_f
    table = as_table(ours)
    defined = ~np.isnan(golden)
    assert np.isnan(golden[1, 1]) and np.isnan(golden[2, 6])
    assert np.abs(table[defined] - golden[defined]).max() < TOLERANCE
    equal = F.reference_match(candidate, F.caption(TOKEN_EMBEDDINGS[reference_text],
                                                   np.ones(len(TOKEN_IDS[reference_text]))))
    assert table[1, 1] == pytest.approx(equal.values[1], abs=1e-6)
    assert np.isfinite(table).all()


def test_one_candidate_without_references_weights_tokens_equally() -> None:
    """One candidate, no references, idf on: the corpus is that candidate, its weights are all 0, the original's P
    is NaN; capeval's P is the equally weighted one."""
    golden = GOLDENS["nan_one_candidate/batched"][0, 0]
    idf = idf_of("nan_one_candidate")
    ours = F.item_scores(caption_of("a dog runs", idf), F.video(FRAMES[1]))
    values = ours.scores[F.VIDEO]
    assert ours.equal_weights and list(ours.scores) == [F.VIDEO]
    assert np.isnan(golden[0]) and np.isnan(golden[2])
    assert abs(values[1] - golden[1]) < TOLERANCE and abs(values[3] - golden[3]) < TOLERANCE
    uniform = F.item_scores(caption_of("a dog runs", F.UNIFORM), F.video(FRAMES[1])).scores[F.VIDEO]
    assert np.abs(values - uniform).max() < 1e-6
    assert np.isfinite(values).all()


def _unit_rows(*rows: List[float]) -> np.ndarray:
    return np.array(rows, dtype=np.float64)


def test_f_is_zero_when_precision_plus_recall_is_zero() -> None:
    candidate = F.caption(_unit_rows([1, 0, 0], [-1, 0, 0]), np.ones(2))
    orthogonal = F.caption(_unit_rows([0, 1, 0], [0, 0, 1]), np.ones(2))
    match = F.reference_match(candidate, orthogonal)
    assert match.values.tolist() == [0.0, 0.0, 0.0, 0.0] and match.zero_f
    # P = max(0.5, -1.5) = 0.5, R = mean(0.5, -1.5) = -0.5: the original divides by 0 (-inf)
    frames = _unit_rows([0.5, np.sqrt(0.75), 0], [-1.5, 0, 0])
    single = F.caption(_unit_rows([1, 0, 0]), np.ones(1))
    match = F.video_match(single, F.video(frames))
    assert match.values[:3].tolist() == pytest.approx([0.5, -0.5, 0.0]) and match.zero_f
    assert F.with_full(match.values)[6] == pytest.approx(match.values[3] / 2)


def test_combined_view_is_the_mean_of_video_and_references() -> None:
    scores = scores_of("refs_video_idf", 2).scores
    both = scores[F.VIDEO_AND_REFERENCES]
    assert np.abs(both - (scores[F.VIDEO] + scores[F.REFERENCES]) / 2).max() < 1e-6
    assert both[4:] == pytest.approx((both[:3] + both[3]) / 2)


def test_collect_keeps_items_independent_and_counts_defined_results() -> None:
    items = [scores_of("refs_video_idf", i) for i in range(len(ITEMS))]
    collected = F.collect(items)
    assert set(collected.scores) == set(F.VIEWS)
    for view in F.VIEWS:
        assert set(collected.scores[view]) == set(F.KEYS)
        for key_index, key in enumerate(F.KEYS):
            values = collected.scores[view][key]
            assert values.shape == (len(ITEMS),)
            assert values[4] == items[4].scores[view][key_index]
    alone = F.collect(items[4:5]).scores[F.VIDEO]["full_F"]
    assert alone[0] == collected.scores[F.VIDEO]["full_F"][4]
    assert (collected.equal_weight_items, collected.zero_f_items) == (0, 0)
    one_reference = F.item_scores(caption_of("a dog runs", idf_of("nan_one_reference")), F.video(FRAMES[1]),
                                  [caption_of("a brown dog is running across the grass", idf_of("nan_one_reference"))])
    assert F.collect([items[1], one_reference]).equal_weight_items == 1
    with pytest.raises(ValueError, match="different views"):
        F.collect([items[0], scores_of("video_idf", 0)])


def test_invalid_inputs_raise() -> None:
    candidate = caption_of("a dog runs", F.UNIFORM)
    with pytest.raises(ValueError, match="at least one"):
        F.item_scores(candidate, references=[])
    with pytest.raises(ValueError, match="video, references"):
        F.item_scores(candidate)
    with pytest.raises(ValueError, match="T >= 1"):
        F.video(np.zeros((0, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="widths differ"):
        F.video_match(candidate, F.video(np.ones((2, 8), dtype=np.float32)))
    with pytest.raises(ValueError, match=r"\(L, D\)"):
        F.caption(np.ones((3, 4)), np.ones(2))


def test_original_failures_are_recorded() -> None:
    """The calls the original cannot score (NOTE.md): capeval's core scores each of them item by item."""
    failures: Dict[str, str] = META["reference_failures"]
    expected: Dict[str, Tuple[str, ...]] = {
        "refs_none": ("TypeError",),
        "last_batch_of_one": ("RuntimeError", "zero-dimensional tensor"),
        "caption_over_77_tokens": ("RuntimeError", "too long for context length 77"),
        "item_without_references": ("KeyError",),
        "one_item_one_reference_as_list": ("IndexError",),
        "zero_references_each_VATEX_EVAL_use_n_refs_0": ("KeyError",),
    }
    for name, parts in expected.items():
        assert all(part in failures[name] for part in parts), failures[name]
    video_only = F.collect([scores_of("video_noidf", i) for i in range(len(ITEMS))])
    assert np.isfinite(video_only.scores[F.VIDEO]["full_F"]).all()
