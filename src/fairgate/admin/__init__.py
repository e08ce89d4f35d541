"""The admin listener: the admin API with roles, plus /healthz, /readyz and /metrics.

build_admin_app(...)   the whole admin listener (FastAPI app behind the body limit)
build_health_app(...)  health, readiness and metrics alone (no store configured)
"""

from fairgate.admin.app import build_admin_app
from fairgate.admin.health import build_health_app

__all__ = ["build_admin_app", "build_health_app"]
