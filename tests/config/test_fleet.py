"""The control_plane section and a model's deploy profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Load, Problems

CONTROL_PLANE = """\
control_plane:
  tls: {cert_file: cp.crt, key_file: cp.key, client_ca_file: ca.crt}
"""

DEPLOYED = (
    CONTROL_PLANE
    + """\
models:
  - name: chat
    deploy:
      engine: vllm
      model: meta-llama/Llama-3.1-8B-Instruct
      replicas: 2
      gpus_per_replica: 4
      tensor_parallel_size: 4
      args: [--max-model-len, "8192"]
      node_labels: {zone: a}
"""
)


@pytest.fixture(autouse=True)
def _tls_files(tmp_path: Path) -> None:
    for name in ("cp.crt", "cp.key", "ca.crt"):
        (tmp_path / name).write_text("-----BEGIN X-----\n")


def test_a_deploy_profile_is_read_as_written(load: Load) -> None:
    deploy = load(DEPLOYED).models[0].deploy
    assert deploy is not None
    assert (deploy.engine, deploy.model, deploy.replicas) == (
        "vllm",
        "meta-llama/Llama-3.1-8B-Instruct",
        2,
    )
    assert (deploy.gpus_per_replica, deploy.tensor_parallel_size) == (4, 4)
    assert deploy.args == ("--max-model-len", "8192")
    assert deploy.node_labels == {"zone": "a"}


def test_the_simulator_may_run_without_gpus_other_engines_may_not(
    load: Load, problems: Problems
) -> None:
    sim = CONTROL_PLANE + (
        "models:\n  - name: m\n    deploy: {engine: sim, model: sim, gpus_per_replica: 0}\n"
    )
    deploy = load(sim).models[0].deploy
    assert deploy is not None and deploy.gpus_per_replica == 0
    assert problems(sim.replace("engine: sim", "engine: vllm")) == [
        "5:13: models[0].deploy: gpus_per_replica: 0 is only for engine sim, not vllm"
    ]


def test_a_model_takes_upstreams_or_deploy_not_both(problems: Problems) -> None:
    both = DEPLOYED + '    upstreams: [{name: u, url: "http://127.0.0.1:8000"}]\n'
    assert problems(both) == ["4:5: models[0]: give either upstreams or deploy, not both"]


def test_gpus_per_replica_is_a_multiple_of_the_tensor_parallel_size(problems: Problems) -> None:
    text = DEPLOYED.replace("gpus_per_replica: 4", "gpus_per_replica: 6")
    [found] = problems(text)
    assert found.endswith(
        "models[0].deploy: gpus_per_replica (6) must be a multiple of tensor_parallel_size (4)"
    )


def test_an_unknown_engine_is_refused(problems: Problems) -> None:
    [found] = problems(DEPLOYED.replace("engine: vllm", "engine: tgi"))
    assert "models[0].deploy.engine" in found and "'tgi'" in found


def _control_plane(tmp_path: Path, extra: str = "") -> str:
    return (
        "control_plane:\n"
        "  listen: {host: 127.0.0.1, port: 9443}\n"
        "  tls: {cert_file: cp.crt, key_file: cp.key, client_ca_file: ca.crt}\n"
        + extra
        + DEPLOYED.removeprefix(CONTROL_PLANE)
    )


def test_the_control_plane_section_is_read_with_its_defaults(load: Load, tmp_path: Path) -> None:
    cp = load(_control_plane(tmp_path)).control_plane
    assert cp is not None
    assert (cp.listen.host, cp.listen.port) == ("127.0.0.1", 9443)
    assert (cp.heartbeat_interval, cp.unreachable_after, cp.lost_after) == (5.0, 15.0, 120.0)
    assert cp.tls.client_ca_file.path == tmp_path / "ca.crt"


def test_the_control_plane_durations_must_be_in_order(problems: Problems, tmp_path: Path) -> None:
    [found] = problems(_control_plane(tmp_path, "  unreachable_after: 20s\n  lost_after: 10s\n"))
    assert found.endswith(
        "control_plane: lost_after (10s) must be longer than unreachable_after (20s)"
    )


def test_the_control_plane_needs_its_tls(problems: Problems) -> None:
    [found] = problems(
        "control_plane:\n  listen: {port: 9443}\n" + DEPLOYED.removeprefix(CONTROL_PLANE)
    )
    assert "missing required key 'tls' in 'control_plane'" in found


def test_a_deployed_model_without_the_control_plane_follows_the_store(load: Load) -> None:
    # a gateway that routes to the replicas another process's control plane placed
    config = load(DEPLOYED.removeprefix(CONTROL_PLANE))
    assert config.control_plane is None
    assert config.models[0].deploy is not None


def test_the_lease_is_long_enough_to_renew(problems: Problems, tmp_path: Path) -> None:
    [found] = problems(_control_plane(tmp_path, "  lease_ttl: 1s\n"))
    assert found.endswith(
        "control_plane: lease_ttl (1s) must be at least 3s: the holder renews it every third of it"
    )


def test_a_model_or_served_name_an_engine_would_read_as_an_option_is_refused(
    problems: Problems,
) -> None:
    """vLLM's model is a positional argument: `--api-key=x` there would set the engine's
    key (and `--uds=…` move it off its port) past the reserved-option check on `args`."""
    [found] = problems(DEPLOYED.replace("meta-llama/Llama-3.1-8B-Instruct", '"--api-key=x"'))
    assert found.endswith(
        "models[0].deploy: model '--api-key=x' begins with '-': "
        "the engine would read it as an option"
    )
    named = DEPLOYED.replace("  - name: chat\n", '  - name: chat\n    upstream_model: "-h"\n')
    [found] = problems(named)
    assert "models[0]: upstream_model '-h' begins with '-'" in found
