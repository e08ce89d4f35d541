"""The person's name and the bindings their claims give (``fairgate.admin.sso.roles``)."""

from __future__ import annotations

from fairgate.accounts import SsoBinding
from fairgate.admin.sso.roles import MAX_PERSON, claim_roles, person_of
from fairgate.config.sso import SsoRole


def test_the_name_is_preferred_username_then_a_verified_email_then_sub() -> None:
    assert person_of({"preferred_username": "ada", "email": "a@x.org", "sub": "1"}) == "ada"
    assert person_of({"email": "a@x.org", "email_verified": True, "sub": "1"}) == "a@x.org"
    # an unverified address could be anybody's: the subject instead
    assert person_of({"email": "a@x.org", "email_verified": "true", "sub": "1"}) == "1"
    assert person_of({"preferred_username": 7, "sub": "1"}) == "1"


def test_an_unusable_name_is_none() -> None:
    assert person_of({}) is None
    assert person_of({"sub": ""}) is None
    assert person_of({"sub": " padded"}) is None
    assert person_of({"sub": "line\nbreak"}) is None
    assert person_of({"sub": "x" * (MAX_PERSON + 1)}) is None


RULES = (
    SsoRole(value="admins", role="proxy_admin"),
    SsoRole(value="physics", role="org_admin", org="physics"),
    SsoRole(value="physics", role="org_admin", org="physics"),
    SsoRole(claim="email", value="ada@x.org", role="viewer", team="lab"),
)


def test_every_matching_rule_applies_once_in_order() -> None:
    claims = {"groups": ["physics", "admins"], "email": "ada@x.org", "email_verified": True}
    assert claim_roles(claims, RULES) == (
        SsoBinding("proxy_admin"),
        SsoBinding("org_admin", org="physics"),
        SsoBinding("viewer", team="lab"),
    )


def test_a_claim_holds_a_value_as_a_string_or_in_a_list_and_nothing_else() -> None:
    assert claim_roles({"groups": "admins"}, RULES) == (SsoBinding("proxy_admin"),)
    assert claim_roles({"groups": ["admins-not"]}, RULES) == ()
    assert claim_roles({"groups": {"admins": True}}, RULES) == ()
    assert claim_roles({"groups": [["admins"]]}, RULES) == ()
    assert claim_roles({}, RULES) == ()


def test_an_email_binding_needs_the_address_verified() -> None:
    # A provider that lets people type their own address would hand the binding to
    # whoever claims it: unverified, the address holds nothing (as for the name).
    rules = (SsoRole(claim="email", value="auditor@x.org", role="org_admin", org="a"),)
    for verified in (False, "true", None):
        claims = {"email": "auditor@x.org", "email_verified": verified}
        assert claim_roles(claims, rules) == ()
    assert claim_roles({"email": "auditor@x.org"}, rules) == ()
    verified_claims = {"email": "auditor@x.org", "email_verified": True}
    assert claim_roles(verified_claims, rules) == (SsoBinding("org_admin", org="a"),)
