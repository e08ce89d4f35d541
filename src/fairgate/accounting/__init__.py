"""Accounting: one usage record per request, written in batches; costs; spend reports.

    prices = prices_by_model(config.models)              # once, at load
    cost = prices[model].cost_of(usage)                  # Money, integer micro GPU-hours
    recorder = Recorder(StoreUsageWriter(store))         # the Gateway owns it
    recorder.start()
    recorder.record(UsageRecord(request_id=…, at=…, key_id=…, org=…, team=…, …))
    await recorder.drain(timeout=10.0)                   # at shutdown
    report = await spend(store, actor, "2025-10-01", "2025-11-01", ("org", "team"))
    text = render(report, "parsable2")
    alerter = Alerter(store, webhook=WebhookTarget(url, token=…), smtp=None, clock=clock)
    alerter.soft_limit_crossed(budget, label, period_end, spent, cap)   # once per period
    notices = SignUpNotices(store, alerter.delivery, clock)   # a pending sign-up, once

Every request is recorded whatever its outcome: one that used a GPU and then
failed still used it. ``record()`` never blocks and never raises; a full queue
or a store that fails twice spills records to the journal
(``fairgate.accounting.journal``: they are written later, and survive SIGKILL),
and loses, counted in ``Recorder.stats`` and the callbacks and logged at
error, only those the journal could not hold. docs/accounting.md has the guarantees.

Errors::

    BadRequest (fairgate.core.errors)   a report asked with a bad date, group,
                                        filter or format (400 in the admin API)
    StoreUnavailable                    a report could not be read (503); the
                                        recorder never raises it, it counts it
"""

from fairgate.accounting.alerts import Alerter, SoftLimitAlert
from fairgate.accounting.cost import ModelCost, Prices, TokenCounts, prices_by_model
from fairgate.accounting.delivery import AlertDelivery, SmtpTarget, WebhookTarget
from fairgate.accounting.formats import (
    FORMATS,
    MEDIA_TYPES,
    check_format,
    gpu_hours,
    render,
    to_csv,
    to_json,
    to_parsable2,
)
from fairgate.accounting.record import UsageRecord
from fairgate.accounting.recorder import Recorder, RecorderStats, UsageWriter
from fairgate.accounting.reports import (
    DEFAULT_GROUP_BY,
    GROUPS,
    SpendReport,
    key_spend,
    parse_day,
    parse_group_by,
    spend,
)
from fairgate.accounting.signup_notices import SignUpNotices
from fairgate.accounting.store_writer import StoreUsageWriter
from fairgate.store.usage_records import SpendRow

__all__ = [
    "DEFAULT_GROUP_BY",
    "FORMATS",
    "GROUPS",
    "MEDIA_TYPES",
    "AlertDelivery",
    "Alerter",
    "ModelCost",
    "Prices",
    "Recorder",
    "RecorderStats",
    "SignUpNotices",
    "SmtpTarget",
    "SoftLimitAlert",
    "SpendReport",
    "SpendRow",
    "StoreUsageWriter",
    "TokenCounts",
    "UsageRecord",
    "UsageWriter",
    "WebhookTarget",
    "check_format",
    "gpu_hours",
    "key_spend",
    "parse_day",
    "parse_group_by",
    "prices_by_model",
    "render",
    "spend",
    "to_csv",
    "to_json",
    "to_parsable2",
]
