"""The simulated engine stands alone: the import contract names every other package.

import-linter can only forbid modules it is told of, so the contract "the simulated
engine stands alone" lists every fairgate package but ``core`` and ``sim`` by hand.
This test fails when a package is added to the tree and not to that list (a new
package the simulator could then import unnoticed).
"""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import fairgate

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
ALLOWED = {"fairgate.core", "fairgate.sim"}


def test_the_sim_contract_forbids_every_other_fairgate_module() -> None:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("source_modules") == ["fairgate.sim"]]
    forbidden = set(contract["forbidden_modules"])
    modules = {f"fairgate.{m.name}" for m in pkgutil.iter_modules(fairgate.__path__)}
    assert modules - ALLOWED - forbidden == set(), "add these to the sim contract"
    assert forbidden <= modules, "the sim contract names modules that do not exist"
