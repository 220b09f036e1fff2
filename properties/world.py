"""The simulated world around the machine: vLLM engines, the calls out to them, other routers.

The property tests (fleet_model.py) and the vector generator (vectors/generate.py) both play the
machine against this world; it is the one place that says what an engine does with a call.

An engine is a registry of adapter names, in the order they were registered (vLLM lists them so). A
call the machine asks for stays out until the world answers it, in one of four ways (``Way``); the
answer changes the registry as the engine would and comes back as a ``Reply``: the event the world
means, and the HTTP answer that carries it, which ``Reply.over_the_wire`` reads back through
``lorafleet.vllm`` as a shell would. Around the engines: another router loads and unloads behind the
machine's back, and runs requests its engine's ``/metrics`` names, and an engine restarts with nothing
registered.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping

import attrs

from lorafleet import (
    Command,
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadFinished,
    LoadOutcome,
    ReadEngine,
    ReadingFailed,
    ReadingReceived,
    ReadListing,
    UnloadFinished,
    UnloadOutcome,
    vllm,
)

Call = IssueLoad | IssueUnload | ReadListing | ReadEngine
Answer = LoadFinished | UnloadFinished | ListingReceived | ListingFailed | ReadingReceived | ReadingFailed

REFUSED = frozenset({"bad"})
"""Adapters every engine refuses (a rank above the engine's limit): the adapter's fault."""
MESSAGE = "engine"
"""The message of the events the world means (the wire's own words come with ``over_the_wire``)."""


class Way(enum.Enum):
    """How the engine answers one call."""

    AS_ASKED = "as asked"
    """The engine does what it was asked and says so; a refused adapter is refused."""
    ADAPTER_FAULT = "adapter fault"
    """A load: the adapter's files are not there. (An unload or a listing: as asked.)"""
    FAULT_BEFORE = "replica fault before the engine acted"
    """An error or no answer at all; the engine did nothing."""
    FAULT_AFTER = "replica fault after the engine acted"
    """The engine did what it was asked, and the answer was lost."""
    ANOTHER_ROUTER_FIRST = "another router did the same just before"
    """A load finds the adapter loaded already; an unload finds it gone. (A listing: as asked.)"""


def operation(command: Call) -> int:
    """The operation number of a call."""
    match command:
        case IssueLoad():
            return command.load
        case IssueUnload():
            return command.unload
        case ReadListing():
            return command.listing
        case ReadEngine():
            return command.read


def _calls(commands: Iterable[Command]) -> list[Call]:
    return [c for c in commands if isinstance(c, IssueLoad | IssueUnload | ReadListing | ReadEngine)]


@attrs.frozen
class Reply:
    """A call's answer: the event the world means, and the HTTP answer (``status`` None: none came)."""

    command: Call
    event: Answer
    status: int | None
    body: bytes

    def over_the_wire(self) -> Answer:
        """The event a shell makes of the HTTP answer, through ``lorafleet.vllm``."""
        if self.status is None:
            return vllm.failure_event(self.command, self.body.decode())
        return vllm.answer_event(self.command, self.status, self.body)

    def means(self, event: Answer) -> bool:
        """Whether ``event`` says what the world meant (the messages aside)."""
        match self.event, event:
            case LoadFinished(), LoadFinished():
                return (event.load, event.outcome) == (self.event.load, self.event.outcome)
            case UnloadFinished(), UnloadFinished():
                return (event.unload, event.outcome) == (self.event.unload, self.event.outcome)
            case ListingReceived(), ListingReceived():
                return event == self.event
            case ListingFailed(), ListingFailed():
                return event.listing == self.event.listing
            case ReadingReceived(), ReadingReceived():
                return event == self.event
            case ReadingFailed(), ReadingFailed():
                return event.read == self.event.read
        return False


# -- how vLLM says it, by release line (the wire protocol's notes; `variant` picks one) ----------


def _flat(message: str, code: int | str) -> bytes:
    return json.dumps(
        {"object": "error", "message": message, "type": "BadRequestError", "code": code}
    ).encode()


def _nested(message: str, code: int | str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "Error", "param": None, "code": code}}).encode()


_RANK = "LoRA rank 64 is greater than max_lora_rank 16."


