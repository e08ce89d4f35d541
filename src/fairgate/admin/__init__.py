"""The admin listener: health, readiness and metrics today; the admin API joins it later."""
