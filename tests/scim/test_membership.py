"""Nested groups expanded: members of nested groups hold the outer group's role, cycles end."""

from __future__ import annotations

from fairgate.scim.membership import Group, holders

MAPPING = {"physics": ("member", "etabA"), "leads": ("team_admin", "etabA")}


def test_members_of_nested_groups_hold_the_outer_groups_pair() -> None:
    groups = {
        "g1": Group("Physics", ("u1", "g2")),
        "g2": Group("Optics", ("u2", "g3")),
        "g3": Group("Lasers", ("u3",)),
    }
    held = holders(groups, MAPPING)
    assert {u: held[u] for u in ("u1", "u2", "u3")} == {
        "u1": {("member", "etabA")},
        "u2": {("member", "etabA")},
        "u3": {("member", "etabA")},
    }


def test_names_compare_without_case_and_unmapped_groups_give_nothing() -> None:
    groups = {"g1": Group("LEADS", ("u1",)), "g2": Group("Chemistry", ("u2",))}
    assert holders(groups, MAPPING) == {"u1": {("team_admin", "etabA")}}


def test_a_cycle_of_groups_ends_and_gives_every_member_both_pairs() -> None:
    groups = {"g1": Group("Physics", ("u1", "g2")), "g2": Group("Leads", ("u2", "g1"))}
    held = holders(groups, MAPPING)
    both = {("member", "etabA"), ("team_admin", "etabA")}
    assert held["u1"] == both and held["u2"] == both


def test_a_member_id_naming_no_group_is_a_user() -> None:
    assert holders({"g1": Group("Physics", ("gone",))}, MAPPING) == {"gone": {("member", "etabA")}}
