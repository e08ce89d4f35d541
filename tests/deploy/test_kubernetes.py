"""deploy/kubernetes: every manifest is valid against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field is an error), and the manifests
agree with each other and with the gateway (names, ports, labels, probes, the
configuration they mount loads)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fairgate.config import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
VERSION = kubernetes_validate.utils.latest_version()
Manifest = dict[str, Any]


def manifests() -> list[Manifest]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def one(kind: str) -> Manifest:
    found = [m for m in manifests() if m["kind"] == kind]
    assert len(found) == 1, f"one {kind} expected"
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def gateway_pod() -> tuple[Manifest, Manifest]:
    """The Deployment's pod spec and its gateway container."""
    spec = one("Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


@pytest.mark.parametrize(
    "manifest", manifests(), ids=lambda m: f"{m['kind']}/{m['metadata']['name']}"
)
def test_every_manifest_is_valid_against_the_kubernetes_schema(manifest: Manifest) -> None:
    kubernetes_validate.validate(manifest, VERSION, strict=True)


def test_the_validation_refuses_a_misspelt_field() -> None:
    broken = copy.deepcopy(one("Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)


def test_the_kustomization_lists_every_manifest_but_the_placeholder_secret() -> None:
    listed = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml", "secret.yaml"}
    assert sorted(listed) == sorted(present)


def test_the_deployment_selects_its_own_pods_and_the_others_select_them() -> None:
    deployment = one("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert matches(deployment["spec"]["selector"]["matchLabels"], labels)
    assert matches(one("Service")["spec"]["selector"], labels)
    assert matches(one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels)
    target = one("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


def test_ports_and_probes_name_what_the_gateway_listens_on() -> None:
    _, container = gateway_pod()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    config = yaml.safe_load(one("ConfigMap")["data"]["gateway.yaml"])
    assert ports == {"http": config["listen"]["port"], "admin": config["admin_listen"]["port"]}
    assert config["admin_listen"]["host"] == "0.0.0.0"  # the kubelet probes it
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (service_port,) = one("Service")["spec"]["ports"]
    assert service_port["targetPort"] in ports


def test_the_drain_fits_in_the_grace_period() -> None:
    spec, container = gateway_pod()
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    config = yaml.safe_load(one("ConfigMap")["data"]["gateway.yaml"])
    grace = float(config["proxy"]["shutdown_grace"].removesuffix("s"))
    flush = 30  # the queued usage records are written for up to 30 s after the drain
    assert pause > 0
    assert spec["terminationGracePeriodSeconds"] >= pause + grace + flush


def test_the_pod_runs_as_uid_10001_without_privileges_and_reads_secrets_as_files() -> None:
    spec, container = gateway_pod()
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "env" not in container and "envFrom" not in container  # secrets only as files
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    assert volumes["secrets"]["secret"]["secretName"] == one("Secret")["metadata"]["name"]


def test_the_mounted_configuration_loads_and_names_only_keys_of_the_secret(tmp_path: Path) -> None:
    """The ConfigMap's gateway.yaml, laid out as the pod mounts it, is a valid
    configuration whose every secret file is a key of the Secret."""
    _, container = gateway_pod()
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secret = one("Secret")["stringData"]
    config_dir = tmp_path / mounts["config"].lstrip("/")
    secrets_dir = tmp_path / mounts["secrets"].lstrip("/")
    config_dir.mkdir(parents=True)
    secrets_dir.mkdir(parents=True)
    (config_dir / "gateway.yaml").write_text(one("ConfigMap")["data"]["gateway.yaml"])
    assert container["args"][container["args"].index("--config") + 1] == (
        mounts["config"] + "/gateway.yaml"
    )
    for name, value in secret.items():
        (secrets_dir / name).write_text(value)
    config = load_config(config_dir / "gateway.yaml")
    named = {
        config.master_key_file,
        config.metrics_token_file,
        config.store.url_file,
        config.state.url_file,
        *(u.key_file for m in config.models for u in m.upstreams),
    }
    paths = {ref.path.resolve() for ref in named if ref is not None and ref.path is not None}
    assert paths == {(secrets_dir / name).resolve() for name in secret}


def test_engines_are_reachable_only_from_the_gateways() -> None:
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    engines = [
        p
        for p in manifests()
        if p["kind"] == "NetworkPolicy" and p["spec"]["podSelector"]["matchLabels"] != labels
    ]
    assert engines, "a NetworkPolicy for the engines"
    config = yaml.safe_load(one("ConfigMap")["data"]["gateway.yaml"])
    engine_ports = {
        int(u["url"].rsplit(":", 1)[1]) for m in config["models"] for u in m["upstreams"]
    }
    for policy in engines:
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        (rule,) = policy["spec"]["ingress"]
        (source,) = rule["from"]
        assert set(source) == {"podSelector"}  # no namespace, no address block: gateways only
        assert matches(source["podSelector"]["matchLabels"], labels)
        assert {p["port"] for p in rule["ports"]} == engine_ports


def test_the_journal_is_on_a_writable_volume_of_the_pod() -> None:
    """The read-only root file system and ConfigMap mount leave only the emptyDir volumes
    writable: the usage-record journal must be on one, or the gateway does not start."""
    spec, container = gateway_pod()
    config = yaml.safe_load(one("ConfigMap")["data"]["gateway.yaml"])
    journal = Path(config["accounting"]["journal_path"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    holding = [m for m in container["volumeMounts"] if journal.is_relative_to(Path(m["mountPath"]))]
    assert holding, f"{journal} is on the read-only root file system"
    deepest = max(holding, key=lambda m: len(m["mountPath"]))
    assert not deepest.get("readOnly", False)
    assert "emptyDir" in volumes[deepest["name"]]
