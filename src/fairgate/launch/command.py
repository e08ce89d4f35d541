"""The real argument list and environment of each engine kind.

- vLLM: `vllm serve MODEL --host H --port P --tensor-parallel-size T
  --scheduling-policy priority --served-model-name NAME …`; the API key in
  `VLLM_API_KEY` (vLLM reads it there), never on the command line where `ps` shows it.
- llama-server: `llama-server -m MODEL --host H --port P --alias NAME
  --api-key-file FILE …`.
- sim: `python -m fairgate sim --host H --port P --model NAME --api-key-file FILE …`.

`CUDA_VISIBLE_DEVICES` is the replica's GPUs (empty for a replica without any, so an
engine cannot wander onto GPUs it was not given), with `CUDA_DEVICE_ORDER=PCI_BUS_ID`:
the indices are NVML's, which count in PCI bus order, while CUDA by default counts the
fastest GPU first. Where the agent's own GPUs are named otherwise (inside a Slurm
allocation), `devices` gives the names to hand over instead. Extra arguments may not set an
option the agent sets: a profile cannot move an engine off loopback, change its port
or priority scheduling, or put a key in the argument list; nor can its model or served
name, which begin with a dash (`--api-key=…` as a model name).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from fairgate.launch.profile import Profile

__all__ = ["RESERVED", "Command", "ProfileError", "check_args", "command"]


class ProfileError(ValueError):
    """A profile the agent refuses to launch (the reason names the field)."""


RESERVED: dict[str, frozenset[str]] = {
    "vllm": frozenset(
        {
            "--host",
            "--port",
            "--tensor-parallel-size",
            "-tp",
            "--scheduling-policy",
            "--served-model-name",
            "--api-key",
            "--uds",
        }
    ),
    "llama-server": frozenset(
        {"-m", "--model", "--host", "--port", "--alias", "-a", "--api-key", "--api-key-file"}
    ),
    "sim": frozenset({"--host", "--port", "--model", "--api-key", "--api-key-file"}),
}
"""Options the agent sets itself, per engine kind (also refused as `--opt=value`; for vLLM
also as `--opt_name`, as any abbreviation argparse would expand to one, and `--config`)."""


@dataclass(frozen=True, slots=True)
class Command:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    """Variables to add to the agent's environment for this process."""


def check_args(profile: Profile) -> None:
    for name, value in (("model", profile.model), ("served_name", profile.served_name)):
        if value.startswith("-"):
            # vLLM's model is a positional argument, and vLLM's and the simulator's
            # parsers read a leading dash as an option: `--api-key=x` as vLLM's model
            # would set its key. No model or served name begins with one.
            raise ProfileError(
                f"{name}: {value!r} begins with '-' and the engine would read it as an option"
            )
    reserved = RESERVED[profile.engine]
    for arg in profile.args:
        name = arg.split("=", 1)[0]
        if name in reserved:
            raise ProfileError(
                f"args: {name} is set by the agent for {profile.engine} and may not be given"
            )
        if profile.engine == "vllm":
            _check_vllm_spelling(name, reserved)


def _check_vllm_spelling(name: str, reserved: frozenset[str]) -> None:
    """Refuse `name` when vLLM would read it as a reserved option or a config file.

    vLLM's FlexibleArgumentParser turns `_` into `-` in a `--` option (up to its first
    `.`, where a nested `--opt.key` begins), and argparse takes any unambiguous prefix of
    an option (`--hos` is `--host`, `-t` is `-tp`); so a spelling is refused when it is
    a prefix of a reserved option, and a single-dash one also when it starts with one
    (`-tp8`). `--config FILE` would read any option from a YAML file, reserved ones too.
    """
    if name.startswith("--"):
        stem = name[2:].split(".", 1)[0].replace("_", "-")
        if not stem:
            return
        spelled = "--" + stem
        meant = [r for r in sorted(reserved) if r.startswith("--") and r.startswith(spelled)]
        if "--config".startswith(spelled):
            raise ProfileError(
                f"args: {name} is refused for vllm: a config file could set what the agent sets"
            )
    elif name.startswith("-") and len(name) > 1:
        meant = [
            r
            for r in sorted(reserved)
            if not r.startswith("--") and (r.startswith(name) or name.startswith(r))
        ]
    else:
        return
    if meant:
        raise ProfileError(
            f"args: {name} is set by the agent for vllm (vLLM reads it as {' or '.join(meant)})"
            " and may not be given"
        )


def command(
    profile: Profile, *, api_key: str | None = None, devices: Sequence[str] | None = None
) -> Command:
    """The launch of `profile`; `api_key` is the content of its api_key_file, if any;
    `devices` are the CUDA_VISIBLE_DEVICES entries of its GPUs (default: their indices)."""
    check_args(profile)
    visible = devices if devices is not None else [str(g) for g in profile.gpus]
    env = {"CUDA_VISIBLE_DEVICES": ",".join(visible), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if profile.engine == "vllm":
        argv = [
            "vllm",
            "serve",
            profile.model,
            "--host",
            profile.host,
            "--port",
            str(profile.port),
            "--tensor-parallel-size",
            str(profile.tensor_parallel_size),
            "--scheduling-policy",
            "priority",
            "--served-model-name",
            profile.served_name,
        ]
        if api_key is not None:
            env["VLLM_API_KEY"] = api_key
    elif profile.engine == "llama-server":
        argv = [
            "llama-server",
            "-m",
            profile.model,
            "--host",
            profile.host,
            "--port",
            str(profile.port),
            "--alias",
            profile.served_name,
        ]
        if profile.api_key_file is not None:
            argv += ["--api-key-file", str(profile.api_key_file)]
    else:
        argv = [
            sys.executable,
            "-m",
            "fairgate",
            "sim",
            "--host",
            profile.host,
            "--port",
            str(profile.port),
            "--model",
            profile.served_name,
        ]
        if profile.api_key_file is not None:
            argv += ["--api-key-file", str(profile.api_key_file)]
    return Command(argv=(*argv, *profile.args), env=env)
