"""The store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

    orgs ─< teams ─< projects
              └──< keys >── projects (optional), users (owner, optional)
    users ─< role_bindings (role on root, an org or a team)
    users ─< admin_tokens
    audit_events (append only, hash-chained; org_id/team_id say who may read an event)
    usage_records ─< usage_record_tags (append only; one row per request, names copied)
    usage_records ─< usage_record_costs (the parts of a record's cost charged to other models)
    budgets ─< budget_increases (one budget per scope, model and period)
    alert_marks (one row per budget counter and period whose soft-limit alert is claimed)
    counter_snapshots (the memory back end's rate counters as last saved; replaced whole)
    access_changes (append only, pruned: a feed of changes that withdraw or alter access)
    allowlists (the IP allowlist of an organisation, a team or a key: one row each at most)
    claim_links >── keys (a one-time link handing a key's secret over; the secret sealed)
    accounts ─< web_sessions (a person's web sign-in; once approved, bound to a user and a team)
    sso_logins (an administrator's single sign-on between the provider's redirect and callback)
    scim_resources (SCIM users and groups as the identity provider pushed them)
    users ─< scim_users, scim_grants (the users SCIM provisions, the roles it granted them)
    fleet_nodes ─< fleet_replicas (the control plane's nodes and the replicas placed on them)
    fleet_lease (which control plane places and commands, until when)

Organisations, teams and projects are disabled, never deleted, so the usage
records that name them stay readable. Keys are ULID strings (sortable, not
guessable from their neighbours); everything else has an integer id. Secrets are
never stored: keys and admin tokens keep only the SHA-256 of their secret (or its
HMAC-SHA-256 with the key pepper; the columns keep their name) and a short
display prefix; a pending claim link keeps the secret sealed under a key derived from
the link's token, which is never stored either (``fairgate.tenancy.sealing``). Every
timestamp is UTC (:class:`UtcDateTime`).

The migrations in ``store/migrations/`` create exactly this schema; a test
compares the two on both back ends.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

from fairgate.store.timestamp import UtcDateTime

__all__ = [
    "EMAIL_LENGTH",
    "NAME_LENGTH",
    "access_changes",
    "accounts",
    "admin_tokens",
    "alert_marks",
    "allowlists",
    "audit_events",
    "budget_increases",
    "budgets",
    "claim_links",
    "counter_snapshots",
    "fleet_lease",
    "fleet_nodes",
    "fleet_replicas",
    "keys",
    "metadata",
    "orgs",
    "projects",
    "role_bindings",
    "scim_grants",
    "scim_resources",
    "scim_users",
    "sso_logins",
    "teams",
    "usage_record_costs",
    "usage_record_tags",
    "usage_records",
    "users",
    "web_sessions",
]

NAME_LENGTH = 128
"""Longest name of an organisation, team, project, user, key or token label."""

EMAIL_LENGTH = NAME_LENGTH
"""Longest e-mail address of an account: it becomes a user's name once approved."""

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

_JsonList = JSON(none_as_null=True)
_Id = BigInteger().with_variant(Integer, "sqlite")

orgs = Table(
    "orgs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(NAME_LENGTH), nullable=False, unique=True),
    Column("share", Float, nullable=True),  # from the configuration; None: it only borrows
    Column("declared", Boolean, nullable=False),  # listed in the configuration file
    Column("created_at", UtcDateTime, nullable=False),
    Column("disabled_at", UtcDateTime, nullable=True),
)

teams = Table(
    "teams",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=False, index=True),
    Column("name", String(NAME_LENGTH), nullable=False, unique=True),
    Column("declared", Boolean, nullable=False),
    # Created by the configuration sync (not the admin API): only such a team may be moved
    # to another organisation by the configuration.
    Column("from_config", Boolean, nullable=False, server_default=false()),
    Column("models", _JsonList, nullable=True),  # None: every model; []: none
    Column("rpm", Integer, nullable=True),  # per key: defaults and ceilings of its keys
    Column("tpm", Integer, nullable=True),
    Column("rpd", Integer, nullable=True),
    Column("max_in_flight", Integer, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("disabled_at", UtcDateTime, nullable=True),
    Column("total_rpm", Integer, nullable=True),  # across all the team's keys together
    Column("total_tpm", Integer, nullable=True),
    Column("total_rpd", Integer, nullable=True),
    Column("total_max_in_flight", Integer, nullable=True),
    Column("max_keys_per_member", Integer, nullable=False, server_default="10"),
)

