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
        ("tag", "org:etabA/x"),
        ("tag", "team:lab-nlp/x"),
        ("tag", "x"),
        ("tag", "org:etabA/y"),
        ("tag", "team:lab-nlp/y"),
        ("tag", "y"),
    ]


def test_a_tag_spelled_like_another_tenants_budget_reaches_only_its_own_tenants() -> None:
    """Organisation and team names never hold ``/``: a tag cannot name another owner."""
    subject = Subject(key="k", org="B", team="b1", tags=("org:A/grant", "team:a1/grant"))
    names = [name for kind, name in subject.scopes() if kind == "tag"]
    assert names == [
        "org:B/org:A/grant",
        "team:b1/org:A/grant",
        "org:B/team:a1/grant",
        "team:b1/team:a1/grant",
    ]


def test_a_key_without_project_skips_that_scope() -> None:
    kinds = [kind for kind, _ in Subject(key="k", org="o", team="t").scopes()]
    assert kinds == ["org", "team", "key"]
