"""Webhooks without the database: the signature, its check on the receiving side, which URLs Quire will call,
one delivery attempt, and the wait before the next.

`Quire-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` under the tenant's webhook secret. The
timestamp is inside the signed text so that a receiver can refuse an old delivery replayed at it (`verify`'s
tolerance), and the HMAC covers the exact body bytes so that it can refuse a forged or altered one.

A callback URL is refused when its host resolves to an address on the service's own side of the network (loopback,
private, link-local, CGNAT, multicast, reserved, cloud metadata): otherwise anyone who may upload could make the
workers send requests to internal services. Every address the name resolves to must pass, an IPv6 address that
carries an IPv4 one is judged by the IPv4 one, and the request then goes to an address that passed, so a name that
resolves differently a moment later (DNS rebinding) cannot redirect it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import random
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

SIGNATURE_HEADER = "Quire-Signature"
SCHEMES = ("http", "https")
CGNAT = ipaddress.ip_network("100.64.0.0/10")  # shared address space: neither private nor global in ipaddress
# Instance metadata (AWS, GCP, Azure; AWS over IPv6; Alibaba): only an allow-list entry naming the very address
# permits one of these, never a network around it.
METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))
RETRY_STATUSES = (408, 429)  # the 4xx answers worth another try; every 5xx is one too
ERROR_CHARS = 500


class CallbackRefused(ValueError):
    """Quire will not call this URL: a scheme other than http(s), or a host on the service's side of the network."""

    code = "callback_url_refused"


class HostNotFound(CallbackRefused):
    """The URL's host does not resolve: refused at upload, but worth a retry at delivery (DNS may recover)."""


@dataclass(frozen=True)
class Outcome:
    """One delivery attempt: the receiver's status (None: no answer), why it failed, and whether to try again."""

    status_code: int | None
    error: str | None
    retry: bool
    duration_ms: float
    retry_after_s: float | None = None  # what a 429 or 503 asked for in its Retry-After

    @property
    def succeeded(self) -> bool:
        return self.error is None


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The Quire-Signature header value for body sent at timestamp (unix seconds)."""
    return f"t={timestamp},v1={_digest(secret, timestamp, body)}"


def verify(secret: str, header: str, body: bytes, tolerance_s: float = 300, now: float | None = None) -> bool:
    """Whether header signs body under secret, at most tolerance_s away from now: the receiver's check.

    Several v1 entries may appear (one per secret while a secret is rotated); any one that matches suffices.
    """
    timestamp, signatures = _parse(header)
    if timestamp is None or abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, timestamp, body)
    return any(hmac.compare_digest(expected, signature) for signature in signatures)


def check_url(url: str, allow: Sequence[str] = (), resolve: Resolver | None = None) -> list[IPAddress]:
    """The addresses url's host resolves to, all of them ones Quire may call; raises CallbackRefused otherwise.

    allow holds host names and addresses or CIDR networks (Settings.webhook_allow): a named host is permitted
    whatever it resolves to, an address inside an allowed network is permitted even when it is private.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise CallbackRefused(f"{url!r}: the port is not a number from 0 to 65535") from None
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise CallbackRefused(f"{url!r}: give an absolute http:// or https:// URL")
    host = parts.hostname.rstrip(".").lower()
    addresses = [ipaddress.ip_address(address) for address in
                 (resolve or resolve_host)(host, port or (443 if parts.scheme == "https" else 80))]
    names, networks = _allow_list(allow)
    if host in names:
        return addresses
    for address in addresses:
        reason = refusal(address)
        if reason and not _allowed(address, networks):
            raise CallbackRefused(f"{url!r}: {host} resolves to {address}, {reason}; "
                                  "QUIRE_WEBHOOK_ALLOW can permit it")
    return addresses


def accept_callback_url(url: str, allow: Sequence[str] = ()) -> None:
    """The one rule for a callback URL given to Quire (an upload's, a batch's, a tenant's default): check_url's,
    except that a name DNS does not know yet passes, since it is checked again at each delivery attempt."""
    with suppress(HostNotFound):
        check_url(url, allow)


