"""What ``lorafleet serve`` is told: a TOML file and flags, checked into one ``Config``.

Every mistake is a ``ConfigError`` whose message names the setting (``replicas[1].limit``, ``--pin``)
and says what was expected; nothing here raises anything else for a bad value. Keys live in
environment variables, which the config names: a key is never read from a file or a flag, so it can
never land in a shell history, a process listing or a config repository.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from lorafleet import FLEET_DEFAULTS, InvalidValueError, engine_refusal, limit_for
from lorafleet_fleet import HEADROOM, TOP_ADAPTERS, Replica

from ._dns import parse_server
from ._tracing import INSTALL
from ._tracing import available as tracing_available

DEFAULT_PORT = 8000
ADMIN_HOST = "127.0.0.1"
"""Where the admin interface listens unless told: this host alone (in a pod, ``kubectl port-forward``
reaches it; nothing through a Service does)."""
DISCOVER_INTERVAL = 5.0
"""Seconds between two resolutions of a discovered name."""
ADAPTER_REFRESH = 10.0
"""Seconds between two looks at the folders of the adapters asked for: a retrained adapter is served
within that. A look costs a ``stat`` per file, some 9 ms for 1,000 adapters of 3 files on a local disk
(bench/NOTES.md), in a worker thread."""
DEFAULT_MAX_BODY_BYTES = 4 << 20
"""4 MiB: a prompt of 100,000 tokens or so. Past the bound a request is answered 413; its body is read and
dropped first (up to 4 times the bound, 16 MiB at least), so that the client reads the answer."""
DEFAULT_REQUEST_LOG_BYTES = 100 << 20
"""100 MiB, some 300,000 lines: past it the request log becomes FILE.1 and a new one begins."""

ADAPTER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
"""A name a directory root resolves: one path component, no dot first (so never ``..`` or hidden)."""

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(Exception):
    """The configuration is wrong; the message says which setting and how."""


@attrs.frozen(kw_only=True)
class _Engines:
    """What a replica and a discovered name say alike of the engines they give."""

    limit: int | None = None
    """The adapters each engine may hold; None: what fits its memory (``build`` sets it)."""
    api_key_env: str | None = None
    max_cpu_loras: int | None = None
    """The engine's ``--max-cpu-loras``, when declared: the limit follows from it unless given, and
    the router warns if it can put more there."""
    max_loras: int | None = None
    """The engine's ``--max-loras``, when declared: the distinct adapters one batch runs. vLLM's
    ``--max-cpu-loras`` is at least it, and is it when left out."""

    @property
    def memory(self) -> int | None:
        """The adapters the engine keeps in memory, as declared: ``max_cpu_loras``, else ``max_loras``
        (vLLM's default for it), else None."""
        return self.max_cpu_loras if self.max_cpu_loras is not None else self.max_loras

    @property
    def resolved_limit(self) -> int:
        """The limit, once ``build`` has filled it in."""
        assert self.limit is not None, "build() sets every limit"
        return self.limit


@attrs.frozen(kw_only=True)
class ReplicaConfig(_Engines):
    """One vLLM replica as configured: its key is named (``api_key_env``), never given."""

    id: str
    url: str
    model: str


@attrs.frozen(kw_only=True)
class DiscoverConfig(_Engines):
    """Replicas found by a DNS name, re-resolved every ``interval`` seconds: each address one replica,
    ``ip:port`` its id, ``http://ip:port`` its URL, all of one model and limit."""

    dns: str
    """The name: a Kubernetes headless Service, a Consul or Nomad service..."""
    model: str
    port: int | None = None
    """The replicas' port, for A/AAAA answers (SRV answers carry their own)."""
    srv: bool = False
    """Ask for SRV records (targets and ports) instead of addresses."""
    interval: float = DISCOVER_INTERVAL
    resolver: str | None = None
    """``host:port`` of the DNS server to ask (None: the system's, as /etc/resolv.conf says)."""

    def label(self, index: int) -> str:
        """How messages name the entry: ``discover[0] ('vllm.ns.svc')``."""
        return f"discover[{index}] ({self.dns!r})"


@attrs.frozen(kw_only=True)
class Config:
    """Everything ``lorafleet serve`` runs with, checked (see ``check``); keys are resolved later.

    Adapters come from a table (``adapter_paths``, name to folder, with an optional base model per
    name in ``adapter_models``) and/or a directory root (an adapter is a folder of the root holding an
    ``adapter_config.json``); the table wins where both name an adapter. ``adapter_model`` is the base
    model of every adapter the table does not give one to (None: any replica's).
    """

    replicas: tuple[ReplicaConfig, ...] = ()
    discover: tuple[DiscoverConfig, ...] = ()
    """Names whose addresses are replicas too, followed as they change."""
    adapter_root: Path | None = None
    adapter_paths: Mapping[str, str] = attrs.field(factory=dict)
    adapter_models: Mapping[str, str] = attrs.field(factory=dict)
    adapter_model: str | None = None
    adapter_refresh: float = ADAPTER_REFRESH
    """Seconds between looks at the folders of the adapters asked for: new files in one are a new
    version of it ([renew]), served from then on."""
    pins: Mapping[str, int] = attrs.field(factory=dict)
    prewarm: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key_env: str | None = None
    """The environment variable holding the key this router's own clients must send (None: no key)."""
    metrics_api_key_env: str | None = None
    """The environment variable holding the key ``GET /metrics`` wants (None: it wants none)."""
    admin_host: str = ADMIN_HOST
    admin_port: int | None = None
    """The admin interface's own port (None: there is none); see ``_admin``."""
    admin_api_key_env: str | None = None
    """The environment variable holding the key the admin interface wants: needed with ``admin_port``."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    load_timeout: float = 120.0
    listing_timeout: float = 5.0
    listing_interval: float = 30.0
    shared_interval: float = FLEET_DEFAULTS["shared_interval"]
    connect_timeout: float = 5.0
    """Seconds to connect to a replica before it counts as failed and the request goes elsewhere."""
    read_timeout: float = 600.0
    """Seconds a replica may stay silent (before its answer starts, or between two chunks)."""
    shutdown_timeout: float = 10.0
    """Seconds running requests get to finish when the router is told to stop."""
    headroom: int | None = None
    """Adapters over its limit a replica may take when all it holds are in use (None: the fleet's default)."""
    attempts: int = 3
    """Replicas one request may try, for loads and for forwarding alike."""
    routers: int = 1
    """Routers (this one included) sharing the replicas: each fills its share of their free slots."""
    concurrency: int | None = None
    """Requests one replica runs at once (vLLM's ``--max-num-seqs``): past it a hot adapter gets a
    second copy rather than a queue (None: the fleet's default, learned from the engines' /metrics)."""
    max_connections: int = 1000
    """Connections to one replica open at once (requests past it wait for one, up to the connect timeout)."""
    metrics_adapters: int = TOP_ADAPTERS
    """Adapters with a label value of their own in /metrics, the most requested; the rest are summed."""
    request_log: Path | None = None
    """The file each completion's JSON line is appended to (None: no request log); see ``_requestlog``."""
    request_log_max_bytes: int = DEFAULT_REQUEST_LOG_BYTES
    """The request log's size at which it becomes ``FILE.1`` and a new one begins."""
    tracing: bool = False
    """A span per routed request, sent by OTLP where the ``OTEL_*`` variables say (``lorafleet[otel]``)."""
    peers: tuple[str, ...] = ()
    """The URLs of the routers sharing these replicas, this one's among them: the ready one up the
    longest decides, the others relay to it (``_peers``). None given and no ``peers_dns``: each decides."""
    peers_dns: str | None = None
    """A name whose addresses are the routers sharing these replicas (a headless Service), each at
    ``peers_port``."""
    peers_port: int = DEFAULT_PORT
    peers_interval: float = 0.5
    """Seconds between two looks at the peers' ``/health``."""

    @property
    def models(self) -> dict[str, list[ReplicaConfig]]:
        """Base model name to its replicas, in the order configured."""
        by_model: dict[str, list[ReplicaConfig]] = {}
        for replica in self.replicas:
            by_model.setdefault(replica.model, []).append(replica)
        return by_model

    def model_names(self) -> list[str]:
        """Every base model the replicas and the discovered names serve, in the order configured."""
        return list(self.engines())

    def engines(self) -> dict[str, list[EngineEntry]]:
        """Base model name to the entries that give it engines, in the order configured."""
        by_model: dict[str, list[EngineEntry]] = {}
        for i, replica in enumerate(self.replicas):
            entry = EngineEntry(
                f"replicas[{i}] ({replica.id!r})", replica.resolved_limit, replica.memory, replica.max_loras
            )
            by_model.setdefault(replica.model, []).append(entry)
        for i, found in enumerate(self.discover):
            entry = EngineEntry(found.label(i), found.resolved_limit, found.memory, found.max_loras)
            by_model.setdefault(found.model, []).append(entry)
        return by_model


@attrs.frozen
class EngineEntry:
    """A setting that gives a model engines, as messages name it: what sizing checks."""

    where: str
    limit: int
    max_cpu_loras: int | None
    """As declared, or ``max_loras`` where only that is (vLLM's default)."""
    max_loras: int | None


# -- the TOML file ---------------------------------------------------------------------------------

_TOP = {"server", "admin", "fleet", "timeouts", "adapters", "pins", "replicas", "discover", "peers"}
_SERVER = {
    "host",
    "port",
    "api_key_env",
    "metrics_api_key_env",
    "max_body_bytes",
    "max_connections",
    "metrics_adapters",
    "request_log",
    "request_log_max_bytes",
    "tracing",
}
_ADMIN = {"host", "port", "api_key_env"}
_PEERS = {"urls", "dns", "port", "interval"}
_FLEET = {"headroom", "attempts", "routers", "concurrency", "prewarm"}
_TIMEOUTS = {"load", "listing", "listing_interval", "shared_interval", "connect", "read", "shutdown"}
_ADAPTERS = {"root", "model", "paths", "refresh"}
_REPLICA = {"id", "url", "model", "limit", "api_key_env", "max_cpu_loras", "max_loras"}
_DISCOVER = {
    "dns",
    "port",
    "srv",
    "model",
    "limit",
    "api_key_env",
    "interval",
    "resolver",
    "max_cpu_loras",
    "max_loras",
}
_SECRET_KEYS = {"api_key", "key", "token", "password"}
_NO_SECRETS = (
    "a key is never written in the configuration: put it in an environment variable and name that "
    "variable with api_key_env"
)


def read_toml(path: Path) -> dict[str, Any]:
    """The settings of a TOML file, in the keyword names of ``Config`` (not yet checked together).

    Raises:
        ConfigError: the file cannot be read, is not TOML, or has a setting of the wrong kind.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read the configuration file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return settings_of(data, str(path), base=path.parent)


def settings_of(data: Mapping[str, Any], source: str, *, base: Path | None = None) -> dict[str, Any]:
    """``data`` (a parsed TOML document) as ``Config`` keyword arguments.

    Args:
        source: what messages name as the settings' origin (the file).
        base: what relative adapter folders are relative to (the file's folder), if not the current one.
    """
    _known(data, _TOP, source, "")
    out: dict[str, Any] = {}
    server = _table(data, "server", source)
    _known(server, _SERVER, source, "server.")
    for key in ("host", "api_key_env", "metrics_api_key_env"):
        if key in server:
            out[key] = _str(server[key], f"{source}: server.{key}")
    admin = _table(data, "admin", source)
    _known(admin, _ADMIN, source, "admin.")
    for key in ("host", "api_key_env"):
        if key in admin:
            out[f"admin_{key}"] = _str(admin[key], f"{source}: admin.{key}")
    if "port" in admin:
        out["admin_port"] = _int(admin["port"], f"{source}: admin.port")
    for key in ("port", "max_body_bytes", "max_connections", "metrics_adapters", "request_log_max_bytes"):
        if key in server:
            out[key] = _int(server[key], f"{source}: server.{key}")
    if "request_log" in server:
        out["request_log"] = _under(base, _str(server["request_log"], f"{source}: server.request_log"))
    if "tracing" in server:
        if type(server["tracing"]) is not bool:
            raise ConfigError(
                f"{source}: server.tracing must be true or false, not {_shown(server['tracing'])}"
            )
        out["tracing"] = server["tracing"]
    peers = _table(data, "peers", source)
    _known(peers, _PEERS, source, "peers.")
    if "urls" in peers:
        urls = peers["urls"]
        if not isinstance(urls, list):
            raise ConfigError(f"{source}: peers.urls must be a list of URLs, not {_shown(urls)}")
        out["peers"] = tuple(_str(u, f"{source}: peers.urls[{i}]") for i, u in enumerate(urls))
    if "dns" in peers:
        out["peers_dns"] = _str(peers["dns"], f"{source}: peers.dns")
    if "port" in peers:
        out["peers_port"] = _int(peers["port"], f"{source}: peers.port")
    if "interval" in peers:
        out["peers_interval"] = _seconds(peers["interval"], f"{source}: peers.interval")
    fleet = _table(data, "fleet", source)
    _known(fleet, _FLEET, source, "fleet.")
    for key in ("headroom", "attempts", "routers", "concurrency"):
        if key in fleet:
            out[key] = _int(fleet[key], f"{source}: fleet.{key}")
    if "prewarm" in fleet:
        names = fleet["prewarm"]
        where = f"{source}: fleet.prewarm"
        if not isinstance(names, list):
            raise ConfigError(f"{where} must be a list of adapter names, not {_shown(names)}")
        out["prewarm"] = tuple(_str(n, f"{where}[{i}]") for i, n in enumerate(names))
    timeouts = _table(data, "timeouts", source)
    _known(timeouts, _TIMEOUTS, source, "timeouts.")
    for key, value in timeouts.items():
        name = key if key in ("listing_interval", "shared_interval") else f"{key}_timeout"
        out[name] = _seconds(value, f"{source}: timeouts.{key}")
    adapters = _table(data, "adapters", source)
    _known(adapters, _ADAPTERS, source, "adapters.")
    if "root" in adapters:
        out["adapter_root"] = _under(base, _str(adapters["root"], f"{source}: adapters.root"))
    if "refresh" in adapters:
        out["adapter_refresh"] = _seconds(adapters["refresh"], f"{source}: adapters.refresh")
    if "model" in adapters:
        out["adapter_model"] = _str(adapters["model"], f"{source}: adapters.model")
    if "paths" in adapters:
        paths, models = _adapter_table(adapters["paths"], f"{source}: adapters.paths")
        out["adapter_paths"] = {name: str(_under(base, path)) for name, path in paths.items()}
        out["adapter_models"] = models
    if "pins" in data:
        pins = _table(data, "pins", source)
        out["pins"] = {name: _int(copies, f"{source}: pins.{name}") for name, copies in pins.items()}
    if "replicas" in data:
        out["replicas"] = _replicas(data["replicas"], source)
    if "discover" in data:
        out["discover"] = _discovers(data["discover"], source)
    return out


def _under(base: Path | None, path: str) -> Path:
    folder = Path(path).expanduser()
    return folder if base is None or folder.is_absolute() else base / folder


def _adapter_table(value: object, where: str) -> tuple[dict[str, str], dict[str, str]]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table of adapter name = folder, not {_shown(value)}")
    paths: dict[str, str] = {}
    models: dict[str, str] = {}
    for name, entry in value.items():
        if isinstance(entry, dict):
            _known(entry, {"path", "model"}, where, f"{name}.")
            if "path" not in entry:
                raise ConfigError(f"{where}.{name} needs a path")
            paths[name] = _str(entry["path"], f"{where}.{name}.path")
            if "model" in entry:
                models[name] = _str(entry["model"], f"{where}.{name}.model")
        else:
            paths[name] = _str(entry, f"{where}.{name}")
    return paths, models


def _replicas(value: object, source: str) -> tuple[ReplicaConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(
            f"{source}: replicas must be an array of tables ([[replicas]]), not {_shown(value)}"
        )
    out = []
    for i, entry in enumerate(value):
        where = f"{source}: replicas[{i}]"
        _known(entry, _REPLICA, where, "")
        for key in ("id", "url", "model"):
            if key not in entry:
                raise ConfigError(f"{where} needs {key}")
        out.append(
            ReplicaConfig(
                id=_str(entry["id"], f"{where}.id"),
                url=_str(entry["url"], f"{where}.url"),
                model=_str(entry["model"], f"{where}.model"),
                limit=_int(entry["limit"], f"{where}.limit") if "limit" in entry else None,
                api_key_env=_str(entry["api_key_env"], f"{where}.api_key_env")
                if "api_key_env" in entry
                else None,
                max_cpu_loras=_int(entry["max_cpu_loras"], f"{where}.max_cpu_loras")
                if "max_cpu_loras" in entry
                else None,
                max_loras=_int(entry["max_loras"], f"{where}.max_loras") if "max_loras" in entry else None,
            )
        )
    return tuple(out)


def _discovers(value: object, source: str) -> tuple[DiscoverConfig, ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(
            f"{source}: discover must be an array of tables ([[discover]]), not {_shown(value)}"
        )
    out = []
    for i, entry in enumerate(value):
        where = f"{source}: discover[{i}]"
        _known(entry, _DISCOVER, where, "")
        for key in ("dns", "model"):
            if key not in entry:
                raise ConfigError(f"{where} needs {key}")
        fields: dict[str, Any] = {}
        for key in ("dns", "model", "api_key_env", "resolver"):
            if key in entry:
                fields[key] = _str(entry[key], f"{where}.{key}")
        for key in ("limit", "port", "max_cpu_loras", "max_loras"):
            if key in entry:
                fields[key] = _int(entry[key], f"{where}.{key}")
        if "srv" in entry:
            if type(entry["srv"]) is not bool:
                raise ConfigError(f"{where}.srv must be true or false, not {_shown(entry['srv'])}")
            fields["srv"] = entry["srv"]
        if "interval" in entry:
            fields["interval"] = _seconds(entry["interval"], f"{where}.interval")
        out.append(DiscoverConfig(**fields))
    return tuple(out)


def _table(data: Mapping[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key} must be a table ([{key}]), not {_shown(value)}")
    return value


def _known(table: Mapping[str, Any], known: set[str], source: str, prefix: str) -> None:
    for key in table:
        if key in _SECRET_KEYS:
            raise ConfigError(f"{source}: {prefix}{key}: {_NO_SECRETS}")
        if key not in known:
            raise ConfigError(
                f"{source}: unknown setting {prefix}{key} (known here: {', '.join(sorted(known))})"
            )


# -- the flags ------------------------------------------------------------------------------------


def replica_flag(text: str) -> ReplicaConfig:
    """One ``--replica id=gpu-0,url=http://10.0.0.5:8000,model=llama,max_cpu_loras=N[,max_loras=N][,limit=4]
    [,api_key_env=VAR]`` (``limit``, the engine's memory (``max_cpu_loras``, else ``max_loras``), or both)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise ConfigError(f"--replica {text!r}: {part!r} is not key=value")
        if key in _SECRET_KEYS:
            raise ConfigError(f"--replica: {key}: {_NO_SECRETS}")
        if key not in _REPLICA:
            raise ConfigError(
                f"--replica {text!r}: unknown field {key!r} (known: {', '.join(sorted(_REPLICA))})"
            )
        fields[key] = value.strip()
    for key in ("id", "url", "model"):
        if key not in fields:
            raise ConfigError(f"--replica {text!r} needs {key}=")
    cpu = fields.get("max_cpu_loras")
    batch = fields.get("max_loras")
    limit = fields.get("limit")
    return ReplicaConfig(
        id=fields["id"],
        url=fields["url"],
        model=fields["model"],
        limit=_whole_field("--replica", text, "limit", limit) if limit is not None else None,
        api_key_env=fields.get("api_key_env"),
        max_cpu_loras=_whole_field("--replica", text, "max_cpu_loras", cpu) if cpu is not None else None,
        max_loras=_whole_field("--replica", text, "max_loras", batch) if batch is not None else None,
    )


def _whole_field(flag: str, text: str, key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: {key} must be a whole number, not {value!r}") from None


def discover_flag(text: str) -> DiscoverConfig:
    """One ``--discover dns=NAME,port=8000,model=llama,limit=4[,srv=true][,api_key_env=VAR][,interval=5]
    [,resolver=HOST:PORT][,max_cpu_loras=N][,max_loras=N]``."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise ConfigError(f"--discover {text!r}: {part!r} is not key=value")
        if key in _SECRET_KEYS:
            raise ConfigError(f"--discover: {key}: {_NO_SECRETS}")
        if key not in _DISCOVER:
            raise ConfigError(
                f"--discover {text!r}: unknown field {key!r} (known: {', '.join(sorted(_DISCOVER))})"
            )
        fields[key] = value.strip()
    for key in ("dns", "model"):
        if key not in fields:
            raise ConfigError(f"--discover {text!r} needs {key}=")
    out: dict[str, Any] = {k: fields[k] for k in ("dns", "model", "api_key_env", "resolver") if k in fields}
    for key in ("limit", "port", "max_cpu_loras", "max_loras"):
        if key in fields:
            out[key] = _whole_field("--discover", text, key, fields[key])
    if "srv" in fields:
        if fields["srv"].lower() not in ("true", "false"):
            raise ConfigError(f"--discover {text!r}: srv must be true or false, not {fields['srv']!r}")
        out["srv"] = fields["srv"].lower() == "true"
    if "interval" in fields:
        try:
            out["interval"] = float(fields["interval"])
        except ValueError:
            raise ConfigError(
                f"--discover {text!r}: interval must be a number of seconds, not {fields['interval']!r}"
            ) from None
    return DiscoverConfig(**out)


def pair_flag(flag: str, text: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a repeated flag such as ``--adapter sql=/adapters/sql``."""
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not value.strip():
        raise ConfigError(f"{flag} {text!r}: expected NAME=VALUE")
    return name.strip(), value.strip()


# -- checking it all together -----------------------------------------------------------------------


def build(settings: Mapping[str, Any]) -> Config:
    """The ``Config`` of ``settings`` (file values overridden by flags), checked.

    Raises:
        ConfigError: a setting is out of range, or the settings contradict each other.
    """
    if not settings.get("replicas") and not settings.get("discover"):
        raise ConfigError(
            "no replicas: give at least one ([[replicas]] in the file, or --replica), or a name to "
            "discover them by ([[discover]], or --discover)"
        )
    try:
        config = Config(**settings)
    except TypeError as exc:  # a programming error in the caller, not the user's; keep it loud
        raise AssertionError(f"unknown Config settings: {exc}") from exc
    config = _limits(config)
    check(config)
    return config


def _limits(config: Config) -> Config:
    """``config`` with every limit left out set to what fits its engine's memory (``max_cpu_loras``, else
    ``max_loras``) with the fleet's headroom and routers (``lorafleet.limit_for``: the sizing rule
    docs/vllm.md states).

    Raises:
        ConfigError: an entry gives neither, or no limit fits.
    """
    headroom = HEADROOM if config.headroom is None else config.headroom

    def fill(limit: int | None, memory: int | None, where: str) -> int:
        if limit is not None:
            return limit
        if memory is None:
            raise ConfigError(
                f"{where} needs limit or max_cpu_loras: the engine's --max-cpu-loras (or its --max-loras, "
                "when it runs without --max-cpu-loras), from which the limit follows (every adapter it "
                "keeps in memory, with the default headroom 0)"
            )
        if config.routers < 1 or headroom < 0:
            return memory  # check() says what is wrong with those
        try:
            return limit_for(memory, headroom, config.routers)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    replicas = tuple(
        attrs.evolve(r, limit=fill(r.limit, r.memory, f"replicas[{i}] ({r.id!r})"))
        for i, r in enumerate(config.replicas)
    )
    discover = tuple(
        attrs.evolve(d, limit=fill(d.limit, d.memory, d.label(i))) for i, d in enumerate(config.discover)
    )
    return attrs.evolve(config, replicas=replicas, discover=discover)


def _engine(entry: _Engines, where: str) -> None:
    """Raise ConfigError unless the engine's settings, as declared, are ones vLLM starts with."""
    for key, value in (("max_cpu_loras", entry.max_cpu_loras), ("max_loras", entry.max_loras)):
        if value is not None and value < 1:
            raise ConfigError(f"{where}.{key} must be at least 1, not {value}")
    if entry.max_cpu_loras is not None and entry.max_loras is not None:
        refused = engine_refusal(entry.max_cpu_loras, entry.max_loras)
        if refused is not None:
            raise ConfigError(f"{where}: {refused}; declare what the engine runs with")


def check(config: Config) -> None:
    """Raise ConfigError unless ``config`` makes sense as a whole."""
    ids: set[str] = set()
    limits: dict[str, int] = {}
    for i, replica in enumerate(config.replicas):
        where = f"replicas[{i}] ({replica.id!r})" if replica.id else f"replicas[{i}]"
        try:
            Replica(id=replica.id, url=replica.url, model=replica.model, limit=replica.resolved_limit)
        except InvalidValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if replica.id in ids:
            raise ConfigError(f"{where}: the id {replica.id!r} is used twice; every replica needs its own")
        ids.add(replica.id)
        if replica.api_key_env is not None:
            _env_name(replica.api_key_env, f"{where}.api_key_env")
        _engine(replica, where)
        known = limits.setdefault(replica.model, replica.resolved_limit)
        if known != replica.limit:
            raise ConfigError(
                f"{where}: limit {replica.limit}, but another replica of {replica.model!r} has {known}: "
                "a limit belongs to the model, give its replicas the same one"
            )
    for i, found in enumerate(config.discover):
        where = found.label(i)
        _check_discover(found, where)
        known = limits.setdefault(found.model, found.resolved_limit)
        if known != found.limit:
            raise ConfigError(
                f"{where}: limit {found.limit}, but another replica of {found.model!r} has {known}: "
                "a limit belongs to the model, give its replicas the same one"
            )
    models = set(limits)
    if config.adapter_root is None and not config.adapter_paths:
        raise ConfigError(
            "no adapters: give a directory root (adapters.root, --adapters-root) or a table "
            "of name = folder (adapters.paths, --adapter NAME=FOLDER)"
        )
    if config.adapter_root is not None and not config.adapter_root.is_dir():
        raise ConfigError(f"adapters.root {str(config.adapter_root)!r} is not a directory")
    for name, path in config.adapter_paths.items():
        if not name:
            raise ConfigError("adapters.paths: an adapter name is empty")
        if name in models:
            raise ConfigError(
                f"adapters.paths.{name}: {name!r} is a base model's name; an adapter needs another"
            )
        if not path:
            raise ConfigError(f"adapters.paths.{name}: the folder is empty")
    for name, model in config.adapter_models.items():
        if model not in models:
            raise ConfigError(f"adapters.paths.{name}.model: no replica serves {model!r} ({_listed(models)})")
    if config.adapter_model is not None and config.adapter_model not in models:
        raise ConfigError(f"adapters.model: no replica serves {config.adapter_model!r} ({_listed(models)})")
    for name, copies in config.pins.items():
        if type(copies) is not int or copies < 1:
            raise ConfigError(f"pins.{name}: copies must be a whole number of at least 1, not {copies!r}")
        _adapter_known(config, name, f"pins.{name}")
    for name in config.prewarm:
        _adapter_known(config, name, f"fleet.prewarm {name!r}")
    if not 0 <= config.port <= 65535:
        raise ConfigError(f"server.port must be between 0 and 65535, not {config.port}")
    if not config.host:
        raise ConfigError("server.host is empty")
    if config.api_key_env is not None:
        _env_name(config.api_key_env, "server.api_key_env")
    if config.metrics_api_key_env is not None:
        _env_name(config.metrics_api_key_env, "server.metrics_api_key_env")
    _check_admin(config)
    _check_peers(config)
    for name, value, least in (
        ("server.max_body_bytes", config.max_body_bytes, 1),
        ("server.max_connections", config.max_connections, 1),
        ("fleet.attempts", config.attempts, 1),
        ("fleet.routers", config.routers, 1),
        ("server.metrics_adapters", config.metrics_adapters, 0),
        ("server.request_log_max_bytes", config.request_log_max_bytes, 1),
    ):
        if value < least:
            raise ConfigError(f"{name} must be at least {least}, not {value}")
    if config.headroom is not None and config.headroom < 0:
        raise ConfigError(f"fleet.headroom must be 0 or more, not {config.headroom}")
    if config.request_log is not None and not config.request_log.parent.is_dir():
        raise ConfigError(f"server.request_log: {str(config.request_log)!r} is not in a folder that exists")
    if config.tracing and not tracing_available():
        raise ConfigError(f"server.tracing: OpenTelemetry is not installed here: {INSTALL}")
    if config.concurrency is not None and config.concurrency < 1:
        raise ConfigError(f"fleet.concurrency must be at least 1, not {config.concurrency}")
    for name, seconds in (
        ("timeouts.load", config.load_timeout),
        ("timeouts.listing", config.listing_timeout),
        ("timeouts.listing_interval", config.listing_interval),
        ("timeouts.shared_interval", config.shared_interval),
        ("adapters.refresh", config.adapter_refresh),
        ("timeouts.connect", config.connect_timeout),
        ("timeouts.read", config.read_timeout),
        ("timeouts.shutdown", config.shutdown_timeout),
    ):
        if not 0 < seconds < math.inf:
            raise ConfigError(f"{name} must be a positive number of seconds, not {seconds!r}")


def _check_peers(config: Config) -> None:
    for i, url in enumerate(config.peers):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise ConfigError(
                f"peers.urls[{i}]: {url!r} is not a router's root URL (http://host:port, no path)"
            )
    if config.peers_dns is not None and not config.peers_dns:
        raise ConfigError("peers.dns is empty")
    if not 0 < config.peers_port <= 65535:
        raise ConfigError(f"peers.port must be between 1 and 65535, not {config.peers_port}")
    if config.peers_interval <= 0:
        raise ConfigError(f"peers.interval must be more than 0 seconds, not {config.peers_interval:g}")


def _check_admin(config: Config) -> None:
    if config.admin_port is None:
        if config.admin_api_key_env is not None:
            raise ConfigError(
                "admin.api_key_env is set, but admin.port is not: give the admin interface a port"
            )
        return
    if not 0 <= config.admin_port <= 65535:
        raise ConfigError(f"admin.port must be between 0 and 65535, not {config.admin_port}")
    if config.admin_port == config.port != 0 and config.admin_host == config.host:
        raise ConfigError(
            f"admin.port {config.admin_port} is server.port too: the admin interface needs a port of its own"
        )
    if not config.admin_host:
        raise ConfigError("admin.host is empty")
    if config.admin_api_key_env is None:
        raise ConfigError(
            "admin.port needs admin.api_key_env: the admin interface drains replicas and forgets refusals, "
            "so it always wants a key of its own (name the environment variable holding it)"
        )
    _env_name(config.admin_api_key_env, "admin.api_key_env")
    if config.admin_api_key_env == config.api_key_env:
        raise ConfigError(
            f"admin.api_key_env names {config.admin_api_key_env}, the clients' key (server.api_key_env): "
            "any client could then drain replicas; give the admin interface a key of its own"
        )


def _check_discover(found: DiscoverConfig, where: str) -> None:
    if not found.dns or found.dns.startswith(".") or " " in found.dns:
        raise ConfigError(f"{where}.dns must be a DNS name, not {found.dns!r}")
    if not found.model:
        raise ConfigError(f"{where}.model is empty")
    if found.resolved_limit < 1:
        raise ConfigError(f"{where}.limit must be at least 1, not {found.limit}")
    if found.port is None and not found.srv:
        raise ConfigError(f"{where} needs port (the replicas' port), or srv = true (SRV records carry it)")
    if found.port is not None and not 0 < found.port < 65536:
        raise ConfigError(f"{where}.port must be between 1 and 65535, not {found.port}")
    if not 0 < found.interval < math.inf:
        raise ConfigError(f"{where}.interval must be a positive number of seconds, not {found.interval!r}")
    if found.api_key_env is not None:
        _env_name(found.api_key_env, f"{where}.api_key_env")
    _engine(found, where)
    if found.resolver is not None:
        try:
            parse_server(found.resolver)
        except ValueError:
            raise ConfigError(
                f"{where}.resolver must be a DNS server's address and port (10.0.0.10:53, [fd00::a]:53), "
                f"not {found.resolver!r}"
            ) from None


def _adapter_known(config: Config, name: str, where: str) -> None:
    if name in config.adapter_paths:
        return
    root = config.adapter_root
    if root is not None and ADAPTER_NAME.fullmatch(name) and (root / name / "adapter_config.json").is_file():
        return
    raise ConfigError(f"{where}: no adapter of that name in adapters.paths or under adapters.root")


def _env_name(name: str, where: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise ConfigError(f"{where} must name an environment variable (letters, digits, _), not {name!r}")


def _listed(models: set[str]) -> str:
    return "the replicas serve " + ", ".join(repr(m) for m in sorted(models))


# -- keys, from the environment ------------------------------------------------------------------


def resolve(config: Config, environ: Mapping[str, str] | None = None) -> tuple[list[Replica], str | None]:
    """The replicas with their keys read from ``environ``, and this router's own clients' key.

    Raises:
        ConfigError: a variable the configuration names is unset or empty.
    """
    env = os.environ if environ is None else environ

    def key(name: str | None, where: str) -> str | None:
        if name is None:
            return None
        value = env.get(name)
        if not value:
            state = "empty" if value == "" else "not set"
            raise ConfigError(f"{where} names the environment variable {name}, which is {state}")
        return value

    replicas = [
        Replica(
            id=r.id,
            url=r.url,
            model=r.model,
            limit=r.resolved_limit,
            api_key=key(r.api_key_env, f"replica {r.id!r}'s api_key_env"),
        )
        for r in config.replicas
    ]
    for i, found in enumerate(config.discover):
        key(found.api_key_env, f"{found.label(i)}'s api_key_env")
    key(config.metrics_api_key_env, "server.metrics_api_key_env")
    key(config.admin_api_key_env, "admin.api_key_env")
    return replicas, key(config.api_key_env, "server.api_key_env")


def own_key(config: Config, setting: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The key the router's own ``/metrics`` (``setting`` "metrics") or admin interface ("admin") wants,
    from the variable the configuration names; None when it names none.

    Raises:
        ConfigError: the variable is unset or empty.
    """
    name, where = (
        (config.metrics_api_key_env, "server.metrics_api_key_env")
        if setting == "metrics"
        else (config.admin_api_key_env, "admin.api_key_env")
    )
    if name is None:
        return None
    value = (os.environ if environ is None else environ).get(name)
    if not value:
        state = "empty" if value == "" else "not set"
        raise ConfigError(f"{where} names the environment variable {name}, which is {state}")
    return value


def discovered_key(found: DiscoverConfig, index: int, environ: Mapping[str, str] | None = None) -> str | None:
    """The key of the replicas ``found`` discovers, from the variable it names (None: no key).

    Raises:
        ConfigError: the variable is unset or empty.
    """
    if found.api_key_env is None:
        return None
    value = (os.environ if environ is None else environ).get(found.api_key_env)
    if not value:
        state = "empty" if value == "" else "not set"
        raise ConfigError(
            f"{found.label(index)}'s api_key_env names the environment variable {found.api_key_env}, "
            f"which is {state}"
        )
    return value


# -- small checks -----------------------------------------------------------------------------------


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, not {_shown(value)}")
    return value


def _int(value: object, where: str) -> int:
    if type(value) is not int:
        raise ConfigError(f"{where} must be a whole number, not {_shown(value)}")
    return value


def _seconds(value: object, where: str) -> float:
    if type(value) not in (int, float) or not 0 < value < math.inf:  # type: ignore[operator]
        raise ConfigError(f"{where} must be a positive number of seconds, not {_shown(value)}")
    return float(value)  # type: ignore[arg-type]
