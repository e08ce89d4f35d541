"""OIDC access tokens on the inference API (the ``jwt:`` block).

    source    = KeySource(issuer, jwks_url=…, min_refresh=60, clock=clock)   # keys.py
    verifier  = TokenVerifier(source, audience=…, skew=60, clock=clock)      # verifier.py
    place(rules, claims) → Placement(team, project)                           # mapping.py
    TokenAuthenticator(keys_authenticator, verifier, rules, people, cache, …) # authenticator.py
    Exchanger(issuers, …).exchange(authorization, client)                    # exchange.py

A bearer with two dots is an access token; anything else goes to the virtual
key Authenticator untouched. Each person (issuer, subject) is one synthetic key
row, ``person_key_id``, in the tenancy store. docs/identity.md, "Access tokens",
describes the block and its limits.
"""

from fairgate.auth.jwt.authenticator import PersonDirectory, TokenAuthenticator, resolve_person
from fairgate.auth.jwt.exchange import EXCHANGE_COUNTER, EXCHANGE_PATH, ExchangeIssuer, Exchanger
from fairgate.auth.jwt.keys import KeySource, ProviderUnavailable, get_json
from fairgate.auth.jwt.mapping import Placement, Rule, person_key_id, place
from fairgate.auth.jwt.verifier import (
    ALGORITHMS,
    Claims,
    TokenRefused,
    TokenVerifier,
    looks_like_jws,
)

__all__ = [
    "ALGORITHMS",
    "EXCHANGE_COUNTER",
    "EXCHANGE_PATH",
    "Claims",
    "ExchangeIssuer",
    "Exchanger",
    "KeySource",
    "PersonDirectory",
    "Placement",
    "ProviderUnavailable",
    "Rule",
    "TokenAuthenticator",
    "TokenRefused",
    "TokenVerifier",
    "get_json",
    "looks_like_jws",
    "person_key_id",
    "place",
    "resolve_person",
]
