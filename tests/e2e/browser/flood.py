"""A sign-in flood as its own process: wrong passwords from several loopback addresses.

    python -m tests.e2e.browser.flood URL --addresses 127.0.0.2,127.0.0.3 --seconds 20

Each worker loads the sign-in form (its hidden fields and cookies, as a browser would),
then posts a wrong password for one of a few victims' addresses or an unknown address,
again and again, until ``--seconds`` pass, ``--attempts`` posts were made in all, or a
line arrives on stdin (the parent's "stop"). It prints one JSON line: the count of answers
per status, and the posts made. A separate process so that the flood's own CPU does not
share an interpreter (and its lock) with the streams being measured.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import sys
import time
from collections import Counter

import httpx
import orjson

_HIDDEN = re.compile(r"<input[^>]*type=\"?hidden\"?[^>]*>", re.IGNORECASE)
_NAME = re.compile(r"name=\"([^\"]+)\"")
_VALUE = re.compile(r"value=\"([^\"]*)\"")

VICTIMS = ("alice@example.org", "bob@example.org", "carol@example.org")


def hidden_fields(html: str) -> dict[str, str]:
    """The hidden inputs of a page (the CSRF token of the sign-in form, if it has one)."""
    fields: dict[str, str] = {}
    for tag in _HIDDEN.findall(html):
        name, value = _NAME.search(tag), _VALUE.search(tag)
        if name:
            fields[name.group(1)] = value.group(1) if value else ""
    return fields


async def _worker(
    url: str, address: str, deadline: float, budget: list[int], statuses: Counter[int]
) -> None:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:
        while time.monotonic() < deadline and budget[0] > 0:
            budget[0] -= 1
            try:
                form = await client.get(url + "/signin")
                fields = hidden_fields(form.text)
                victim = secrets.choice([*VICTIMS, f"nobody-{secrets.token_hex(4)}@example.org"])
                fields.update(email=victim, password="wrong-" + secrets.token_hex(8))
                # The form's cookie is Secure: httpx keeps it from http://, a browser on
                # localhost would send it, so the flood sends it as a browser would.
                jar = "; ".join(f"{k}={v}" for k, v in form.cookies.items())
                answer = await client.post(
                    url + "/signin", data=fields, headers={"cookie": jar} if jar else {}
                )
                statuses[answer.status_code] += 1
            except httpx.HTTPError:
                statuses[0] += 1


async def _flood(url: str, addresses: list[str], workers: int, seconds: float, cap: int) -> dict:
    statuses: Counter[int] = Counter()
    budget = [cap]
    deadline = time.monotonic() + seconds
    loop = asyncio.get_running_loop()
    stop = loop.run_in_executor(None, sys.stdin.readline)
    tasks = [
        asyncio.ensure_future(
            _worker(url, addresses[i % len(addresses)], deadline, budget, statuses)
        )
        for i in range(workers)
    ]
    done = asyncio.ensure_future(asyncio.gather(*tasks))
    await asyncio.wait([done, stop], return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(done, return_exceptions=True)
    return {"statuses": {str(k): v for k, v in sorted(statuses.items())}, "posts": cap - budget[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--addresses", default="127.0.0.2,127.0.0.3,127.0.0.4")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--attempts", type=int, default=5000)
    args = parser.parse_args()
    result = asyncio.run(
        _flood(args.url, args.addresses.split(","), args.workers, args.seconds, args.attempts)
    )
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
