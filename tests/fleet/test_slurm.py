"""`fairgate agent --slurm`: the allocation's GPUs and end time from the job's environment
(the variables Slurm exports to a job), and the agent's registration carrying them."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from tests.fleet.plane import Plane, Recording, until
from tests.fleet.test_agent_process import start_agent
from tests.inventory.test_inventory import smi_inventory
from tests.tls_certs import Pki

from fairgate.fleet.slurm import Allocation, SlurmError, parse_time_limit
from fairgate.inventory import Inventory


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("2:00:00", 7200),
        ("1-0", 86400),
        ("1-02:30", 86400 + 2 * 3600 + 30 * 60),
        ("2-01:02:03", 2 * 86400 + 3723),
        ("UNLIMITED", None),
        ("", None),
        ("1:2:3:4", None),
    ],
)
def test_time_limits_in_slurms_formats(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


def test_outside_a_job_it_says_so() -> None:
    with pytest.raises(SlurmError, match="SLURM_JOB_ID is not set"):
        Allocation.from_env({"CUDA_VISIBLE_DEVICES": "0"})


def test_the_end_time_from_the_environment() -> None:
    job = {"SLURM_JOB_ID": "42"}
    assert Allocation.from_env({**job, "SLURM_JOB_END_TIME": "1800000000"}).ends_at == 1800000000
    started = {**job, "SLURM_JOB_START_TIME": "1800000000", "SBATCH_TIMELIMIT": "1-00:00:00"}
    assert Allocation.from_env(started).ends_at == 1800000000 + 86400
    assert Allocation.from_env({**job, "SLURM_JOB_START_TIME": "1800000000"}).ends_at == 0
    assert Allocation.from_env(job).ends_at == 0


def hgx() -> Inventory:
    return smi_inventory("hgx-h100")


def test_node_indices_with_the_names_cuda_has_inside_the_job() -> None:
    # The node shows all 8 GPUs; the job has 4 and 5, which CUDA calls 0 and 1 inside it.
    job = Allocation.from_env(
        {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}
    )
    mine = job.restrict(hgx())
    assert [g.index for g in mine.gpus] == [4, 5]
    assert job.devices(mine, (5,)) == ("1",)
    assert job.devices(mine, (4, 5)) == ("0", "1")


def test_uuids_name_the_gpus() -> None:
    inv = hgx()
    uuids = f"{inv.gpus[6].uuid},{inv.gpus[2].uuid}"
    job = Allocation.from_env({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": uuids})
    mine = job.restrict(inv)
    assert [g.index for g in mine.gpus] == [2, 6]
    assert job.devices(mine, (2,)) == (inv.gpus[2].uuid,)


def test_a_cgroup_that_hides_the_other_gpus() -> None:
    # Inside the job the node shows only its 2 GPUs, numbered 0 and 1.
    inv = hgx()
    two = inv.model_copy(update={"gpus": inv.gpus[:2]})
    job = Allocation.from_env(
        {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}
    )
    assert [g.index for g in job.restrict(two).gpus] == [0, 1]
    assert job.devices(two, (1,)) == ("1",)


def test_indices_alone_and_no_gpus_at_all() -> None:
    job = Allocation.from_env({"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "3"})
    assert [g.index for g in job.restrict(hgx()).gpus] == [3]
    none = Allocation.from_env({"SLURM_JOB_ID": "7"})
    assert none.restrict(hgx()).gpus == ()


@pytest.mark.slow
async def test_the_agent_in_a_job_registers_its_gpus_and_end_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane = Plane(Pki.make(tmp_path))
    recording = plane.service
    assert isinstance(recording, Recording)
    await plane.start()
    recorded = tmp_path / "inventory.json"
    recorded.write_text(hgx().to_json())
    for name, value in {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_GPUS": "4,5",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SLURM_JOB_END_TIME": "1900000000",
    }.items():
        monkeypatch.setenv(name, value)
    agent = await start_agent(
        plane,
        tmp_path,
        "gpu07",
        "gpu07",
        "--slurm",
        "--inventory",
        str(recorded),
        "--state-dir",
        str(tmp_path / "state"),
    )
    try:
        await until(lambda: "gpu07" in recording.nodes, timeout=60)
        node = recording.nodes["gpu07"]
        assert [g.index for g in node.inventory.gpus] == [4, 5]
        assert node.labels == {"slurm_job": "4242"}
        register = recording.received[0].register
        assert register.allocation_ends_at == 1900000000
        await until(lambda: any(m.HasField("heartbeat") for m in recording.received), timeout=30)
        beat = next(m.heartbeat for m in recording.received if m.HasField("heartbeat"))
        assert beat.allocation_ends_at == 1900000000
        await agent.terminate()
    finally:
        await agent.kill()
        await plane.stop()


async def test_slurm_outside_a_job_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fairgate",
        "agent",
        "--slurm",
        "--control-plane",
        "127.0.0.1:1",
        "--cert",
        "c",
        "--key",
        "k",
        "--ca",
        "a",
        "--node-name",
        "n",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"SLURM_JOB_ID is not set" in err and b"Traceback" not in err
