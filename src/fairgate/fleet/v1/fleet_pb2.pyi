from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "status", "applied")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    register: Register
    heartbeat: Heartbeat
    status: ReplicaStatus
    applied: Applied
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., status: _Optional[_Union[ReplicaStatus, _Mapping]] = ..., applied: _Optional[_Union[Applied, _Mapping]] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("node_name", "labels", "inventory_json", "running", "applied_version", "agent_version", "allocation_ends_at")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_JSON_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    APPLIED_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ENDS_AT_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    labels: _containers.ScalarMap[str, str]
    inventory_json: str
    running: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    applied_version: int
    agent_version: str
    allocation_ends_at: int
    def __init__(self, node_name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., inventory_json: _Optional[str] = ..., running: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., applied_version: _Optional[int] = ..., agent_version: _Optional[str] = ..., allocation_ends_at: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sequence", "inventory_json", "allocation_ends_at")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_JSON_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ENDS_AT_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    inventory_json: str
    allocation_ends_at: int
    def __init__(self, sequence: _Optional[int] = ..., inventory_json: _Optional[str] = ..., allocation_ends_at: _Optional[int] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("replica_id", "model", "state", "port", "gpus", "pid", "exit_code", "tail", "restarts", "adopted", "generation", "host")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    model: str
    state: str
    port: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    pid: int
    exit_code: int
    tail: _containers.RepeatedScalarFieldContainer[str]
    restarts: int
    adopted: bool
    generation: int
    host: str
    def __init__(self, replica_id: _Optional[str] = ..., model: _Optional[str] = ..., state: _Optional[str] = ..., port: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., tail: _Optional[_Iterable[str]] = ..., restarts: _Optional[int] = ..., adopted: _Optional[bool] = ..., generation: _Optional[int] = ..., host: _Optional[str] = ...) -> None: ...

class Applied(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("desired",)
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    desired: DesiredState
    def __init__(self, desired: _Optional[_Union[DesiredState, _Mapping]] = ...) -> None: ...

class DesiredState(_message.Message):
    __slots__ = ("version", "replicas", "heartbeat_interval_seconds")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    version: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaSpec]
    heartbeat_interval_seconds: float
    def __init__(self, version: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaSpec, _Mapping]]] = ..., heartbeat_interval_seconds: _Optional[float] = ...) -> None: ...

class ReplicaSpec(_message.Message):
    __slots__ = ("replica_id", "engine", "model", "served_name", "port", "gpus", "tensor_parallel_size", "args", "api_key_ref", "drain", "generation", "host", "api_key")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVED_NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    API_KEY_REF_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    engine: str
    model: str
    served_name: str
    port: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    tensor_parallel_size: int
    args: _containers.RepeatedScalarFieldContainer[str]
    api_key_ref: str
    drain: bool
    generation: int
    host: str
    api_key: str
    def __init__(self, replica_id: _Optional[str] = ..., engine: _Optional[str] = ..., model: _Optional[str] = ..., served_name: _Optional[str] = ..., port: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., tensor_parallel_size: _Optional[int] = ..., args: _Optional[_Iterable[str]] = ..., api_key_ref: _Optional[str] = ..., drain: _Optional[bool] = ..., generation: _Optional[int] = ..., host: _Optional[str] = ..., api_key: _Optional[str] = ...) -> None: ...
