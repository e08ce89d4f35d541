"""The simulated vLLM engine behind ``fairgate sim``.

Operators try fairgate with it without GPUs; tests, demos and benchmarks use it as the engine.

The engine model, step by step (every ``1 / tokens_per_second`` seconds):

    running first:  each running sequence makes one token; a token that needs a KV
                    block when none is free preempts max(running, key=(priority, arrival))
    then waiting:   only if nothing was preempted, admit heap.min() on (priority, arrival)
                    while the batch and the KV blocks allow; never preempt for it

Worked example, 8 blocks of 4 tokens, three requests of 3 prompt + 13 output tokens
(4 blocks each), a0 (priority 0), b5 and c5 (priority 5, c5 arriving last): all three
are admitted with one block each; when the blocks run out, c5 is preempted (largest
(5, latest arrival)), then b5 if needed; a0 never is. c5 resumes later where it stopped.

Modules, bottom up: ``tokenizer``, ``kv_cache`` (blocks, salted hash chain),
``sequence``, ``stats``, ``scheduler`` (pure), ``engine`` (the asyncio step loop),
``faults``, ``record``, ``inputs``, the output formats, ``app`` (raw ASGI),
``server`` (uvicorn), ``process`` (launching it as a child).

Exceptions of the package, none of which reaches a client as such:

    Exception
    ├── asgi.ClientGone             the client left while its body was being read
    └── generation.InjectedClose    raised on purpose to drop a connection mid-stream
    (request errors are fairgate.core.errors.GatewayError, rendered in vLLM's shape)
"""

from __future__ import annotations

from fairgate.sim.app import SimApp
from fairgate.sim.config import FaultSettings, SimConfig
from fairgate.sim.process import ServerProcess, SimProcess
from fairgate.sim.server import READY_PREFIX, serve

__all__ = [
    "READY_PREFIX",
    "FaultSettings",
    "ServerProcess",
    "SimApp",
    "SimConfig",
    "SimProcess",
    "serve",
]
