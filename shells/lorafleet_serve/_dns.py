"""A small DNS client: A, AAAA and SRV questions over UDP (TCP when the answer is truncated).

The standard library resolves names to addresses (``getaddrinfo``) but asks nothing else, and always
asks the system's resolver: SRV records (a Kubernetes headless Service's ports, Consul's and Nomad's
services), and a resolver named in the configuration, need a query of our own. RFC 1035 for the
message, RFC 2782 for SRV, RFC 6891 for the larger UDP answers (EDNS0) that spare most TCP retries.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import struct
from collections.abc import Sequence
from pathlib import Path

import anyio
import attrs

A, AAAA, CNAME, SRV, OPT = 1, 28, 5, 33, 41
CLASS_IN = 1
NOERROR, SERVFAIL, NXDOMAIN = 0, 2, 3
UDP_PAYLOAD = 4096
"""The answer size offered with EDNS0: enough for a few hundred SRV records without TCP."""
RCODES = {1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
DNS_PORT = 53


class DnsError(Exception):
    """No usable answer: none in time, a server failure or refusal, or a message that makes no sense."""


@attrs.frozen
class Record:
    """One resource record of an answer: its owner name and type, and its data, read."""

    name: str
    kind: int
    data: str | tuple[int, int, int, str]
    """An address (A, AAAA), a name (CNAME), or (priority, weight, port, target) (SRV)."""


@attrs.frozen
class Answer:
    rcode: int
    records: tuple[Record, ...]
    """The answer section, then the additional one (where SRV targets' addresses may come)."""


@attrs.frozen
class SystemResolver:
    """What /etc/resolv.conf says: the name servers, the search list and ``ndots``."""

    servers: tuple[tuple[str, int], ...]
    search: tuple[str, ...] = ()
    ndots: int = 1

    @classmethod
    def read(cls, path: Path = Path("/etc/resolv.conf")) -> SystemResolver:
        servers: list[tuple[str, int]] = []
        search: tuple[str, ...] = ()
        ndots = 1
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        for line in lines:
            words = line.split("#", 1)[0].split(";", 1)[0].split()
            if not words:
                continue
            if words[0] == "nameserver" and len(words) > 1:
                servers.append((words[1].split("%", 1)[0], DNS_PORT))
            elif words[0] in ("search", "domain"):
                search = tuple(words[1:])
            elif words[0] == "options":
                for option in words[1:]:
                    if option.startswith("ndots:") and option[6:].isdigit():
                        ndots = min(int(option[6:]), 15)
        # resolv.conf(5): no nameserver line means the local one.
        return cls(tuple(servers) or (("127.0.0.1", DNS_PORT),), search, ndots)

    def candidates(self, name: str) -> list[str]:
        """The names to ask, in order, for ``name`` (resolv.conf(5)'s search rules)."""
        if name.endswith("."):
            return [name]
        searched = [f"{name}.{domain}" for domain in self.search]
        if name.count(".") >= self.ndots:
            return [name, *searched]
        return [*searched, name]


def query_message(name: str, kind: int, ident: int) -> bytes:
    """A recursive query for ``name``'s records of ``kind``, with an EDNS0 offer of larger answers."""
    header = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 1)  # RD; one question, one OPT record
    question = _encode_name(name) + struct.pack("!HH", kind, CLASS_IN)
    opt = b"\x00" + struct.pack("!HHIH", OPT, UDP_PAYLOAD, 0, 0)
    return header + question + opt


def read_answer(data: bytes, ident: int) -> tuple[Answer, bool]:
    """The answer in a response to query ``ident``, and whether it came truncated.

    Raises:
        DnsError: it is no response to that query, or it is malformed.
    """
    try:
        got, flags, questions, answers, authorities, additional = struct.unpack_from("!HHHHHH", data)
        if got != ident or not flags & 0x8000:
            raise DnsError("the answer is not to this question")
        offset = 12
        for _ in range(questions):
            _, offset = _read_name(data, offset)
            offset += 4
        records: list[Record] = []
        for section, count in enumerate((answers, authorities, additional)):
            for _ in range(count):
                record, offset = _read_record(data, offset)
                if record is not None and section != 1:
                    records.append(record)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise DnsError(f"a malformed answer ({exc})") from None
    return Answer(flags & 0x000F, tuple(records)), bool(flags & 0x0200)


async def query(server: tuple[str, int], name: str, kind: int, timeout: float) -> Answer:
    """Ask ``server`` for ``name``'s records of ``kind``: over UDP, again over TCP when truncated.

    Raises:
        DnsError: no answer within ``timeout`` seconds, or an unusable one.
    """
    ident = secrets.randbelow(1 << 16)  # unpredictable: a forged answer from off the path must guess it
    message = query_message(name, kind, ident)
    host, port = server
    try:
        with anyio.fail_after(timeout):
            async with await anyio.create_connected_udp_socket(host, port) as udp:
                await udp.send(message)
                while True:
                    try:
                        answer, truncated = read_answer(await udp.receive(), ident)
                    except DnsError:
                        continue  # another query's late answer, or garbage: wait for ours
                    break
            if truncated:
                async with await anyio.connect_tcp(host, port) as tcp:
                    await tcp.send(struct.pack("!H", len(message)) + message)
                    data = b""
                    while len(data) < 2 or len(data) < 2 + struct.unpack_from("!H", data)[0]:
                        data += await tcp.receive()
                answer, _ = read_answer(data[2 : 2 + struct.unpack_from("!H", data)[0]], ident)
    except TimeoutError:
        raise DnsError(f"no answer from {_shown(server)} within {timeout:g} s") from None
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        raise DnsError(f"cannot ask {_shown(server)}: {exc}") from None
    if answer.rcode not in (NOERROR, NXDOMAIN):
        raise DnsError(f"{_shown(server)} answered {RCODES.get(answer.rcode, answer.rcode)} for {name}")
    return answer


