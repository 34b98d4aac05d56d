"""``Agent.spec.inputPolicy`` (issue 31 item 4): ``queue`` (default) or ``steer``; anything else
is refused by the validator with the allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.config import load_bundle
from goondan.errors import BundleError
from tests.support.connector_e2e import base_bundle


@pytest.mark.parametrize(("yaml", "policy"), [("", "queue"), ("  inputPolicy: queue\n", "queue"),
                                              ("  inputPolicy: steer\n", "steer")])
def test_input_policy_is_read_with_queue_as_the_default(
    tmp_path: Path, yaml: str, policy: str
) -> None:
    bundle = base_bundle(tmp_path / "b", None, {"assistant": yaml}, "")
    assert (
        load_bundle(bundle, state_root=tmp_path / "s").agent_spec("assistant").input_policy
        == policy
    )


def test_an_unknown_input_policy_is_a_schema_error_naming_the_allowed_values(
    tmp_path: Path,
) -> None:
    bundle = base_bundle(tmp_path / "b", None, {"assistant": "  inputPolicy: sometimes\n"}, "")
    with pytest.raises(BundleError) as caught:
        load_bundle(bundle, state_root=tmp_path / "s")
    text = str(caught.value)
    assert (
        "E_CONFIG_SCHEMA_INVALID" in text and "spec.inputPolicy" in text and "'sometimes'" in text
    )