projects = Table(
    "projects",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=False),
    Column("name", String(NAME_LENGTH), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("disabled_at", UtcDateTime, nullable=True),
    UniqueConstraint("team_id", "name"),
)

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(NAME_LENGTH), nullable=False, unique=True),
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=True, index=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("disabled_at", UtcDateTime, nullable=True),
    # the name lower-cased: a name is unique in any case (migration 0021; NULL for a
    # case variant made before it, kept as it was)
    Column("name_key", String(NAME_LENGTH), nullable=True, unique=True),
)

keys = Table(
    "keys",
    metadata,
    Column("id", String(26), primary_key=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=False, index=True),
    Column("project_id", Integer, ForeignKey("projects.id"), nullable=True, index=True),
    Column("owner_id", Integer, ForeignKey("users.id"), nullable=True, index=True),
    Column("name", String(NAME_LENGTH), nullable=True),
    Column("prefix", String(32), nullable=False),
    Column("secret_sha256", LargeBinary(32), nullable=False, unique=True),
    Column("previous_sha256", LargeBinary(32), nullable=True, index=True),
    Column("previous_until", UtcDateTime, nullable=True),
    Column("models", _JsonList, nullable=True),
    Column("tags", JSON, nullable=False),
    Column("rpm", Integer, nullable=True),
    Column("tpm", Integer, nullable=True),
    Column("rpd", Integer, nullable=True),
    Column("max_in_flight", Integer, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("expires_at", UtcDateTime, nullable=True),
    Column("revoked_at", UtcDateTime, nullable=True),
    Column("changed_at", UtcDateTime, nullable=False, index=True),  # for key_changes()
)

role_bindings = Table(
    "role_bindings",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("role", String(32), nullable=False),
    Column("scope_kind", String(8), nullable=False),  # root | org | team
    Column("scope_id", Integer, nullable=False),  # 0 for root, else the org's or team's id
    Column("created_at", UtcDateTime, nullable=False),
    Column("created_by", String(200), nullable=False),
    UniqueConstraint("user_id", "role", "scope_kind", "scope_id"),
)

admin_tokens = Table(
    "admin_tokens",
    metadata,
    Column("id", String(26), primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False, index=True),
    Column("name", String(NAME_LENGTH), nullable=True),
    Column("prefix", String(32), nullable=False),
    Column("secret_sha256", LargeBinary(32), nullable=False, unique=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=True),
    Column("revoked_at", UtcDateTime, nullable=True),
)

audit_events = Table(
    "audit_events",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("at", UtcDateTime, nullable=False, index=True),
    Column("actor", String(200), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(300), nullable=True),
    Column("org_id", Integer, nullable=True),  # no foreign key: events outlive what they name
    Column("team_id", Integer, nullable=True),
    Column("remote", String(64), nullable=True),
    Column("detail", JSON(none_as_null=True), nullable=True),
    # The hash chain (store/audit_chain.py): the place in it, the link and the seal.
    Column("seq", BigInteger, nullable=False, unique=True),
    Column("prev_hash", LargeBinary(32), nullable=False),
    Column("hash", LargeBinary(32), nullable=False),
    Index(None, "org_id", "team_id"),
)

usage_records = Table(
    "usage_records",
    metadata,
    # Names, not ids: a record keeps the tree as it was when the request ran, and
    # no foreign key, because a record outlives what it names.
    Column("request_id", String(64), primary_key=True),  # unique: a retried batch adds nothing
    Column("at", UtcDateTime, nullable=False, index=True),
    Column("key_id", String(NAME_LENGTH), nullable=False, index=True),
    Column("org", String(NAME_LENGTH), nullable=False),
    Column("team", String(NAME_LENGTH), nullable=False),
    Column("project", String(NAME_LENGTH), nullable=True),
    Column("model", String(256), nullable=False),
    Column("pool", String(NAME_LENGTH), nullable=True),
    Column("replica", String(256), nullable=True),
    Column("route", String(64), nullable=False),
    Column("status", Integer, nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("cost_micro", BigInteger, nullable=False),  # micro GPU-hours (fairgate.core.money)
    Column("estimated", Boolean, nullable=False),
    Column("ttft_ms", Integer, nullable=True),  # None: nothing reached the client
    Column("total_ms", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("client_addr", String(64), nullable=True),  # resolved through trusted proxies
)

usage_record_tags = Table(
    "usage_record_tags",
    metadata,
    Column("request_id", String(64), ForeignKey("usage_records.request_id"), primary_key=True),
    Column("tag", String(256), primary_key=True),
)

# The part of a record's cost_micro charged to a model other than the record's own (an
# attempt that model's engine took and never answered, before the record's model served):
# the record's model keeps cost_micro less these parts (fairgate.store.usage_records).
usage_record_costs = Table(
    "usage_record_costs",
    metadata,
    Column("request_id", String(64), ForeignKey("usage_records.request_id"), primary_key=True),
    Column("model", String(256), primary_key=True),
    Column("pool", String(NAME_LENGTH), nullable=True),
    Column("cost_micro", BigInteger, nullable=False),  # micro GPU-hours, within the record's
)

budgets = Table(
    "budgets",
    metadata,
    Column("id", String(26), primary_key=True),  # a ULID: not guessable from its neighbours
    Column("scope_kind", String(8), nullable=False),  # org | team | project | key | tag
    Column("scope", String(300), nullable=False),  # name, team/project, key id or tag
    Column("model", String(256), nullable=False),  # "" for every model (unique with NULL fails)
    Column("period", String(8), nullable=False),  # day | week | month (UTC)
    Column("max_micro", BigInteger, nullable=False),  # micro GPU-hours (fairgate.core.money)
    Column("soft_micro", BigInteger, nullable=True),
    # Where the budget lies in the tree, for the scope clauses; None for a tag.
    # No foreign key: organisations and teams are disabled, never deleted.
    Column("org_id", Integer, nullable=True),
    Column("team_id", Integer, nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    UniqueConstraint("scope_kind", "scope", "model", "period"),
    Index(None, "org_id", "team_id"),
)

budget_increases = Table(
    "budget_increases",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("budget_id", String(26), ForeignKey("budgets.id"), nullable=False, index=True),
    Column("amount_micro", BigInteger, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("created_by", String(200), nullable=False),
)

alert_marks = Table(
    "alert_marks",
    metadata,
    # The SHA-256 of the budget's counter key (fairgate.limits.Budget.counter_key, the
    # period label included): unique however long the scope and model names are.
    Column("key_sha256", LargeBinary(32), primary_key=True),
    Column("counter_key", Text, nullable=False),
    Column("period_end", UtcDateTime, nullable=False, index=True),  # for pruning old marks
    Column("claimed_at", UtcDateTime, nullable=False),
    Column("sent_at", UtcDateTime, nullable=True),  # None: being sent (or its sender died)
    Column("channels", JSON(none_as_null=True), nullable=True),  # {"webhook": "sent", …}
)

counter_snapshots = Table(
    "counter_snapshots",
    metadata,
    # One row per counter of fairgate.limits.snapshot.SavedCounter; the whole set is
    # replaced by each snapshot, so the key needs no index.
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("key", Text, nullable=False),
    Column("kind", String(8), nullable=False),  # "window" or "period"
    Column("data", JSON, nullable=False),
    Column("saved_at", UtcDateTime, nullable=False),
)

access_changes = Table(
    "access_changes",
    metadata,
    # Written in the transaction of every change that can withdraw access (a key revoked,
    # rotated or changed; a team, project or organisation disabled or changed), read by
    # every gateway process to drop what its key cache holds for the subject. The id
    # never goes back (AUTOINCREMENT on SQLite too), so a reader keeps its place by id.
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("kind", String(8), nullable=False),  # key | team | project | org
    Column("subject", String(300), nullable=False),  # key id, team, team/project or org name
    Column("at", UtcDateTime, nullable=False, index=True),  # for pruning
    sqlite_autoincrement=True,
)

allowlists = Table(
    "allowlists",
    metadata,
    # One row per organisation, team or key with a list: exactly one of the three ids is
    # set, as ``kind`` says. No row: no list (an empty list is never stored).
    Column("id", Integer, primary_key=True),
    Column("kind", String(4), nullable=False),  # org | team | key
    Column("org_id", Integer, ForeignKey("orgs.id"), nullable=True, unique=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=True, unique=True),
    Column("key_id", String(26), ForeignKey("keys.id"), nullable=True, unique=True),
    Column("cidrs", JSON, nullable=False),  # networks in their normal form (core.cidr)
    Column("updated_at", UtcDateTime, nullable=False),
    Column("updated_by", String(200), nullable=False),
)

claim_links = Table(
    "claim_links",
    metadata,
    # One per key handed over by link. ``lookup`` is a hash of the link's token (never the
    # token, never the sealing key); ``sealed`` is the key's secret under AES-GCM with a key
    # only the token derives, wiped (NULL) in the transaction that redeems the link.
    Column("id", String(26), primary_key=True),
    Column("key_id", String(26), ForeignKey("keys.id"), nullable=False, unique=True),
    Column("lookup", LargeBinary(32), nullable=False, unique=True),
    Column("sealed", LargeBinary(256), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("claimed_at", UtcDateTime, nullable=True),
)

accounts = Table(
    "accounts",
    metadata,
    # A person's web account: an e-mail address (lower-cased) and the argon2id hash of their
    # password (fairgate.accounts.passwords: the PHC string, parameters included). Pending
    # until an operator approves it; approval binds it to a tenancy user (named after the
    # address) and a team. ``notified_at`` is the claim of the one pending-sign-up alert.
    Column("id", Integer, primary_key=True),
    Column("email", String(EMAIL_LENGTH), nullable=False, unique=True),
    Column("password_hash", String(512), nullable=False),
    Column("state", String(16), nullable=False),  # pending | active | suspended
    Column("user_id", Integer, ForeignKey("users.id"), nullable=True, unique=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("approved_at", UtcDateTime, nullable=True),
    Column("suspended_at", UtcDateTime, nullable=True),
    Column("notified_at", UtcDateTime, nullable=True),
)

web_sessions = Table(
    "web_sessions",
    metadata,
    # A signed-in browser: only the SHA-256 of the 256-bit cookie value and of the CSRF
    # token are stored. ``kind`` account: ``account_id`` is set; admin (the dashboard):
    # ``actor_name`` and, for an admin token's user, ``user_id``.
    Column("id_sha256", LargeBinary(32), primary_key=True),
    Column("kind", String(8), nullable=False),  # account | admin
    Column("account_id", Integer, ForeignKey("accounts.id"), nullable=True, index=True),
    Column("actor_name", String(200), nullable=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=True),
    Column("csrf_sha256", LargeBinary(32), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("seen_at", UtcDateTime, nullable=False),  # for the idle timeout
    Column("expires_at", UtcDateTime, nullable=False, index=True),  # the absolute timeout
    # An SSO session (fairgate.admin.sso): the bindings the person's claims gave at sign-in
    # ([{role, org, team}], by scope name) and the provider's ID token, sent back at logout.
    Column("sso_roles", _JsonList, nullable=True),
    Column("id_token_hint", Text, nullable=True),
)

sso_logins = Table(
    "sso_logins",
    metadata,
    # An SSO login between the redirect to the provider and its callback, keyed by the
    # SHA-256 of the browser's login cookie; taken (deleted) once by the callback.
    Column("id_sha256", LargeBinary(32), primary_key=True),
    Column("state", String(64), nullable=False),
    Column("nonce", String(64), nullable=False),
    Column("code_verifier", String(128), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False, index=True),
)

scim_resources = Table(
    "scim_resources",
    metadata,
    # A SCIM User or Group as the identity provider wrote it (the password attribute is never
    # kept). ``name_key`` is the userName or displayName case-folded, unique per kind;
    # ``version`` makes the ETag; a Group's members are in its ``body``.
    Column("id", String(32), primary_key=True),
    Column("kind", String(8), nullable=False),  # User | Group
    Column("name", String(256), nullable=False),
    Column("name_key", String(256), nullable=False),
    Column("active", Boolean, nullable=False),  # a User's active; true for a Group
    Column("body", JSON, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("modified_at", UtcDateTime, nullable=False),
    UniqueConstraint("kind", "name_key"),
)

scim_users = Table(
    "scim_users",
    metadata,
    # A gateway user SCIM provisions: enabled while an active SCIM User of its name exists.
    Column("user_id", Integer, ForeignKey("users.id"), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

scim_grants = Table(
    "scim_grants",
    metadata,
    # A role binding SCIM granted (a group's mapping): the only ones it ever takes away.
    Column("user_id", Integer, ForeignKey("users.id"), primary_key=True),
    Column("role", String(32), primary_key=True),
    Column("team_id", Integer, ForeignKey("teams.id"), primary_key=True),
    Column("created_at", UtcDateTime, nullable=False),
)

fleet_nodes = Table(
    "fleet_nodes",
    metadata,
    # A node whose agent registered with the control plane: its last inventory (JSON text,
    # as the agent sent it), its health state (healthy, unreachable, lost) and the
    # operator's persisted flags. ``desired_version`` is the last desired state sent to it.
    Column("name", String(NAME_LENGTH), primary_key=True),
    Column("labels", JSON, nullable=False),
    Column("inventory", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("cordoned", Boolean, nullable=False),
    Column("draining", Boolean, nullable=False),
    Column("address", String(256), nullable=False),
    Column("desired_version", BigInteger, nullable=False),
    Column("allocation_ends_at", UtcDateTime, nullable=True),
    Column("registered_at", UtcDateTime, nullable=False),
    Column("last_heartbeat_at", UtcDateTime, nullable=False),
)

fleet_replicas = Table(
    "fleet_replicas",
    metadata,
    # A replica of a ``deploy:`` model placed on a node: its GPUs and port there, the state
    # its agent last reported (placed until then), restarts and pid as reported, and its
    # generation: raised by an operator's restart, which makes the agent launch it afresh.
    Column("id", String(NAME_LENGTH), primary_key=True),
    Column("model", String(NAME_LENGTH), nullable=False, index=True),
    Column("node", String(NAME_LENGTH), ForeignKey("fleet_nodes.name"), nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("port", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("restarts", Integer, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("detail", Text, nullable=False),
    Column("desired_version", BigInteger, nullable=False),
    Column("generation", Integer, nullable=False, server_default="0"),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    UniqueConstraint("node", "port"),
)

fleet_lease = Table(
    "fleet_lease",
    metadata,
    # The control plane that places replicas and commands the agents: one row per lease
    # name, held by ``holder`` until ``expires_at`` unless renewed before.
    Column("name", String(64), primary_key=True),
    Column("holder", String(256), nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
)

people = Table(
    "people",
    metadata,
    # A caller known by an access token: (issuer, subject), its synthetic key ``keys.id``
    # (``jwt-`` + a hash of the two), and whether it is revoked. A row exists from the
    # first token verified, or from a revocation of somebody not seen yet.
    Column("key_id", String(26), primary_key=True),
    Column("issuer", String(1000), nullable=False),
    Column("subject", String(1024), nullable=False),
    Column("first_seen", UtcDateTime, nullable=True),
    Column("revoked_at", UtcDateTime, nullable=True),
    Column("revoked_by", String(200), nullable=True),
)

person_keys = Table(
    "person_keys",
    metadata,
    # A short-lived secret /v1/auth/exchange gave for a person's key: many at once, one
    # key id (and so one spend line) for all of them.
    Column("secret_sha256", LargeBinary(32), primary_key=True),
    Column("key_id", String(26), ForeignKey("keys.id"), nullable=False, index=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False, index=True),
)
