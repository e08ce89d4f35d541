"""Engine launches: the argument lists the agent builds, the checks it runs before
launching, and one launch of the simulated engine for real from what `command` built."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.inventory.test_inventory import smi_inventory
from tests.redis_server import free_port

from fairgate.inventory import Inventory
from fairgate.launch import Profile, ProfileError, check, command


def test_vllm_command_keeps_the_key_off_the_command_line() -> None:
    profile = Profile(
        engine="vllm",
        model="meta-llama/Llama-3.3-70B-Instruct",
        served_name="llama-3.3-70b",
        port=8001,
        gpus=(4, 5, 6, 7),
        tensor_parallel_size=4,
        args=("--max-model-len", "32768"),
    )
    launch = command(profile, api_key="sk-engine-secret")
    assert launch.argv == (
        "vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct",
        "--host", "127.0.0.1", "--port", "8001",
        "--tensor-parallel-size", "4", "--scheduling-policy", "priority",
        "--served-model-name", "llama-3.3-70b",
        "--max-model-len", "32768",
    )  # fmt: skip
    assert launch.env == {
        "CUDA_VISIBLE_DEVICES": "4,5,6,7",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "VLLM_API_KEY": "sk-engine-secret",
    }
    assert not any("sk-engine-secret" in arg for arg in launch.argv)


def test_llama_server_command() -> None:
    profile = Profile(
        engine="llama-server",
        model="/models/qwen2.5-7b-q4_k_m.gguf",
        served_name="qwen-7b",
        port=8002,
        gpus=(1,),
        api_key_file=Path("/run/secrets/engine.key"),
        args=("-c", "8192"),
    )
    launch = command(profile)
    assert launch.argv == (
        "llama-server", "-m", "/models/qwen2.5-7b-q4_k_m.gguf",
        "--host", "127.0.0.1", "--port", "8002", "--alias", "qwen-7b",
        "--api-key-file", "/run/secrets/engine.key", "-c", "8192",
    )  # fmt: skip
    assert launch.env == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.parametrize(
    ("engine", "arg"),
    [
        ("vllm", "--host=0.0.0.0"),
        ("vllm", "--api-key"),
        ("vllm", "--scheduling-policy"),
        ("vllm", "-tp"),
        ("llama-server", "--port"),
        ("sim", "--api-key=x"),
    ],
)
def test_args_may_not_set_what_the_agent_sets(engine: str, arg: str) -> None:
    profile = Profile(
        engine=engine,
        model="m",
        served_name="m",
        port=8000,
        gpus=(0,),  # type: ignore[arg-type]
        args=(arg, "v"),
    )
    with pytest.raises(ProfileError, match=f"args: {arg.split('=')[0]} is set by the agent"):
        command(profile)


def _vllm_reading(args: tuple[str, ...]) -> argparse.Namespace:
    """How `vllm serve` reads `args`: vLLM's FlexibleArgumentParser turns `_` into `-` in
    a `--` option, and argparse (allow_abbrev) expands prefixes."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    for option in ("--host", "--port", "--scheduling-policy", "--served-model-name"):
        parser.add_argument(option)
    for option in ("--api-key", "--uds", "--max-model-len", "--hf-token", "--config-format"):
        parser.add_argument(option)
    parser.add_argument("--tensor-parallel-size", "-tp")
    parser.add_argument("--config")
    flexible = []
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        flexible.append(arg)
    return parser.parse_args(flexible)


@pytest.mark.parametrize(
    ("args", "reserved"),
    [
        (("--scheduling_policy", "fcfs"), "scheduling_policy"),
        (("--served_model_name", "other-model"), "served_model_name"),
        (("--api_key", "sk-in-ps"), "api_key"),
        (("--hos", "0.0.0.0"), "host"),
        (("--tensor_parallel_size=8",), "tensor_parallel_size"),
        (("--schedul=fcfs",), "scheduling_policy"),
        (("--served-model=x",), "served_model_name"),
        (("--po", "9"), "port"),
        (("-t", "8"), "tensor_parallel_size"),
        (("-tp=8",), "tensor_parallel_size"),
        (("--config", "/tmp/engine.yaml"), "config"),
        (("--config=/tmp/engine.yaml",), "config"),
    ],
)
def test_vllm_args_may_not_reach_a_reserved_option_by_another_spelling(
    args: tuple[str, ...], reserved: str
) -> None:
    assert getattr(_vllm_reading(args), reserved) is not None  # vLLM would take it
    profile = Profile(engine="vllm", model="m", served_name="chat", port=8000, gpus=(0,), args=args)
    with pytest.raises(ProfileError, match=f"args: {re.escape(args[0].split('=')[0])} is"):
        command(profile)


