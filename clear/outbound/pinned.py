"""Connections to the addresses clear.outbound.policy checked, never to what a second DNS lookup might say.

HTTP: urllib3 is handed the address itself as the host to connect to, while the Host header and, for https, SNI and
the certificate check use the URL's host name. Proxies from the environment are not used (a proxy would resolve the
name again, out of our sight) and redirects are not followed (a 3xx is the answer).

git: it connects by itself, so it is told the address instead: curl's resolve list for http(s) (with redirects
off), ssh's HostName for ssh (the host key still checked under the name).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shlex
from collections.abc import Iterator, Mapping

import certifi
import urllib3
from urllib3.exceptions import NewConnectionError

from clear.outbound import policy
from clear.outbound.policy import IPAddress, OutboundTarget


def _trust() -> dict[str, str]:
    # The trust requests gave before: its CA bundle variables when an operator set them, else certifi.
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or certifi.where()
    return {"ca_cert_dir": bundle} if os.path.isdir(bundle) else {"ca_certs": bundle}


def outbound_pool(*, target: OutboundTarget, address: IPAddress, timeout: float) -> urllib3.HTTPConnectionPool:
    """A one-connection pool to `address` for `target`: https checks the certificate against the target's name."""
    common = {"host": str(address), "port": target.port, "timeout": urllib3.Timeout(connect=timeout, read=timeout),
              "retries": False, "maxsize": 1}
    if target.scheme == "http":
        return urllib3.HTTPConnectionPool(**common)
    if target.scheme != "https":
        raise ValueError(f"outbound_pool speaks http and https, not {target.scheme}")
    return urllib3.HTTPSConnectionPool(**common, cert_reqs="CERT_REQUIRED", server_hostname=target.host, **_trust())


@dataclasses.dataclass
class PinnedResponse:
    response: urllib3.BaseHTTPResponse  # not preloaded: read what is needed, then close()
    address: IPAddress  # where it came from
    pool: urllib3.HTTPConnectionPool

    @property
    def public(self) -> bool:
        """Whether the answer came from a public address: what a private service answers is not shown to API key
        holders, even where a setting lets the request through."""
        return policy.outbound_address_kind(address=self.address) is None

    def close(self) -> None:
        self.response.close()
        self.pool.close()


def _pools(target: OutboundTarget, timeout: float) -> Iterator[tuple[IPAddress, urllib3.HTTPConnectionPool]]:
    for address in target.addresses:
        yield address, outbound_pool(target=target, address=address, timeout=timeout)


def outbound_request(*, target: OutboundTarget, method: str, path: str | None = None, body: bytes | None = None,
                     headers: Mapping[str, str] | None = None, timeout: float) -> PinnedResponse:
    """One request to the target's checked addresses in turn (the next one only when a connection cannot be made at
    all), no redirect followed, the body not read. `path`: the request line's path and query (default the URL's).
    Raises urllib3's HTTPError or OSError when there is no answer."""
    if not target.addresses:
        raise ValueError("outbound_request needs a target from outbound_target_resolve")
    headers = {**(headers or {}), "Host": target.host_header}
    if target.authorization:
        headers.setdefault("Authorization", target.authorization)
    error: Exception | None = None
    for address, pool in _pools(target, timeout):
        try:
            response = pool.urlopen(method, path or target.path, body=body, headers=headers, redirect=False,
                                    retries=False, preload_content=False, assert_same_host=False)
        except NewConnectionError as exc:  # refused or unreachable: the resolver's next address may work
            error = exc
            pool.close()
            continue
        except BaseException:
            pool.close()
            raise
        return PinnedResponse(response=response, address=address, pool=pool)
    assert error is not None
    raise error


@dataclasses.dataclass(frozen=True)
class GitPin:
    """What makes git connect to the checked addresses only: `config` goes before git's subcommand (`git *config
    clone …`), `env` into its environment."""

    config: tuple[str, ...]
    env: dict[str, str]


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _curl_address(address: IPAddress) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def outbound_git_pin(*, target: OutboundTarget, ssh_command: str = "ssh") -> GitPin:
    """For a target from outbound_target_resolve(purpose="git"). http(s): curl's resolve list maps the host and
    port to the checked addresses (http.curloptResolve, git ≥ 2.37), redirects are not followed and proxies are
    off (a proxy would resolve the name itself). ssh: `ssh_command` (the operator's GIT_SSH_COMMAND, if any) with
    HostName set to the first checked address and HostKeyAlias to the name, so known_hosts is still checked under
    the name; ProxyCommand and ProxyJump off for the same reason as proxies."""
    if not target.addresses:
        raise ValueError("outbound_git_pin needs a target from outbound_target_resolve")
    if target.scheme in ("http", "https"):
        config = ["-c", "http.followRedirects=false"]
        if not _literal(target.host):  # a literal address is connected to as it is
            addresses = ",".join(_curl_address(a) for a in target.addresses)
            config = ["-c", f"http.curloptResolve={target.host}:{target.port}:{addresses}", *config]
        return GitPin(config=tuple(config), env={"NO_PROXY": "*", "no_proxy": "*"})
    if target.scheme != "ssh":
        raise ValueError(f"outbound_git_pin speaks http, https and ssh, not {target.scheme}")
    # known_hosts names a host on another port [host]:port; an alias is looked up as it is written.
    alias = target.host if target.port == 22 else f"[{target.host}]:{target.port}"
    options = [f"HostName={target.addresses[0]}", f"HostKeyAlias={alias}", "CheckHostIP=no",
               "ProxyCommand=none", "ProxyJump=none", "CanonicalizeHostname=no"]
    command = " ".join([ssh_command, *(f"-o {shlex.quote(option)}" for option in options)])
    return GitPin(config=(), env={"GIT_SSH_COMMAND": command})
