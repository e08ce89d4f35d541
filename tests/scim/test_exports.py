"""The public names of fairgate.scim."""

from __future__ import annotations

import fairgate.scim as scim


def test_exported_members() -> None:
    assert set(scim.__all__) == {
        "ScimApp",
        "ScimParts",
        "StoreScimStorage",
        "build_scim",
        "scim_token",
    }
