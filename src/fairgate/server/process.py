"""The gateway as a child process, for tests, the demo and benchmarks.

with GatewayProcess(config_path) as gw:
    openai.OpenAI(base_url=gw.url + "/v1", api_key="…")
    urllib.request.urlopen(gw.admin_url + "/readyz")
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

from fairgate.sim.process import ServerProcess

__all__ = ["CONTROL_PLANE_PREFIX", "READY_PREFIX", "ControlPlaneProcess", "GatewayProcess"]

READY_PREFIX = "fairgate listening on "
CONTROL_PLANE_PREFIX = "fairgate control-plane listening on "


class _Command(ServerProcess):
    """``fairgate COMMAND -c CONFIG *args``, ready once it prints ``prefix``."""

    def __init__(
        self,
        command: str,
        prefix: str,
        config: str | Path,
        args: Sequence[str],
        env: Mapping[str, str] | None,
        startup_timeout: float,
        stop_timeout: float,
        stderr: Path | None,
    ) -> None:
        self.config = Path(config)
        argv = [sys.executable, "-m", "fairgate", command, "-c", str(config), *args]
        super().__init__(
            argv,
            prefix,
            env=env,
            startup_timeout=startup_timeout,
            stop_timeout=stop_timeout,
            stderr=stderr,
        )
        self.admin_url = ""


class GatewayProcess(_Command):
    """``fairgate serve -c CONFIG *args``; ``.url`` (client listener) and ``.admin_url``."""

    def __init__(
        self,
        config: str | Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        stderr: Path | None = None,
    ) -> None:
        super().__init__(
            "serve", READY_PREFIX, config, args, env, startup_timeout, stop_timeout, stderr
        )

    def start(self) -> Self:
        super().start()
        client, _, admin = self.url.partition(" admin ")
        self.url, self.admin_url = client.strip(), admin.strip()
        return self

    def wait(self, timeout: float) -> int:
        """The exit status once the process ends by itself (``TimeoutExpired`` after ``timeout`` s).

        Unlike ``stop`` it sends no signal: for watching a shutdown already under way.
        """
        if self._proc is None:
            raise RuntimeError("the gateway was not started")
        return self._proc.wait(timeout)


class ControlPlaneProcess(_Command):
    """``fairgate control-plane -c CONFIG``; ``.admin_url`` and ``.agents`` (HOST:PORT)."""

    def __init__(
        self,
        config: str | Path,
        *,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        stderr: Path | None = None,
    ) -> None:
        super().__init__(
            "control-plane",
            CONTROL_PLANE_PREFIX,
            config,
            (),
            env,
            startup_timeout,
            stop_timeout,
            stderr,
        )
        self.agents = ""

    def start(self) -> Self:
        super().start()
        admin, _, agents = self.url.removeprefix("admin ").partition(" agents ")
        self.admin_url, self.agents = admin.strip(), agents.strip()
        return self
