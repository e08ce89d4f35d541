"""Rules across entries, each reported at the offending value with its line and column."""

from __future__ import annotations

from .conftest import Load, Problems

UPSTREAM = '[{name: u, url: "http://127.0.0.1:8000"}]'


def test_a_valid_catalogue_passes_every_rule(load: Load) -> None:
    cfg = load(
        f"""
        pools: [{{name: a, capacity: 4}}, {{name: b, capacity: 8}}]
        orgs:
          - {{name: x, share: 0.5, teams: [t1, t2]}}
          - {{name: y, share: 0.5, teams: [t3]}}
        models:
          - {{name: m1, aliases: [one], pool: a, fallbacks: [two, m3], upstreams: {UPSTREAM}}}
          - {{name: m2, aliases: [two], pool: b, fallbacks: [m3], upstreams: {UPSTREAM}}}
          - {{name: m3, pool: b, upstreams: {UPSTREAM}}}
        admission:
          bands: [{{name: gold, ceiling: 1.0}}, {{name: bronze, ceiling: 0.8}}]
        """
    )
    assert cfg.models[0].fallbacks == ("m2", "m3")  # the alias 'two' resolved to its model
    assert cfg.pool("b") is cfg.pools[1]


def test_duplicate_model_names(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - {{name: m, upstreams: {UPSTREAM}}}
          - {{name: m, upstreams: {UPSTREAM}}}
        """
    )
    assert found == ["3:12: duplicate model name 'm'"]


def test_an_alias_may_not_shadow_a_model_or_another_alias(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - name: a
            aliases: [b, c, a]
            upstreams: {UPSTREAM}
          - name: b
            aliases: [c, d, d]
            upstreams: {UPSTREAM}
        """
    )
    assert found == [
        "3:15: alias 'b' of model 'a' shadows model 'b'",
        "3:21: alias 'a' repeats the name of its own model",
        "6:15: alias 'c' of model 'b' is already an alias of model 'a'",
        "6:21: alias 'd' is listed twice",
    ]


def test_upstream_names_and_urls_are_unique_within_a_model(problems: Problems) -> None:
    found = problems(
        """
        models:
          - name: m
            upstreams:
              - {name: gpu01, url: "http://10.0.0.1:8000"}
              - {name: gpu01, url: "http://10.0.0.2:8000"}
              - {name: gpu03, url: "HTTP://10.0.0.1:8000/"}
          - name: n
            upstreams:
              - {name: gpu01, url: "http://10.0.0.1:8000"}
        """
    )
    assert found == [
        "5:16: duplicate upstream name 'gpu01'",
        "6:28: duplicate upstream URL 'http://10.0.0.1:8000' (also upstream 'gpu01')",
    ]


def test_pools_must_exist_and_be_named_once_pools_are_declared(problems: Problems) -> None:
    found = problems(
        f"""
        pools:
          - {{name: b300, capacity: 8}}
          - {{name: b300, capacity: 4}}
        models:
          - {{name: m1, pool: b30, upstreams: {UPSTREAM}}}
          - {{name: m2, upstreams: {UPSTREAM}}}
        """
    )
    assert found == [
        "3:12: duplicate pool name 'b300'",
        "5:22: unknown pool 'b30' (did you mean 'b300'?) (declared: b300)",
        "6:12: model 'm2' has no pool: set pool to one of b300",
    ]


def test_a_pool_without_declared_pools_is_unknown(problems: Problems) -> None:
    found = problems(f"models:\n  - {{name: m, pool: p, upstreams: {UPSTREAM}}}\n")
    assert found == ["2:21: unknown pool 'p': no pools are declared"]


def test_fallbacks_must_name_another_known_model_once(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - name: a
            aliases: [alpha]
            fallbacks: [bb, alpha, b, b]
            upstreams: {UPSTREAM}
          - {{name: b, upstreams: {UPSTREAM}}}
        """
    )
    assert found == [
        "4:17: unknown fallback model 'bb' (did you mean 'b'?)",
        "4:21: model 'a' falls back to itself",
        "4:31: fallback 'b' is listed twice",
    ]


def test_a_fallback_cycle_is_reported_with_its_path(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - {{name: a, fallbacks: [b], upstreams: {UPSTREAM}}}
          - {{name: b, fallbacks: [c], upstreams: {UPSTREAM}}}
          - {{name: c, aliases: [see], fallbacks: [a], upstreams: {UPSTREAM}}}
          - {{name: d, fallbacks: [see], upstreams: {UPSTREAM}}}
        """
    )
    assert found == ["4:43: fallback cycle: a -> b -> c -> a"]


