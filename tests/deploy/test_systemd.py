"""deploy/systemd: the units run the gateway unprivileged, stop it by its drain, and
hand it its secrets as credentials (files), never in the environment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fairgate.config import load_config

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"


def unit(name: str) -> dict[str, list[str]]:
    """Each [Service] key with every value it is given (systemd keys repeat)."""
    values: dict[str, list[str]] = {}
    section = None
    text = (UNITS / name).read_text().replace("\\\n", " ")  # continued lines joined
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


@pytest.mark.parametrize("name", ["fairgate.service", "fairgate@.service"])
def test_the_unit_drains_unprivileged_with_secrets_as_credentials(name: str) -> None:
    service = unit(name)
    assert service["User"] == ["fairgate"]
    assert service["KillSignal"] == ["SIGTERM"]
    # shutdown_grace (30 s) and the usage records' last write (up to 30 s) fit
    assert int(service["TimeoutStopSec"][0]) >= 60
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["CapabilityBoundingSet"] == [""]
    assert "--config" in service["ExecStart"][0]
    assert "Environment" not in service and "EnvironmentFile" not in service
    credentials = [c.split(":", 1)[0] for c in service["LoadCredential"]]
    assert {"pg.url", "redis.url", "master.key"} <= set(credentials)


def test_the_host_unit_runs_several_workers() -> None:
    assert "--workers" in unit("fairgate.service")["ExecStart"][0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize("name", ["fairgate.service", "fairgate@1.service"])
def test_systemd_finds_nothing_wrong_but_the_absent_binary(name: str, tmp_path: Path) -> None:
    source = "fairgate@.service" if "@" in name else name
    (tmp_path / name).write_text((UNITS / source).read_text())
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "/opt/fairgate/bin/fairgate is not executable" not in line
    ]
    assert problems == []


def test_the_example_configuration_journals_into_the_state_directory(tmp_path: Path) -> None:
    """gateway.yaml beside the units: its journal is in the unit's StateDirectory (the only
    writable place under ProtectSystem=strict), its secrets are the unit's credentials, and
    it loads once those files exist."""
    service = unit("fairgate.service")
    assert service["ProtectSystem"] == ["strict"]
    (state,) = service["StateDirectory"]
    text = (UNITS / "gateway.yaml").read_text()
    document = yaml.safe_load(text)
    journal = Path(document["accounting"]["journal_path"])
    assert journal.is_relative_to(Path("/var/lib") / state)
    credentials = Path("/run/credentials/fairgate.service")
    names = {c.split(":", 1)[0] for c in service["LoadCredential"]}
    # laid out under tmp_path, as the service sees its files
    relocated = text.replace(str(credentials), str(tmp_path / "credentials"))
    relocated = relocated.replace(str(journal), str(tmp_path / "journal"))
    (tmp_path / "credentials").mkdir()
    for name in names:
        (tmp_path / "credentials" / name).write_text("x" * 40 + "\n")
    (tmp_path / "credentials" / "pg.url").write_text("postgresql://gw@db.example.org/fairgate\n")
    (tmp_path / "credentials" / "redis.url").write_text("redis://redis.example.org:6379/0\n")
    (tmp_path / "gateway.yaml").write_text(relocated)
    config = load_config(tmp_path / "gateway.yaml")
    assert config.accounting.journal_path == tmp_path / "journal"
    named = {
        config.master_key_file,
        config.metrics_token_file,
        config.store.url_file,
        config.state.url_file,
        *(u.key_file for m in config.models for u in m.upstreams),
    }
    used = {ref.path.name for ref in named if ref is not None and ref.path is not None}
    assert used <= names


def test_the_agent_unit_leaves_the_engines_to_the_next_agent() -> None:
    """Stopping or restarting the agent's unit must not kill its engines (KillMode
    `process`: only the agent is signalled), and the agent's state directory is the
    unit's, so the next agent adopts them; its key is a credential."""
    service = unit("fairgate-agent.service")
    assert service["KillMode"] == ["process"]
    assert service["User"] == ["fairgate"] and service["NoNewPrivileges"] == ["yes"]
    start = " ".join(service["ExecStart"])
    (state,) = service["StateDirectory"]
    assert f"--state-dir /var/lib/{state}" in start
    credentials = {c.split(":", 1)[0] for c in service["LoadCredential"]}
    assert credentials == {"node.crt", "node.key", "ca.crt"}
    for flag, name in (("--cert", "node.crt"), ("--key", "node.key"), ("--ca", "ca.crt")):
        assert f"{flag} %d/{name}" in start  # %d: the credentials directory
    assert "Environment" not in service and "EnvironmentFile" not in service


def test_the_control_plane_unit_runs_it_unprivileged_with_its_keys_as_credentials() -> None:
    """`fairgate control-plane` (no OpenAI API), stopped by SIGTERM, which gives the lease
    up; restarted always (a standby takes over meanwhile); its TLS key a credential."""
    service = unit("fairgate-control-plane.service")
    assert service["ExecStart"][0].split()[1:3] == ["control-plane", "--config"]
    assert service["User"] == ["fairgate"] and service["NoNewPrivileges"] == ["yes"]
    assert service["KillSignal"] == ["SIGTERM"] and service["Restart"] == ["always"]
    assert service["CapabilityBoundingSet"] == [""]
    credentials = {c.split(":", 1)[0] for c in service["LoadCredential"]}
    assert {"cp.crt", "cp.key", "fleet-ca.crt", "master.key", "pg.url"} <= credentials
    assert "Environment" not in service and "EnvironmentFile" not in service


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize("name", ["fairgate-agent.service", "fairgate-control-plane.service"])
def test_systemd_finds_nothing_wrong_with_the_fleet_units(name: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text((UNITS / name).read_text())
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "/opt/fairgate/bin/fairgate is not executable" not in line
    ]
    assert problems == []
