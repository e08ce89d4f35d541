"""The public names of fairgate.accounting are exactly these."""

from __future__ import annotations

import fairgate.accounting


def test_accounting_exports() -> None:
    assert sorted(fairgate.accounting.__all__) == [
        "AlertDelivery",
        "Alerter",
        "DEFAULT_GROUP_BY",
        "FORMATS",
        "GROUPS",
        "MEDIA_TYPES",
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
    for name in fairgate.accounting.__all__:
        assert getattr(fairgate.accounting, name) is not None


def test_the_store_writer_is_a_usage_writer() -> None:
    from fairgate.accounting import StoreUsageWriter, UsageWriter

    writer: UsageWriter = StoreUsageWriter.__new__(StoreUsageWriter)
    assert callable(writer.write)
