"""A DNS server for tests, on 127.0.0.1: A, AAAA and SRV answers from a table the test changes as it runs.

Written here from RFC 1035 and 2782 with the standard library alone, apart from the router's own DNS
client (shells/lorafleet_serve/_dns.py), so that the two are checked against each other rather than
against a shared mistake. It speaks UDP and TCP on one port; it can fail (SERVFAIL), stay silent,
and cut UDP answers longer than 512 bytes (TC), whatever EDNS0 offers, to send clients to TCP.
"""

from __future__ import annotations

import ipaddress
import socketserver
import struct
import threading
from collections.abc import Sequence
from typing import Any

TYPES = {1: "A", 28: "AAAA", 33: "SRV", 5: "CNAME"}
CODES = {name: code for code, name in TYPES.items()}
Srv = tuple[int, int, int, str]
"""(priority, weight, port, target)."""


class DnsServer:
    """Answers from ``records``: ``{(name, "A"): ["127.0.0.2"], (name, "SRV"): [(0, 1, 8000, "a.x.")]}``.

    Names are compared without case and trailing dot. A name with no record of any kind is NXDOMAIN;
    one with records of other kinds gets an empty NOERROR. SRV answers carry the targets' A and AAAA
    records in their additional section when ``glue`` is on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], list[Any]] = {}
        self.mode = "answer"
        """"answer", "servfail", or "silent" (no answer at all)."""
        self.glue = True
        self.truncate = False
        """Cut UDP answers over 512 bytes (TC set), to make clients ask again over TCP."""
        self.questions: list[tuple[str, str, str]] = []
        """(protocol, name, type) of every question, in order."""
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        self.port = 0

    # -- the test's side ----------------------------------------------------------------------------

    def set(self, name: str, kind: str, values: Sequence[Any]) -> None:
        with self._lock:
            key = (_plain(name), kind)
            if values:
                self._records[key] = list(values)
            else:
                self._records.pop(key, None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DnsServer:
        owner = self

        class Udp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                answer = owner._answer(data, "udp")
                if answer is not None:
                    sock.sendto(answer, self.client_address)

        class Tcp(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                size = self.rfile.read(2)
                if len(size) < 2:
                    return
                data = self.rfile.read(struct.unpack("!H", size)[0])
                answer = owner._answer(data, "tcp")
                if answer is not None:
                    self.wfile.write(struct.pack("!H", len(answer)) + answer)

        for _ in range(20):  # the same port number for UDP and TCP: try again if TCP's is taken
            udp = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Udp)
            try:
                tcp = socketserver.ThreadingTCPServer(("127.0.0.1", udp.server_address[1]), Tcp)
            except OSError:
                udp.server_close()
                continue
            break
        else:
            raise RuntimeError("no port free for both UDP and TCP")
        udp.daemon_threads = tcp.daemon_threads = True
        self.port = udp.server_address[1]
        self._servers = [udp, tcp]
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(5)

    # -- the protocol -------------------------------------------------------------------------------

    def _answer(self, data: bytes, protocol: str) -> bytes | None:
        try:
            ident, flags, count = struct.unpack_from("!HHH", data)
            name, offset = _name(data, 12)
            kind_code = struct.unpack_from("!H", data, offset)[0]
        except (struct.error, IndexError, UnicodeDecodeError):
            return None
        question = data[12 : offset + 4]
        kind = TYPES.get(kind_code, str(kind_code))
        with self._lock:
            self.questions.append((protocol, _plain(name), kind))
            mode, glue, truncate = self.mode, self.glue, self.truncate
            records = {key: list(values) for key, values in self._records.items()}
        if mode == "silent" or count != 1:
            return None
        rd = flags & 0x0100
        if mode == "servfail":
            return struct.pack("!HHHHHH", ident, 0x8080 | rd | 2, 1, 0, 0, 0) + question
        plain = _plain(name)
        exists = any(owner == plain for owner, _ in records)
        answers = [_record(name, kind, value) for value in records.get((plain, kind), [])]
        extra = []
        if kind == "SRV" and glue:
            for _, _, _, target in records.get((plain, "SRV"), []):
                for extra_kind in ("A", "AAAA"):
                    extra += [
                        _record(target, extra_kind, v) for v in records.get((_plain(target), extra_kind), [])
                    ]
        rcode = 0 if exists else 3
        header = struct.pack("!HHHHHH", ident, 0x8080 | rd | rcode, 1, len(answers), 0, len(extra))
        message = header + question + b"".join(answers) + b"".join(extra)
        if protocol == "udp" and truncate and len(message) > 512:
            return struct.pack("!HHHHHH", ident, 0x8080 | 0x0200 | rd | rcode, 1, 0, 0, 0) + question
        return message


def _plain(name: str) -> str:
    return name.lower().rstrip(".")


def _name(data: bytes, offset: int) -> tuple[str, int]:
    labels = []
    while data[offset]:
        length = data[offset]
        labels.append(data[offset + 1 : offset + 1 + length].decode("ascii"))
        offset += 1 + length
    return ".".join(labels), offset + 1


def _encoded(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in _plain(name).split(".")) + b"\x00"


def _record(name: str, kind: str, value: Any) -> bytes:
    if kind == "A":
        data = ipaddress.IPv4Address(value).packed
    elif kind == "AAAA":
        data = ipaddress.IPv6Address(value).packed
    else:
        priority, weight, port, target = value
        data = struct.pack("!HHH", priority, weight, port) + _encoded(target)
    return _encoded(name) + struct.pack("!HHIH", CODES[kind], 1, 5, len(data)) + data