def _already(name: str, variant: int) -> tuple[int, bytes]:
    return [
        (400, _flat(f"The lora adapter '{name}' has already beenloaded.", 400)),  # 0.6
        (400, _flat(f"The lora adapter '{name}' has already been loaded.", 400)),  # 0.7.3-0.10.0
        (400, _nested(f"The lora adapter '{name}' has already been loaded. If you want...", 400)),  # 0.15+
        (400, _nested(f"LoRA adapter `{name}` is already loaded.", "invalid_request_error")),  # Rust
    ][variant % 4]


def _refused(variant: int) -> tuple[int, bytes]:
    return [
        (400, _flat(f"Call to add_lora method failed: {_RANK}", 400)),  # up to 0.17
        (500, _nested(f"Call to add_lora method failed: Worker failed with error '{_RANK}', ...", 500)),
        (400, _nested("While loading /a, expected target modules in {'q'} but received {'z'}.", 400)),
        (500, _nested("/adapters/bad doesn't contain tensors", 500)),
    ][variant % 4]


def _missing(name: str, variant: int) -> tuple[int, bytes]:
    words = f"Loading lora {name} failed: No adapter found for /adapters/{name}"
    return [
        (400, _flat(f"Call to add_lora method failed: {words}", 400)),  # 0.7.x
        (404, _nested(f"Call to add_lora method failed: {words}", 404)),  # 0.8.5-0.17
        (404, _nested(f"Loading lora {name} failed: No adapter found for <path>", 404)),  # 0.27+
    ][variant % 3]


def _load_trouble(variant: int) -> tuple[int | None, bytes]:
    return [
        (None, b"connection refused"),
        (503, b""),
        (500, _nested("EngineCore encountered an issue.", 500)),
        # A worker failure that is not the adapter's: every replica would not refuse it.
        (500, _nested("Call to add_lora method failed: Worker failed with error 'CUDA out of memory'", 500)),
        (500, _nested("LoRA is not enabled. Use --enable-lora to enable LoRA.", 500)),
    ][variant % 5]


def _unload_trouble(variant: int) -> tuple[int | None, bytes]:
    return [(None, b"connection refused"), (500, _nested("Server shutting down", 500)), (503, b"")][
        variant % 3
    ]


def _lost(variant: int) -> tuple[int | None, bytes]:
    return [(None, b"timed out"), (None, b"the replica closed the connection"), (504, b"")][variant % 3]


def _not_found(name: str, variant: int) -> tuple[int, bytes]:
    words = f"The lora adapter '{name}' cannot be found."
    return [
        (400, _flat(words, 400)),  # 0.6
        (404, _flat(words, 404)),  # 0.7.0-0.10.0
        (404, _nested(words, 404)),  # 0.10.1+
        (404, _nested(f"The model `{name}` does not exist.", "model_not_found")),  # Rust
    ][variant % 4]


def _listing_trouble(variant: int) -> tuple[int | None, bytes]:
    return [(None, b"timed out"), (500, _nested("Internal Server Error", 500)), (200, b"<html>")][variant % 3]


def _reading_trouble(variant: int) -> tuple[int | None, bytes]:
    return [(None, b"timed out"), (503, b""), (500, b"Internal Server Error")][variant % 3]


def _metrics(names: Iterable[str], running: int, waiting: int, max_loras: int) -> bytes:
    """``/metrics`` as vLLM 0.32 writes it: the gauge (an older, emptier series too) and the queue."""
    listed = ",".join(names)
    return (
        "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
        "# TYPE vllm:lora_requests_info gauge\n"
        f'vllm:lora_requests_info{{max_lora="{max_loras}",running_lora_adapters="",'
        'waiting_lora_adapters=""} 1.0\n'
        f'vllm:lora_requests_info{{max_lora="{max_loras}",running_lora_adapters="{listed}",'
        f'waiting_lora_adapters="{listed}"}} 2.0\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0\n'
    ).encode()


def _listing(model: str, names: Iterable[str]) -> bytes:
    cards = [{"id": model, "object": "model", "root": f"/models/{model}", "parent": None}]
    cards += [{"id": n, "object": "model", "root": f"/adapters/{n}", "parent": model} for n in names]
    return json.dumps({"object": "list", "data": cards}).encode()


# -- the world ------------------------------------------------------------------------------------


@attrs.define
class Outstanding:
    command: Call
    served: tuple[str, ...] | None = None
    """For a listing: what the engine had when it read its registry, once it has."""
    reply: Reply | None = None
    """For a load or an unload the engine has acted on: its answer, still on its way."""


