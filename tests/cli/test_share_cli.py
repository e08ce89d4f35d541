"""``fairgate share`` before it reaches a gateway: where it reads and why it cannot.

The command against a running gateway (the tree, ``--json``, tokens) is tested
end to end in tests/e2e/test_share_visible.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.tls_certs import Authority

MINIMAL = """
models:
  - name: m
    upstreams: [{name: u, url: "http://127.0.0.1:9"}]
"""


def share(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "fairgate", "share", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(textwrap.dedent(MINIMAL).lstrip("\n") + extra, encoding="utf-8")
    return path


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    return line


def test_without_a_configuration_or_flags_it_says_what_to_pass() -> None:
    assert (
        one_line(share()) == "fairgate: no configuration file: pass -c FILE or set FAIRGATE_CONFIG"
    )


def test_without_a_master_key_or_a_token_file_it_says_so(tmp_path: Path) -> None:
    line = one_line(share("-c", str(config(tmp_path))))
    assert line == (
        "fairgate: no admin token: pass --token-file or set master_key_file in the configuration"
    )


def test_the_admin_address_comes_from_the_configuration(tmp_path: Path) -> None:
    (tmp_path / "master.key").write_text("fgm-some-master-key\n")
    port = closed_port()
    path = config(
        tmp_path, f"master_key_file: master.key\nadmin_listen: {{host: 0.0.0.0, port: {port}}}\n"
    )
    line = one_line(share("-c", str(path)))
    # 0.0.0.0 is reached on loopback
    assert line.startswith(
        f"fairgate: cannot reach the admin listener at http://127.0.0.1:{port}: "
    )
    path = config(tmp_path, "master_key_file: master.key\nadmin_listen: {port: 0}\n")
    assert one_line(share("-c", str(path))) == (
        "fairgate: admin_listen.port is 0 (any free port): pass the address with --url"
    )


def test_an_admin_listener_with_tls_is_reached_by_https_and_one_with_client_ca_refused(
    tmp_path: Path,
) -> None:
    ca = Authority("share CA")
    ca.issue("gateway", server=True).write(tmp_path, "server")
    ca.write(tmp_path / "operators.pem")
    (tmp_path / "master.key").write_text("fgm-some-master-key\n")
    port = closed_port()
    tls = "{cert_file: server.crt, key_file: server.key}"
    path = config(
        tmp_path, f"master_key_file: master.key\nadmin_listen: {{port: {port}, tls: {tls}}}\n"
    )
    line = one_line(share("-c", str(path)))
    assert line.startswith(
        f"fairgate: cannot reach the admin listener at https://127.0.0.1:{port}: "
    )
    mutual = "{cert_file: server.crt, key_file: server.key, client_ca_file: operators.pem}"
    path = config(tmp_path, f"master_key_file: master.key\nadmin_listen: {{tls: {mutual}}}\n")
    assert one_line(share("-c", str(path))) == (
        "fairgate: the admin listener requires client certificates "
        "(admin_listen.tls.client_ca_file), which fairgate share does not present"
    )


def test_flags_need_no_configuration_and_are_checked(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("")
    line = one_line(share("--url", "http://127.0.0.1:1", "--token-file", str(token)))
    assert line == f"fairgate: the token file {token} is empty"
    token.write_text("fga-x\n")
    line = one_line(share("--url", "ftp://127.0.0.1:1", "--token-file", str(token)))
    assert line == "fairgate: --url must be an http:// or https:// address, got ftp://127.0.0.1:1"
    token.write_text("fga-x\nsecond line\n")
    line = one_line(share("--url", "http://127.0.0.1:1", "--token-file", str(token)))
    assert line == f"fairgate: the token file {token} does not hold a token (one line of ASCII)"


def test_team_rows_hang_under_their_org_and_a_learned_capacity_says_so() -> None:
    from rich.console import Console

    from fairgate.cli.share import render_tree

    team = {"share": 0.7, "reservation": 3, "within_share_in_flight": 1, "usage": 2.5}
    report = {
        "at": 0,
        "half_life_seconds": 60.0,
        "pools": [
            {
                "pool": "p",
                "capacity": 8,
                "capacity_source": "learned",
                "capacity_learned": 8,
                "orgs": [
                    {
                        "org": "A",
                        "share": 0.5,
                        "reservation": 4,
                        "within_share_in_flight": 2,
                        "usage": 3.0,
                        "level": 1.0,
                        "rank": 0,
                        "this_gateway": {"within_share_in_flight": 2, "borrowing_in_flight": 1},
                        "teams": [
                            {"team": "t1", **team, "level": 1.2, "rank": 0},
                            {"team": "t2", **{**team, "share": 0.3}, "level": None, "rank": 1},
                        ],
                    }
                ],
            }
        ],
    }
    console = Console(width=200, color_system=None, record=True)
    console.print(render_tree(report))
    assert console.export_text().splitlines() == [
        "fair share at 1970-01-01T00:00:00Z, usage half-life 60 s",
        "└── pool p  capacity 8 (source: learned, learned: 8)",
        "    └── A  share 0.5  reserved 4  in flight 2  here: 2 within, 1 borrowing  usage 3  "
        "level 1  rank 0",
        "        ├── t1  share 0.7  reserved 3  in flight 1  usage 2.5  level 1.2  rank 0",
        "        └── t2  share 0.3  reserved 3  in flight 1  usage 2.5  level inf  rank 1",
    ]


def test_a_capacity_learned_from_the_engines_shows_its_bounds_and_replicas() -> None:
    from rich.console import Console

    from fairgate.cli.share import render_tree

    learned = {"floor": 8, "ceiling": 200, "replicas": {"m/r0": 28, "m/r1": 30}, "reason": "x"}
    pool = {"pool": "p", "capacity": 58, "capacity_source": "auto", "capacity_learned": learned}
    console = Console(width=200, color_system=None, record=True)
    console.print(render_tree({"at": 0, "half_life_seconds": 60.0, "pools": [pool]}))
    assert console.export_text().splitlines()[1] == (
        "└── pool p  capacity 58 (source: auto, floor 8, ceiling 200, m/r0 28, m/r1 30)"
    )
