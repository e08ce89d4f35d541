"""Admin request bodies: bounded, strict, and every problem a readable 400 (never FastAPI's 422)."""

from __future__ import annotations

import pytest

from admin.conftest import Api


async def test_a_body_over_64_kib_is_413_and_nothing_is_created(api: Api) -> None:
    big = {"team": "a1", "name": "x", "tags": ["t" * 70_000]}
    response = await api.client.post("/admin/keys", headers=api.master, json=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    listed = (await api.client.get("/admin/keys", headers=api.master)).json()["data"]
    assert len(listed) == len(api.world.keys)


async def test_a_body_streamed_past_the_limit_without_a_length_is_413(api: Api) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(20):
            yield b"x" * 4096

    response = await api.client.post(
        "/admin/keys", headers={**api.master, "content-type": "application/json"}, content=chunks()
    )
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"team": "a1", "colour": "blue"}, "unknown field 'colour'"),
        ({"team": "a1", "rpm": "60"}, "rpm"),
        ({"team": "a1", "rpm": 0}, "rpm"),
        ({}, "team: field required"),
        ({"team": "a1", "expires_in": "soon"}, "expires_in: not a duration"),
        ({"team": "a1", "models": ["gpt-5"]}, "unknown model 'gpt-5'"),
    ],
)
async def test_invalid_bodies_are_400_with_a_readable_message(
    api: Api, body: dict[str, object], message: str
) -> None:
    response = await api.client.post("/admin/keys", headers=api.master, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert message in error["message"]


async def test_a_body_that_is_not_json_is_400(api: Api) -> None:
    response = await api.client.post(
        "/admin/keys",
        headers={**api.master, "content-type": "application/json"},
        content=b"{not json",
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]