async def addresses(
    servers: Sequence[tuple[str, int]], names: Sequence[str], timeout: float
) -> list[str] | None:
    """The A and AAAA addresses of the first of ``names`` that has any (None: none of them exists).

    Raises:
        DnsError: no server gave a usable answer.
    """
    for name in names:
        found: list[str] = []
        exists = False
        for kind in (A, AAAA):
            answer = await _ask(servers, name, kind, timeout)
            exists = exists or answer.rcode == NOERROR
            found += [str(r.data) for r in answer.records if r.kind == kind]
        if found:
            return found
        if exists:
            return []
    return None


async def services(
    servers: Sequence[tuple[str, int]], names: Sequence[str], timeout: float
) -> list[tuple[str, int]] | None:
    """The (address, port) of each SRV target of the first of ``names`` that has SRV records, those of
    the lowest priority (a higher one is a backup: RFC 2782); None when none of the names exists.

    A target's addresses come from the answer's additional section when the server put them there,
    else from A and AAAA questions of their own.

    Raises:
        DnsError: no server gave a usable answer.
    """
    for name in names:
        answer = await _ask(servers, name, SRV, timeout)
        targets = [r.data for r in answer.records if r.kind == SRV and isinstance(r.data, tuple)]
        if not targets:
            if answer.rcode == NOERROR:
                return []
            continue
        best = min(priority for priority, _, _, _ in targets)
        known: dict[str, list[str]] = {}
        for record in answer.records:
            if record.kind in (A, AAAA):
                known.setdefault(record.name.lower(), []).append(str(record.data))
        out: list[tuple[str, int]] = []
        for priority, _, port, target in sorted(targets, key=lambda t: (t[3], t[2])):
            if priority != best or target == ".":
                continue  # "." : the service is decidedly not available there (RFC 2782)
            found = known.get(target.lower())
            if found is None:
                found = await addresses(servers, [target], timeout) or []
            out += [(address, port) for address in found]
        return out
    return None


async def _ask(servers: Sequence[tuple[str, int]], name: str, kind: int, timeout: float) -> Answer:
    """The first usable answer among ``servers``, in order."""
    failures = []
    for server in servers:
        try:
            return await query(server, name, kind, timeout)
        except DnsError as exc:
            failures.append(str(exc))
    raise DnsError("; ".join(failures))


async def system_addresses(name: str, port: int, timeout: float) -> list[str]:
    """``name``'s addresses as the system resolves them (``getaddrinfo``: /etc/hosts, the search list).

    Raises:
        DnsError: no answer in time, or a failure other than "no such name".
    """
    try:
        with anyio.fail_after(timeout):
            found = await anyio.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except TimeoutError:
        raise DnsError(f"no address for {name} within {timeout:g} s") from None
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return []
        raise DnsError(f"cannot resolve {name}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise DnsError(f"cannot resolve {name}: {exc}") from None
    seen: dict[str, None] = {}
    for _, _, _, _, address in found:
        seen.setdefault(str(address[0]).split("%", 1)[0])
    return list(seen)


def host_port(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def parse_server(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; the port 53 when left out) as an address to ask.

    Raises:
        ValueError: it is not one.
    """
    host, port = text.strip(), DNS_PORT
    if host.startswith("["):
        inside, _, rest = host[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"not host:port: {text!r}")
            port = int(rest[1:])
        host = inside
    elif host.count(":") == 1:
        host, _, number = host.partition(":")
        port = int(number)
    ipaddress.ip_address(host)  # a resolver is given as an address: resolving it would need one
    if not 0 < port < 65536:
        raise ValueError(f"no such port: {port}")
    return host, port


# -- the wire ---------------------------------------------------------------------------------------


def _encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("idna") if label else b""
        if not 0 < len(raw) < 64:
            raise DnsError(f"not a DNS name: {name!r}")
        out += bytes([len(raw)]) + raw
    return out + b"\x00"


def _read_name(data: bytes, offset: int) -> tuple[str, int]:
    """The name at ``offset`` (following compression pointers) and the offset after it."""
    labels: list[str] = []
    end: int | None = None
    for _ in range(128):  # more jumps than a message can hold: a pointer loop
        length = data[offset]
        if length & 0xC0 == 0xC0:
            if end is None:
                end = offset + 2
            offset = ((length & 0x3F) << 8) | data[offset + 1]
            continue
        if length == 0:
            return ".".join(labels) or ".", end if end is not None else offset + 1
        labels.append(data[offset + 1 : offset + 1 + length].decode("ascii"))
        offset += 1 + length
    raise ValueError("a name that loops")


def _read_record(data: bytes, offset: int) -> tuple[Record | None, int]:
    name, offset = _read_name(data, offset)
    kind, _, _, length = struct.unpack_from("!HHIH", data, offset)
    offset += 10
    rdata = data[offset : offset + length]
    if len(rdata) != length:
        raise ValueError("a record longer than the message")
    end = offset + length
    if kind == A and length == 4:
        return Record(name, kind, str(ipaddress.IPv4Address(rdata))), end
    if kind == AAAA and length == 16:
        return Record(name, kind, str(ipaddress.IPv6Address(rdata))), end
    if kind == CNAME:
        return Record(name, kind, _read_name(data, offset)[0]), end
    if kind == SRV and length >= 7:
        priority, weight, port = struct.unpack_from("!HHH", data, offset)
        target, _ = _read_name(data, offset + 6)
        return Record(name, kind, (priority, weight, port, target)), end
    return None, end


def _shown(server: tuple[str, int]) -> str:
    return host_port(*server)
