"""``python -m tests.oidc_provider --port 0``: serve the test provider and print its issuer URL."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

import uvicorn
from tests.oidc_provider.server import READY_PREFIX, Provider, build_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.oidc_provider", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--audience", default="fairgate", help="the aud a mint gets by default")
    parser.add_argument(
        "--issuer-path", default="", help="a path after host:port in the issuer, e.g. /realms/test"
    )
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    provider = Provider.create(audience=args.audience)
    provider.issuer = f"http://{args.host}:{port}{args.issuer_path.rstrip('/')}"
    app = build_app(provider)
    if args.issuer_path:
        from starlette.applications import Starlette
        from starlette.routing import Mount

        app = Starlette(routes=[Mount(args.issuer_path.rstrip("/"), app=app)])
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    print(READY_PREFIX + provider.issuer, flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    sys.exit(0)


if __name__ == "__main__":
    main()
