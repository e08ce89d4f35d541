"""What the control plane asks a node to run: one engine replica."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["EngineKind", "Profile"]

EngineKind = Literal["vllm", "llama-server", "sim"]


@dataclass(frozen=True, slots=True)
class Profile:
    engine: EngineKind
    model: str
    """A model name the engine downloads (vLLM: a Hugging Face id) or a local path
    (absolute, or starting with `./` or `~`)."""
    served_name: str
    """The name the gateway sends as `model` (vLLM's --served-model-name)."""
    port: int
    host: str = "127.0.0.1"
    gpus: tuple[int, ...] = ()
    """GPU indices on the node (CUDA_VISIBLE_DEVICES); empty only for `sim`."""
    tensor_parallel_size: int = 1
    args: tuple[str, ...] = ()
    """Further engine arguments, appended; they may not set what the agent sets."""
    api_key_file: Path | None = None
    """The engine's API key, read by the agent and handed over without the command line."""

    def local_model_path(self) -> Path | None:
        """The model's path when it names a local file or directory, else None."""
        if self.model.startswith(("/", "./", "../", "~")):
            return Path(self.model).expanduser()
        return None
