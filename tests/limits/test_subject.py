"""The scopes a request falls under."""

from __future__ import annotations

from fairgate.limits import Subject


def test_scopes_run_from_the_organisation_down_to_each_tag_once() -> None:
    subject = Subject(key="k1", org="etabA", team="lab-nlp", project="p1", tags=("x", "y", "x"))
    assert list(subject.scopes()) == [
        ("org", "etabA"),
        ("team", "lab-nlp"),
        ("project", "p1"),
        ("key", "k1"),
        ("tag", "x"),
        ("tag", "y"),
    ]


def test_a_key_without_project_skips_that_scope() -> None:
    kinds = [kind for kind, _ in Subject(key="k", org="o", team="t").scopes()]
    assert kinds == ["org", "team", "key"]
