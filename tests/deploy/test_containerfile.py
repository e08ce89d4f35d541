"""The Containerfile: a small image run as uid 10001 with no secret baked in.

No container runtime runs here, so the file is parsed and checked, not built:
its final stage's USER, what it copies (only the package's sources, nothing
that looks like a secret), no secret in ENV or ARG, and the build context
(.containerignore) limited to what it copies.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRETISH = re.compile(r"secret|\.key$|\.pem$|\.url$|\.token$|\.env$|password|credential", re.I)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for word, rest in instructions(text):
        if word == "FROM":
            out.append([])
        out[-1].append((word, rest))
    return out


def copied_sources(stage: list[tuple[str, str]]) -> list[str]:
    sources = []
    for word, rest in stage:
        if word in ("COPY", "ADD"):
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            from_stage = "--from=" in rest
            if not from_stage:
                sources.extend(parts[:-1])
    return sources


def containerfile() -> str:
    return (ROOT / "Containerfile").read_text()


def test_the_final_stage_runs_as_uid_10001() -> None:
    final = stages(containerfile())[-1]
    users = [rest for word, rest in final if word == "USER"]
    assert users, "the final stage sets USER"
    assert users[-1].split(":")[0] == "10001"  # numeric: runAsNonRoot can check it
    # nothing after USER switches back
    after = final[[w for w, _ in final].index("USER") :]
    assert all(word != "USER" or rest.startswith("10001") for word, rest in after)


def test_only_the_package_sources_are_copied_and_no_secret() -> None:
    every = [s for stage in stages(containerfile()) for s in copied_sources(stage)]
    assert every, "the build copies the package"
    assert sorted(every) == ["README.md", "pyproject.toml", "src"]
    assert not [s for s in every if SECRETISH.search(s)]
    for source in every:
        assert (ROOT / source).exists()
    assert not [
        rest
        for word, rest in instructions(containerfile())
        if word in ("ENV", "ARG") and SECRETISH.search(rest)
    ]


def test_the_build_context_holds_only_what_is_copied() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".containerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*"  # everything excluded, then let back in one by one
    allowed = {r.removeprefix("!").rstrip("/") for r in rules if r.startswith("!")}
    assert allowed == {"README.md", "pyproject.toml", "src"}


def test_the_image_listens_where_the_deployment_expects() -> None:
    exposed = {
        int(port)
        for word, rest in instructions(containerfile())
        if word == "EXPOSE"
        for port in rest.split()
    }
    deployment = yaml.safe_load((ROOT / "deploy/kubernetes/deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert exposed == {p["containerPort"] for p in container["ports"]}
    user = int(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"])
    assert user == 10001