def test_a_cycle_through_an_alias_is_still_a_cycle(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - {{name: a, aliases: [x], fallbacks: [b], upstreams: {UPSTREAM}}}
          - {{name: b, fallbacks: [x], upstreams: {UPSTREAM}}}
        """
    )
    assert found == ["3:27: fallback cycle: a -> b -> a"]


def test_org_names_are_unique_and_shares_sum_to_at_most_one(problems: Problems) -> None:
    found = problems(
        """
        orgs:
          - {name: a, share: 0.5}
          - {name: a, share: 0.25}
          - {name: c, share: 0.5}
          - {name: d, share: 0.25}
        """
        + "models: []\n"
    )
    assert found == [
        "3:12: duplicate org name 'a'",
        "4:22: org shares sum to 1.5, more than 1",
        "6:9: models: needs at least one entry",
    ]


def test_shares_summing_to_exactly_one_pass_despite_float_rounding(load: Load) -> None:
    cfg = load(
        f"""
        orgs:
          - {{name: a, share: 0.197}}
          - {{name: b, share: 0.687}}
          - {{name: c, share: 0.116}}
        models: [{{name: m, upstreams: {UPSTREAM}}}]
        """
    )
    assert sum(org.share for org in cfg.orgs) > 1  # 1.0000000000000002: rounding, not over


def test_a_team_belongs_to_one_org(problems: Problems) -> None:
    found = problems(
        f"""
        orgs:
          - {{name: a, share: 0.5, teams: [nlp, vision, nlp]}}
          - {{name: b, share: 0.5, teams: [chem, vision]}}
        models: [{{name: m, upstreams: {UPSTREAM}}}]
        """
    )
    assert found == [
        "2:48: team 'nlp' is listed twice in org 'a'",
        "3:41: team 'vision' is already in org 'a'",
    ]


def test_band_names_are_unique(problems: Problems) -> None:
    found = problems(
        f"""
        admission:
          bands:
            - {{name: gold, ceiling: 1.0}}
            - {{name: gold, ceiling: 0.5}}
        models: [{{name: m, upstreams: {UPSTREAM}}}]
        """
    )
    assert found == ["4:14: duplicate band name 'gold'"]


def test_rules_still_run_when_an_entry_has_a_type_error(problems: Problems) -> None:
    found = problems(
        f"""
        models:
          - {{name: m, upstreams: {UPSTREAM}, cost: {{input_per_mtok: lots}}}}
          - {{name: m, upstreams: {UPSTREAM}}}
          - just-a-string
        """
    )
    assert found == [
        "2:92: models[0].cost.input_per_mtok: expected a number, got 'lots'",
        "3:12: duplicate model name 'm'",
        "4:5: models[2]: expected a mapping, got 'just-a-string'",
    ]


def test_teams_may_carry_a_share_of_their_organisation(load: Load) -> None:
    cfg = load(
        f"""
        orgs:
          - name: a
            share: 0.6
            teams: [{{name: research, share: 0.7}}, {{name: ops, share: 0.3}}, misc]
          - {{name: b, share: 0.4, teams: [solo]}}
        models: [{{name: m, upstreams: {UPSTREAM}}}]
        """
    )
    a, b = cfg.orgs
    assert a.teams == ("research", "ops", "misc")
    assert a.team_shares == {"research": 0.7, "ops": 0.3}
    assert b.teams == ("solo",) and b.team_shares == {}


def test_team_shares_of_one_org_sum_to_at_most_one(problems: Problems) -> None:
    found = problems(
        f"""
        orgs:
          - name: a
            share: 0.5
            teams: [{{name: x, share: 0.7}}, {{name: y, share: 0.4}}, {{name: x}}]
          - {{name: b, share: 0.5, teams: [{{name: z, share: 1.5}}, {{name: y, share: 0.2}}]}}
        models: [{{name: m, upstreams: {UPSTREAM}}}]
        """
    )
    assert found == [
        "4:53: team shares of org 'a' sum to 1.1, more than 1",
        "4:66: team 'x' is listed twice in org 'a'",
        "5:52: orgs[1].teams[0].share: must be at most 1, got 1.5",
        "5:65: team 'y' is already in org 'a'",
    ]
