"""Where a model's replicas are: a static list of base URLs, or every address of a DNS name.

``DnsSource`` resolves all A/AAAA records of the base URL's host (a Kubernetes headless
Service has one per ready pod) and yields one base URL per address. ``dns://host:port/v1``
is the same as ``http://host:port/v1`` with DNS discovery on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit


class ReplicaSource(Protocol):
    async def urls(self) -> list[str]:
        """The replicas' base URLs now (raises if they cannot be found out)."""
        ...


class StaticSource:
    def __init__(self, urls: list[str]) -> None:
        self._urls = list(dict.fromkeys(urls))

    async def urls(self) -> list[str]:
        return list(self._urls)


class DnsSource:
    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if not parts.hostname:
            raise ValueError(f"no host in {base_url!r}")
        self.scheme = "http" if parts.scheme == "dns" else parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.path = parts.path

    async def urls(self) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        addresses = sorted({str(info[4][0]) for info in infos})
        return [self._url(a) for a in addresses]

    def _url(self, address: str) -> str:
        host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
        return urlunsplit((self.scheme, f"{host}:{self.port}", self.path, "", ""))


def origin(base_url: str) -> str:
    """``http://10.0.0.5:8000/v1`` -> ``http://10.0.0.5:8000`` (where /health lives)."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))
