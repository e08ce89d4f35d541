"""The simulator's settings: one frozen object built from the command line (or by a test).

Every field has the meaning of the ``fairgate sim`` flag of the same name; see
``docs/sim.md`` for the model behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FaultSettings", "Personality", "SchedulingPolicy", "SimConfig"]

SchedulingPolicy = Literal["priority", "fcfs"]
Personality = Literal["vllm", "llama-server"]


@dataclass(frozen=True, slots=True)
class FaultSettings:
    """Faults armed at start-up. Stalls and closes set here apply to every request.

    Seconds are non-negative; ``0`` (or ``None`` for ``close_mid_stream``) means off.
    ``fail_next`` counts requests, ``stall_mid_stream_after`` and ``close_mid_stream``
    count streamed tokens.
    """

    fail_next: int = 0
    fail_status: int = 503
    stall_before_headers: float = 0.0
    stall_before_first_token: float = 0.0
    stall_mid_stream: float = 0.0
    stall_mid_stream_after: int = 1
    close_mid_stream: int | None = None
    metrics_delay: float = 0.0

    def __post_init__(self) -> None:
        if self.fail_next < 0:
            raise ValueError("fail-next must be >= 0")
        if not 400 <= self.fail_status <= 599:
            raise ValueError("fail-status must be an HTTP error status (400-599)")
        for name in (
            "stall_before_headers",
            "stall_before_first_token",
            "stall_mid_stream",
            "metrics_delay",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name.replace('_', '-')} must be >= 0 seconds")
        if self.stall_mid_stream_after < 0:
            raise ValueError("stall-mid-stream-after must be >= 0 tokens")
        if self.close_mid_stream is not None and self.close_mid_stream < 0:
            raise ValueError("close-mid-stream must be >= 0 tokens")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything ``fairgate sim`` needs; validated on construction (``ValueError``).

    Units: ``tokens_per_second`` per running sequence (``0`` = answer instantly, no
    scheduler); ``ttft`` seconds of prefill for a prompt with nothing cached;
    ``kv_blocks`` × ``block_size`` tokens of KV cache; ``max_model_len`` tokens
    (``None``: the whole KV cache). ``eos_after`` makes every answer end (finish
    reason ``stop``) after that many tokens even when ``max_tokens`` allows more, as a
    model reaching its end-of-sequence token does; a body's ``ignore_eos: true``
    overrides it (``None``: answers run to ``max_tokens``).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    models: tuple[str, ...] = ("sim-model",)
    tokens_per_second: float = 30.0
    ttft: float = 0.1
    max_num_seqs: int = 256
    kv_blocks: int = 4096
    block_size: int = 16
    max_model_len: int | None = None
    max_tokens_default: int = 64
    eos_after: int | None = None
    scheduling_policy: SchedulingPolicy = "priority"
    prefix_caching: bool = True
    api_key: str | None = None
    personality: Personality = "vllm"
    record: int = 256
    seed: int = 0
    embedding_dim: int = 256
    shutdown_timeout: float = 5.0
    faults: FaultSettings = field(default_factory=FaultSettings)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError("port must be in 0..65535")
        if not self.models or any(not m.strip() for m in self.models):
            raise ValueError("at least one non-empty model name is required")
        if len(set(self.models)) != len(self.models):
            raise ValueError("model names must be unique")
        if self.tokens_per_second < 0:
            raise ValueError("tokens-per-second must be >= 0 (0 answers instantly)")
        if self.ttft < 0:
            raise ValueError("ttft must be >= 0 seconds")
        for name in ("max_num_seqs", "kv_blocks", "block_size", "max_tokens_default"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1")
        if self.eos_after is not None and self.eos_after < 1:
            raise ValueError("eos-after must be >= 1")
        if self.max_model_len is not None and not 2 <= self.max_model_len <= self.kv_tokens:
            raise ValueError(
                f"max-model-len must be in 2..{self.kv_tokens} (kv-blocks × block-size)"
            )
        if self.scheduling_policy not in ("priority", "fcfs"):
            raise ValueError("scheduling-policy must be priority or fcfs")
        if self.personality not in ("vllm", "llama-server"):
            raise ValueError("personality must be vllm or llama-server")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api-key must not be empty")
        if self.record < 0:
            raise ValueError("record must be >= 0 (0 keeps no record)")
        if not 1 <= self.embedding_dim <= 65536:
            raise ValueError("embedding-dim must be in 1..65536")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown-timeout must be >= 0 seconds")

    @property
    def kv_tokens(self) -> int:
        """Tokens the whole KV cache holds."""
        return self.kv_blocks * self.block_size

    @property
    def context_length(self) -> int:
        """The longest prompt + completion a request may ask for, in tokens."""
        return self.max_model_len if self.max_model_len is not None else self.kv_tokens

    @property
    def instant(self) -> bool:
        """``--speed 0``: no scheduler, no KV cache, no sleeps."""
        return self.tokens_per_second == 0
