"""Budgets: ``/admin/budgets`` (amounts in GPU-hours, exact: a decimal string or a JSON number).

(No ``from __future__ import annotations``: FastAPI reads these annotations at run time.)
"""

from decimal import InvalidOperation
from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from fairgate.admin.bodies import seconds
from fairgate.admin.endpoints.context import Caller, listing
from fairgate.core.errors import BadRequest
from fairgate.core.money import Money
from fairgate.tenancy import Tenancy, public
from fairgate.tenancy.budget_record import parse_moment

__all__ = ["BudgetBody", "IncreaseBody", "budgets_router"]

GpuHours = Annotated[StrictStr, Field(max_length=32)] | StrictInt | StrictFloat
Text = Annotated[StrictStr, Field(min_length=1, max_length=300)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetBody(_Body):
    """The budget of ``scope`` (``team:lab-nlp``) per ``period``; ``model`` null = every model."""

    scope: Text
    period: Annotated[StrictStr, Field(max_length=8, examples=["month"])]
    max: GpuHours
    soft: GpuHours | None = None
    model: Annotated[StrictStr, Field(max_length=256)] | None = None


class IncreaseBody(_Body):
    """``by`` GPU-hours more until ``until`` (RFC 3339) or for ``for`` (``"7d"``): one of them."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    by: GpuHours
    until: Annotated[StrictStr, Field(max_length=64)] | None = None
    lasting: Annotated[StrictStr, Field(max_length=32)] | None = Field(None, alias="for")


def gpu_hours(field: str, value: str | int | float) -> Money:
    """A GPU-hour amount as Money; BadRequest naming the field when it is not a number, or
    one finer than a micro GPU-hour (six decimals: what the counters hold)."""
    try:
        return Money.exact(value)
    except (InvalidOperation, ValueError):
        raise BadRequest(
            f"{field}: not a number of GPU-hours with at most six decimals", code="invalid_amount"
        ) from None


def budgets_router(t: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin/budgets", tags=["budgets"])

    @router.get("", summary="Budgets of the scopes the caller reads")
    async def list_budgets(actor: Caller, scope: str | None = None) -> dict[str, Any]:
        return listing(await t.budgets.list(actor, scope=scope))

    @router.put("", summary="Set the budget of a scope, model and period (created or changed)")
    async def set_budget(body: BudgetBody, actor: Caller) -> dict[str, Any]:
        budget = await t.budgets.set(
            actor,
            scope=body.scope,
            period=body.period,
            max=gpu_hours("max", body.max),
            soft=None if body.soft is None else gpu_hours("soft", body.soft),
            model=body.model,
        )
        return public(budget)

    @router.get("/{budget_id}", summary="One budget")
    async def get_budget(budget_id: str, actor: Caller) -> dict[str, Any]:
        return public(await t.budgets.get(actor, budget_id))

    @router.delete("/{budget_id}", summary="Delete a budget and its increases")
    async def delete_budget(budget_id: str, actor: Caller) -> dict[str, Any]:
        return public(await t.budgets.delete(actor, budget_id))

    @router.post("/{budget_id}/increase", summary="Raise a budget's cap for a while")
    async def increase_budget(budget_id: str, body: IncreaseBody, actor: Caller) -> dict[str, Any]:
        budget = await t.budgets.increase(
            actor,
            budget_id,
            by=gpu_hours("by", body.by),
            until=None if body.until is None else parse_moment(body.until),
            lasting=seconds("for", body.lasting),
        )
        return public(budget)

    return router