def test_vllm_args_that_are_not_reserved_pass() -> None:
    args = ("--max-model-len", "32768", "--hf_token=t", "--config-format", "auto", "-O3")
    profile = Profile(engine="vllm", model="m", served_name="chat", port=8000, gpus=(0,), args=args)
    assert command(profile).argv[-len(args) :] == args


def test_llama_server_args_are_not_read_as_prefixes() -> None:
    """llama-server matches options exactly: -mg (main GPU) is not -m."""
    profile = Profile(
        engine="llama-server", model="m", served_name="m", port=8000, gpus=(0,),
        args=("-mg", "1", "--alias_x", "y"),
    )  # fmt: skip
    assert command(profile).argv[-4:] == ("-mg", "1", "--alias_x", "y")


@pytest.mark.parametrize("engine", ["vllm", "llama-server", "sim"])
def test_a_model_or_served_name_beginning_with_a_dash_is_refused(engine: str) -> None:
    """The agent launches what the control plane sends: a model `--api-key=x` would be
    read by vLLM as its key option, past the reserved-option check on `args`."""
    inv = smi_inventory("pcie-a6000-pairs")
    dashed = Profile(engine=engine, model="--api-key=x", served_name="m", port=1, gpus=(0,))  # type: ignore[arg-type]
    assert (
        "model: '--api-key=x' begins with '-' and the engine would read it as an option"
        in check(dashed, inv, which=lambda _: "/bin/true", port_free=lambda *_: True)
    )
    with pytest.raises(ProfileError):
        command(dashed)
    named = Profile(engine=engine, model="m", served_name="-h", port=1, gpus=(0,))  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match="served_name: '-h' begins with '-'"):
        command(named)


def test_check_names_every_problem_at_once(tmp_path: Path) -> None:
    inv = smi_inventory("pcie-a6000-pairs")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        profile = Profile(
            engine="vllm",
            model=str(tmp_path / "no-such-model"),
            served_name="m",
            port=port,
            gpus=(1, 2, 7),
            tensor_parallel_size=2,
            args=("--port", "9"),
        )
        problems = check(profile, inv, claimed={1}, which=lambda _: None)
    assert problems == [
        "args: --port is set by the agent for vllm and may not be given",
        f"port {port} on 127.0.0.1 is in use",
        "vllm is not installed on this node (PATH)",
        f"the model path {tmp_path / 'no-such-model'} does not exist on this node",
        "3 GPUs is not a multiple of tensor_parallel_size 2",
        "GPUs [7] do not exist (the node has 4)",
        "GPU 1 is not free (held by another replica)",
        "GPU 2 is not free (2311 MiB in use)",
        "a tensor-parallel group of 2 spans 2 NVLink domains (GPUs [1, 2, 7])",
    ]


def test_check_passes_a_profile_that_fits(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    profile = Profile(
        engine="vllm",
        model=str(model),
        served_name="m",
        port=free_port(),
        gpus=(0, 1),
        tensor_parallel_size=2,
    )
    inv = smi_inventory("pcie-a6000-pairs")
    assert check(profile, inv, which=lambda name: f"/usr/bin/{name}") == []
    busy = smi_inventory("hgx-h100")
    profile = Profile(
        engine="vllm",
        model="org/model",
        served_name="m",
        port=free_port(),
        gpus=(4, 5),
        tensor_parallel_size=2,
    )
    assert check(profile, busy, which=lambda name: f"/usr/bin/{name}") == [
        "GPU 5 is not free (1 compute processes)"
    ]


def test_a_gpu_engine_without_gpus_is_refused_but_the_simulator_runs_without() -> None:
    port = free_port()
    none = Inventory(source="none")
    gpu_less = Profile(engine="vllm", model="org/m", served_name="m", port=port)
    assert check(gpu_less, none, which=lambda n: n) == [
        "vllm needs at least one GPU; the profile gives none"
    ]
    sim = Profile(engine="sim", model="sim", served_name="m", port=port)
    assert check(sim, none) == []


def test_the_simulator_launches_from_the_built_command(tmp_path: Path) -> None:
    key_file = tmp_path / "engine.key"
    key_file.write_text("sim-engine-key\n")
    port = free_port()
    profile = Profile(
        engine="sim",
        model="sim",
        served_name="tiny",
        port=port,
        api_key_file=key_file,
        args=("--speed", "0"),
    )
    assert check(profile, Inventory(source="none")) == []
    launch = command(profile)
    proc = subprocess.Popen(
        launch.argv, env={**launch.env, "PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert f"listening on http://127.0.0.1:{port}" in proc.stdout.readline()
        url = f"http://127.0.0.1:{port}/v1/models"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        refused.value.close()
        request = urllib.request.Request(url, headers={"Authorization": "Bearer sim-engine-key"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert b'"tiny"' in answer.read()
        # The port is taken now: a second launch on it is refused before it starts.
        assert check(profile, Inventory(source="none")) == [f"port {port} on 127.0.0.1 is in use"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()
