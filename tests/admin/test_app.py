"""The admin listener as a whole: health routes kept, OpenAPI served, errors as envelopes."""

from __future__ import annotations

from admin.conftest import Api


async def test_health_readiness_and_metrics_answer_on_the_admin_app(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    api.models_ready["llama-70b"] = False
    assert (await api.client.get("/readyz")).status_code == 503
    metrics = await api.client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")


async def test_the_openapi_document_lists_the_admin_routes_to_an_admin_caller_only(
    api: Api,
) -> None:
    refused = await api.client.get("/admin/openapi.json")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_admin_credential"
    assert "paths" not in refused.text
    wrong = await api.client.get(
        "/admin/openapi.json", headers={"authorization": "Bearer not-the-master-key"}
    )
    assert wrong.status_code == 401
    response = await api.client.get("/admin/openapi.json", headers=api.master)
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/admin/keys",
        "/admin/keys/{key_id}/rotate",
        "/admin/whoami",
        "/admin/audit",
        "/admin/users/{name}/roles",
        "/admin/teams",
        "/admin/orgs",
        "/admin/admin-tokens",
    ):
        assert path in paths
    assert (await api.client.get("/admin/docs")).status_code == 404


async def test_the_document_declares_the_error_envelope_and_never_422(api: Api) -> None:
    document = (await api.client.get("/admin/openapi.json", headers=api.master)).json()
    envelope = {"$ref": "#/components/schemas/ErrorEnvelope"}
    for operations in document["paths"].values():
        for operation in operations.values():
            responses = operation["responses"]
            assert "422" not in responses
            for status in ("400", "401", "403", "404", "429", "503"):
                assert responses[status]["content"]["application/json"]["schema"] == envelope
    assert "HTTPValidationError" not in document["components"]["schemas"]
    # What the document says is what a refused request gets.
    refused = await api.client.post("/admin/keys", json={"team": 1}, headers=api.master)
    assert refused.status_code == 400
    assert set(refused.json()["error"]) == {"message", "type", "code"}


async def test_an_unknown_route_is_a_404_envelope(api: Api) -> None:
    response = await api.client.get("/admin/nope", headers=api.master)
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    wrong_method = await api.client.put("/admin/keys", headers=api.master)
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_a_trailing_slash_is_an_unknown_route_not_a_redirect(api: Api) -> None:
    """A redirect would be built from the Host header and the listener's own scheme (http
    behind a TLS proxy), and a client following it may resend its bearer there: an
    unknown spelling is the 404 envelope, whoever asks and whatever the method."""
    for method, path in [
        ("GET", "/admin/keys/"),
        ("POST", "/admin/keys/"),
        ("GET", "/admin/teams/a1/"),
        ("GET", "/admin/whoami/"),
    ]:
        for headers in ({}, api.master):
            answer = await api.client.request(
                method, path, headers={**headers, "host": "elsewhere.example"}, json={}
            )
            assert answer.status_code == 404, (method, path)
            assert "location" not in answer.headers
            assert answer.json()["error"]["code"] == "unknown_route"


async def test_whoami_names_the_caller_and_its_roles(api: Api) -> None:
    me = (await api.client.get("/admin/whoami", headers=api.as_user("tom"))).json()
    assert me == {"name": "user:tom", "roles": [{"role": "team_admin", "scope": "team:a1"}]}
    master = (await api.client.get("/admin/whoami", headers=api.master)).json()
    assert master == {"name": "master-key", "roles": [{"role": "proxy_admin", "scope": None}]}
