"""capeval.configuration: a model folder's config.json states every field (a missing key would silently take a
default and change the scores), nested configurations included; unknown keys and another model_type are refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from capeval.models.bridge.configuration import BridgeConfig
from capeval.models.scan.configuration import ScanConfig


def test_a_saved_config_loads_back_equal(tmp_path: Path) -> None:
    config = BridgeConfig()
    config.save(tmp_path)
    assert BridgeConfig.load(tmp_path) == config


@pytest.mark.parametrize("path", [("num_heads",), ("templates", "num_beams")])
def test_a_config_missing_a_field_is_refused_naming_it(tmp_path: Path, path: tuple) -> None:
    values = BridgeConfig().to_dict()
    holder = values
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    (tmp_path / "config.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match=rf"config\.json: .*fields missing: \['{path[-1]}'\]; a model's config states "
                                         "every field"):
        BridgeConfig.load(tmp_path)
    assert BridgeConfig.from_dict(values) == BridgeConfig()  # a partial dict (a training recipe) keeps defaults


def test_unknown_fields_and_another_model_type_are_refused(tmp_path: Path) -> None:
    values = {**BridgeConfig().to_dict(), "num_head": 4}
    (tmp_path / "config.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match=r"config\.json: unknown BridgeConfig fields: \['num_head'\]"):
        BridgeConfig.load(tmp_path)
    with pytest.raises(ValueError, match="config has model_type 'other', expected 'scan'"):
        ScanConfig.from_dict({"vocab_size": 10, "model_type": "other"})