@attrs.define
class World:
    """Simulated vLLM engines, one per replica, and the calls the machine has out to them.

    Args:
        models: each replica's base model.
    """

    models: Mapping[str, str]
    engines: dict[str, dict[str, None]] = attrs.field(init=False)
    """Each engine's registered adapters, in registration order."""
    calls: dict[int, Outstanding] = attrs.field(init=False, factory=dict)
    running: dict[str, frozenset[str]] = attrs.field(init=False)
    """What each engine's ``/metrics`` names as running: other routers' requests (``others_run``)."""
    max_loras: int = 2
    """Every engine's ``--max-loras``, which its ``/metrics`` says: it raises a small cap ([cap])."""
    queues: dict[str, tuple[int, int]] = attrs.field(init=False)
    """Each engine's requests running besides one per adapter named, and waiting (``busy``)."""

    def __attrs_post_init__(self) -> None:
        self.engines = {replica: {} for replica in self.models}
        self.running = dict.fromkeys(self.models, frozenset())
        self.queues = dict.fromkeys(self.models, (0, 0))

    # -- the machine's calls -----------------------------------------------------------------------

    def took(self, commands: Iterable[Command]) -> None:
        """Record the calls among ``commands``; the engines' side of safety holds for each.

        Raises:
            AssertionError: an operation number is reused, or a load and an unload (or two loads)
                of one adapter on one replica would be out together.
        """
        for command in _calls(commands):
            op = operation(command)
            assert op not in self.calls, f"operation {op} issued twice"
            if isinstance(command, IssueLoad | IssueUnload):
                crossing = self.out(command.replica, command.adapter)
                assert not crossing, f"{command} while {crossing} is out"
            self.calls[op] = Outstanding(command)

    def out(self, replica: str, adapter: str) -> list[IssueLoad | IssueUnload]:
        """The loads and unloads of ``adapter`` on ``replica`` not yet answered."""
        return [
            c.command
            for c in self.calls.values()
            if isinstance(c.command, IssueLoad | IssueUnload)
            and (c.command.replica, c.command.adapter) == (replica, adapter)
        ]

    def pending(
        self, kind: type[Call] | tuple[type[Call], ...] = (IssueLoad, IssueUnload, ReadListing, ReadEngine)
    ) -> list[int]:
        """The operation numbers of the calls of ``kind`` not yet answered, lowest first."""
        return sorted(op for op, c in self.calls.items() if isinstance(c.command, kind))

    def unserved_listings(self) -> list[int]:
        return sorted(
            op for op, c in self.calls.items() if isinstance(c.command, ReadListing) and c.served is None
        )

    def serve_listing(self, op: int) -> None:
        """The engine reads its registry for listing ``op``; the answer is still on its way."""
        call = self.calls[op]
        call.served = tuple(self.engines[call.command.replica])

    def act(self, op: int, way: Way = Way.AS_ASKED, variant: int = 0) -> None:
        """The engine carries out load or unload ``op`` in ``way`` now; its answer comes with ``answer``."""
        call = self.calls[op]
        names = self.engines[call.command.replica]
        match call.command:
            case IssueLoad():
                call.reply = self._load(call.command, names, way, variant)
            case IssueUnload():
                call.reply = self._unload(call.command, names, way, variant)
            case ReadListing() | ReadEngine():
                raise ValueError(f"a read is served, not acted on: {call.command}")

    def acted(self, op: int) -> bool:
        return self.calls[op].reply is not None

    def answer(self, op: int, way: Way = Way.AS_ASKED, variant: int = 0) -> Reply:
        """The engine answers call ``op`` in ``way`` (unless it acted on it already, in a way of its
        own); ``variant`` picks how vLLM words it."""
        call = self.calls.pop(op)
        command = call.command
        names = self.engines[command.replica]
        if call.reply is not None:
            return call.reply
        match command:
            case IssueLoad():
                return self._load(command, names, way, variant)
            case IssueUnload():
                return self._unload(command, names, way, variant)
            case ReadListing():
                if way in (Way.FAULT_BEFORE, Way.FAULT_AFTER):
                    status, body = _listing_trouble(variant)
                    return Reply(command, ListingFailed(listing=op, message=MESSAGE), status, body)
                listed = call.served if call.served is not None else tuple(names)
                event = ListingReceived(listing=op, adapters=listed)
                return Reply(command, event, 200, _listing(self.models[command.replica], listed))
            case ReadEngine():
                if way in (Way.FAULT_BEFORE, Way.FAULT_AFTER):
                    status, body = _reading_trouble(variant)
                    return Reply(command, ReadingFailed(read=op, message=MESSAGE), status, body)
                running = tuple(sorted(self.running[command.replica]))
                more, waiting = self.queues[command.replica]
                count = len(running) + more
                reading = ReadingReceived(
                    read=op, adapters=running, running=count, waiting=waiting, max_loras=self.max_loras
                )
                return Reply(command, reading, 200, _metrics(running, count, waiting, self.max_loras))

    def _load(self, command: IssueLoad, names: dict[str, None], way: Way, variant: int) -> Reply:
        status: int | None
        if way is Way.ANOTHER_ROUTER_FIRST and command.adapter not in REFUSED:
            names[command.adapter] = None
        if way is Way.FAULT_BEFORE:
            outcome = LoadOutcome.REPLICA_FAULT
            status, body = _load_trouble(variant)
        elif way is Way.ADAPTER_FAULT:
            outcome = LoadOutcome.ADAPTER_FAULT
            status, body = _missing(command.adapter, variant)
        elif command.adapter in REFUSED:
            outcome = LoadOutcome.ADAPTER_FAULT
            status, body = _refused(variant)
        elif way is Way.FAULT_AFTER:
            names[command.adapter] = None
            outcome = LoadOutcome.REPLICA_FAULT
            status, body = _lost(variant)
        elif command.adapter in names:
            outcome = LoadOutcome.ALREADY_LOADED
            status, body = _already(command.adapter, variant)
        else:
            names[command.adapter] = None
            outcome = LoadOutcome.LOADED
            status, body = 200, f"Success: LoRA adapter '{command.adapter}' added successfully.".encode()
        return Reply(command, LoadFinished(load=command.load, outcome=outcome, message=MESSAGE), status, body)

    def _unload(self, command: IssueUnload, names: dict[str, None], way: Way, variant: int) -> Reply:
        status: int | None
        if way is Way.ANOTHER_ROUTER_FIRST:
            names.pop(command.adapter, None)
        if way is Way.FAULT_BEFORE:
            outcome = UnloadOutcome.FAILED
            status, body = _unload_trouble(variant)
        elif way is Way.FAULT_AFTER:
            names.pop(command.adapter, None)
            outcome = UnloadOutcome.FAILED
            status, body = _lost(variant)
        elif command.adapter in names:
            del names[command.adapter]
            outcome = UnloadOutcome.UNLOADED
            status, body = 200, f"Success: LoRA adapter '{command.adapter}' removed successfully.".encode()
        else:
            outcome = UnloadOutcome.NOT_FOUND
            status, body = _not_found(command.adapter, variant)
        event = UnloadFinished(unload=command.unload, outcome=outcome, message=MESSAGE)
        return Reply(command, event, status, body)

    # -- around the engines ------------------------------------------------------------------------

    def has(self, replica: str, adapter: str) -> bool:
        """Whether the engine would serve a request for ``adapter`` (else: "does not exist", 404)."""
        return adapter in self.engines[replica]

    def other_router(self, replica: str, adapter: str, *, load: bool) -> None:
        """Another router loads (or unloads) ``adapter`` on the engine, behind the machine's back."""
        names = self.engines[replica]
        if load:
            names.setdefault(adapter, None)
        else:
            names.pop(adapter, None)

    def others_run(self, replica: str, adapters: Iterable[str]) -> None:
        """Other routers' requests run on ``adapters`` there now, and on nothing else, ``/metrics`` says."""
        self.running[replica] = frozenset(adapters)

    def busy(self, replica: str, running: int, waiting: int) -> None:
        """The engine runs ``running`` requests more than one per adapter ``/metrics`` names, and
        queues ``waiting`` ([load])."""
        self.queues[replica] = (running, waiting)

    def restart(self, replica: str) -> None:
        """The engine restarts: nothing registered, nothing running; calls out to it are answered by the
        new process."""
        self.engines[replica].clear()
        self.running[replica] = frozenset()
        self.queues[replica] = (0, 0)
