"""RegionFeatures: the precomputed-regions input shared by TIGEr and ViLBERTScore."""
import numpy as np
import pytest

from capeval.inputs import InputError
from capeval.models.regions import RegionFeatures


def _regions(n: int = 4, dim: int = 8) -> RegionFeatures:
    rng = np.random.default_rng(0)
    boxes = np.array([[0, 0, 10, 10], [5, 5, 20, 30], [0, 0, 40, 30], [1, 2, 3, 4]], dtype=np.float64)[:n]
    return RegionFeatures(rng.standard_normal((n, dim)), boxes, (40, 30))


def test_validated_converts_dtypes_and_keeps_values():
    regions = _regions()
    checked = regions.validated(0, feature_dim=8, num_regions=4, needs_boxes=True)
    assert checked.features.dtype == np.float32 and checked.features.flags.c_contiguous
    np.testing.assert_array_equal(checked.features, regions.features.astype(np.float32))
    assert checked.boxes.dtype == np.float64 and checked.image_size == (40.0, 30.0)


@pytest.mark.parametrize("change, message", [
    (dict(features=np.zeros((4,))), r"images\[3\]\.features must be a \(regions, dim\) array"),
    (dict(features=np.zeros((0, 8))), r"at least one region"),
    (dict(features=np.zeros((4, 7))), r"has 7 columns; this model needs 8"),
    (dict(features=np.full((4, 8), np.nan)), r"NaN or infinite"),
    (dict(features=np.full((4, 8), 1e300)), r"images\[3\]\.features: region 0 is too large for float32 arithmetic"),
    (dict(features=np.vstack([np.zeros((3, 8)), np.full((1, 8), 3e38)]).astype(np.float32)),
     r"images\[3\]\.features: region 3 is too large for float32 arithmetic \(its squared norm is 7\.2e\+77"),
    (dict(features=np.array([["a"] * 8] * 4)), r"must hold real numbers"),
    (dict(boxes=np.zeros((3, 4))), r"boxes must have shape \(4, 4\)"),
    (dict(boxes=np.array([[0, 0, 10, 10], [5, 5, 20, 30], [0, 0, 41, 30], [1, 2, 3, 4]])), r"boxes\[2\].*outside the 40x30 image"),
    (dict(boxes=np.array([[0, 0, 10, 10], [5, 5, 2, 30], [0, 0, 40, 30], [1, 2, 3, 4]])), r"boxes\[1\] is not \(x1, y1, x2, y2\)"),
    (dict(image_size=(0, 30)), r"image_size must be positive"),
    (dict(image_size="big"), r"image_size must be \(width, height\)"),
])
def test_bad_regions_name_the_item(change, message):
    base = _regions()
    fields = dict(features=base.features, boxes=base.boxes, image_size=base.image_size)
    fields.update(change)
    with pytest.raises(InputError, match=message):
        RegionFeatures(**fields).validated(3, feature_dim=8)


def test_wrong_region_count_and_missing_boxes():
    with pytest.raises(InputError, match=r"has 4 regions; this model needs 36"):
        _regions().validated(0, num_regions=36)
    with pytest.raises(InputError, match=r"images\[1\]: this metric needs the region boxes"):
        RegionFeatures(np.zeros((4, 8))).validated(1, needs_boxes=True)


def test_content_key_depends_on_content_only():
    a, b = _regions(), _regions()
    assert a.content_key() == b.content_key()
    assert a.content_key() == RegionFeatures(a.features.astype(np.float32), a.boxes, (40.0, 30.0)).content_key()
    moved = RegionFeatures(a.features, a.boxes + 1, a.image_size)
    assert moved.content_key() != a.content_key()
    assert RegionFeatures(a.features).content_key() != a.content_key()