def refusal(address: IPAddress) -> str | None:
    """Why Quire may not call address (None when it may)."""
    address = _carried_ipv4(address) or address
    checks = [(address in METADATA, "a cloud metadata address"), (address.is_loopback, "a loopback address"),
              (address.is_link_local, "a link-local address"), (address.is_multicast, "a multicast address"),
              (address.is_unspecified, "the unspecified address"), (address in CGNAT, "a CGNAT (100.64/10) address"),
              (address.is_private, "a private address"), (address.is_reserved, "a reserved address"),
              (not address.is_global, "not a globally routable address")]
    return next((reason for refused, reason in checks if refused), None)


def resolve_host(host: str, port: int) -> list[str]:
    """Every address host resolves to (an address resolves to itself); raises HostNotFound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise HostNotFound(f"{host} does not resolve: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def post(url: str, body: bytes, headers: dict[str, str], allow: Sequence[str], timeout_s: float) -> Outcome:
    """One attempt: check url, POST body to an address that passed, never following a redirect.

    Success is a 2xx. A network error, a 5xx, 408 or 429 (and a host that does not resolve) is worth a retry;
    any other answer, and a refused URL, is final.
    """
    started = time.perf_counter()
    try:
        address = check_url(url, allow)[0]
        status, retry_after = _post_to(address, url, body, headers, timeout_s)
    except HostNotFound as exc:
        return _failed(started, None, f"{CallbackRefused.code}: {exc}", retry=True)
    except CallbackRefused as exc:
        return _failed(started, None, f"{exc.code}: {exc}", retry=False)
    except httpx.HTTPError as exc:
        return _failed(started, None, f"{type(exc).__name__}: {exc}", retry=True)
    if 200 <= status < 300:
        return Outcome(status, None, False, _ms(started))
    failed = _failed(started, status, f"HTTP {status}", retry=status >= 500 or status in RETRY_STATUSES)
    return replace(failed, retry_after_s=retry_after_seconds(retry_after)) if status in (429, 503) else failed


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """A Retry-After header's wait in seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_delay(attempt: int, base_s: float, cap_s: float, rng: Callable[[], float] = random.random) -> float:
    """Seconds to wait after failed attempt n (from 1): full jitter, uniform in [0, min(cap, base × 2^(n-1))].

    Jitter spreads the retries of many deliveries that failed together (a receiver that was down), so they do
    not all come back in the same second.
    """
    return rng() * min(cap_s, base_s * 2 ** (attempt - 1))


def _post_to(address: IPAddress, url: str, body: bytes, headers: dict[str, str],
             timeout_s: float) -> tuple[int, str | None]:
    """POST to address while the Host header and TLS (SNI and the certificate check) still name url's host; the
    status and the Retry-After header."""
    target = httpx.URL(url)
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    # trust_env=False: a proxy from the environment would resolve the name itself, around the check.
    with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
        with client.stream("POST", target.copy_with(host=str(address)), content=body, extensions=extensions,
                           headers={**headers, "Host": target.netloc.decode("ascii")}) as response:
            return response.status_code, response.headers.get("Retry-After")  # the body is never read


def _failed(started: float, status: int | None, error: str, retry: bool) -> Outcome:
    return Outcome(status, error[:ERROR_CHARS], retry, _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def _parse(header: str) -> tuple[int | None, list[str]]:
    """(t, the v1 signatures) of a header; t is None when it is missing or not a number."""
    timestamp, signatures = None, []
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t" and value.isdigit():
            timestamp = int(value)
        elif key == "v1":
            signatures.append(value)
    return timestamp, signatures


def _allow_list(allow: Iterable[str]) -> tuple[set[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    """(host names, networks) of the allow-list; a bare address is a one-address network."""
    names, networks = set(), []
    for entry in (item.strip() for item in allow):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if entry:
                names.add(entry.rstrip(".").lower())
    return names, networks


def _allowed(address: IPAddress, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    carried = _carried_ipv4(address)
    candidates = [address] + ([carried] if carried else [])
    return any(candidate in network and (candidate not in METADATA or network.num_addresses == 1)
               for candidate in candidates for network in networks)


def _carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d) or 6to4 (2002::/16) IPv6 address."""
    if isinstance(address, ipaddress.IPv6Address):
        return address.ipv4_mapped or address.sixtofour
    return None
