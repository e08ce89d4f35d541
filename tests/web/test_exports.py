"""The public names of web/ are exactly these, and the paths the pages own."""

from __future__ import annotations

import fairgate.web
from fairgate.web.paths import EXACT, PREFIXES


def test_web_exports() -> None:
    assert sorted(fairgate.web.__all__) == ["build_web"]
    for name in fairgate.web.__all__:
        assert getattr(fairgate.web, name) is not None


def test_the_pages_own_a_fixed_path_set() -> None:
    assert {"/", "/signup", "/signin", "/signout", "/account"} == EXACT
    assert PREFIXES == ("/account/", "/claim/", "/static/")
