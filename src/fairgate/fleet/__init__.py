"""The fleet's wire: the node agent's stream to the control plane (gRPC, mutual TLS).

`proto/fairgate/fleet/v1/fleet.proto` is the contract; `fleet/v1/` holds the code
grpcio-tools generates from it, checked in (tests/fleet/test_generated.py fails when
it is not current; `python -m fairgate.fleet.generate` rewrites it).
"""
