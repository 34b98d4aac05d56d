"""``Swarm.spec.policy.isolation`` and ``policy.pool.hosts`` (issue 33, docs/scaling.md "Pooled
hosts"): ``process`` (default) or ``pooled``, ``pool.hosts`` a positive integer; anything else is
refused by the validator. ``GOONDAN_ISOLATION`` chooses for a Swarm that does not say."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from goondan.config import load_bundle
from goondan.errors import BundleError, ConfigError
from goondan.swarm.pool import PooledSpawner, default_hosts, isolation_of

LEDGER = Path(__file__).resolve().parents[1] / "fixtures" / "runtime" / "ledger"


def _bundle(tmp_path: Path, policy: str) -> Path:
    root = tmp_path / "b"
    shutil.copytree(LEDGER, root, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = root / "goondan.yaml"
    manifest.write_text(manifest.read_text() + policy, encoding="utf-8")
    return root


@pytest.mark.parametrize(("policy", "isolation", "hosts"), [
    ("", None, None),
    ("  policy: {isolation: process}\n", "process", None),
    ("  policy: {isolation: pooled, pool: {hosts: 3}}\n", "pooled", 3),
])
def test_isolation_and_pool_hosts_are_read(
    tmp_path: Path, policy: str, isolation: str | None, hosts: int | None
) -> None:
    swarm = load_bundle(_bundle(tmp_path, policy), state_root=tmp_path / "s").swarm_spec()
    assert (swarm.isolation, swarm.pool_hosts) == (isolation, hosts)


@pytest.mark.parametrize(("policy", "code", "field", "value"), [
    ("  policy: {isolation: threads}\n", "SCHEMA_INVALID", "spec.policy.isolation", "'threads'"),
    ("  policy: {isolation: pooled, pool: {hosts: 0}}\n", "SCHEMA_INVALID",
     "spec.policy.pool.hosts", "got 0"),
    ("  policy: {pool: {hosts: two}}\n", "SCHEMA_INVALID", "spec.policy.pool.hosts", "a string"),
    ("  policy: {pool: {size: 2}}\n", "UNKNOWN_FIELD", "spec.policy.pool", "'size'"),
])
def test_a_bad_isolation_or_pool_is_refused_by_the_validator(
    tmp_path: Path, policy: str, code: str, field: str, value: str
) -> None:
    with pytest.raises(BundleError) as caught:
        load_bundle(_bundle(tmp_path, policy), state_root=tmp_path / "s")
    text = str(caught.value)
    assert f"E_CONFIG_{code}" in text and field in text and value in text, text


def test_the_swarm_policy_wins_over_goondan_isolation_which_wins_over_the_default(
    tmp_path: Path,
) -> None:
    unset = load_bundle(_bundle(tmp_path / "1", ""), state_root=tmp_path / "s").swarm_spec()
    pinned = load_bundle(_bundle(tmp_path / "2", "  policy: {isolation: process}\n"),
                         state_root=tmp_path / "s").swarm_spec()
    assert isolation_of(unset, {}) == "process"
    assert isolation_of(unset, {"GOONDAN_ISOLATION": "pooled"}) == "pooled"
    assert isolation_of(pinned, {"GOONDAN_ISOLATION": "pooled"}) == "process"
    with pytest.raises(ConfigError) as caught:
        isolation_of(unset, {"GOONDAN_ISOLATION": "thread"})
    assert caught.value.code == "E_ENGINE_ISOLATION"


def test_the_pool_has_one_host_per_cpu_unless_told(tmp_path: Path) -> None:
    assert PooledSpawner(tmp_path, state_root=tmp_path).hosts == default_hosts() >= 1
    assert PooledSpawner(tmp_path, state_root=tmp_path, hosts=5).hosts == 5
