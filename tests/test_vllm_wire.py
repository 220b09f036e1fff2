"""The wire protocol against vLLM's answers, every version family (from API.md and a real 0.32 server)."""

from __future__ import annotations

import json

import pytest

from lorafleet import (
    IssueLoad,
    IssueUnload,
    ListingFailed,
    ListingReceived,
    LoadOutcome,
    ReadListing,
    UnloadOutcome,
    vllm,
)


def flat(message: str, type_: str, code: int | str) -> bytes:
    return json.dumps(
        {"object": "error", "message": message, "type": type_, "param": None, "code": code}
    ).encode()


def nested(message: str, type_: str, code: int | str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}}).encode()


LOAD = IssueLoad(load=7, replica="r", adapter="a0", path="/adapters/a0")
UNLOAD = IssueUnload(unload=3, replica="r", adapter="a0")
LISTING = ReadListing(listing=5, replica="r")


RANK = "LoRA rank 64 is greater than max_lora_rank 16."
WORKER_RANK = (
    f"Call to add_lora method failed: Worker failed with error '{RANK}', please check the stack trace above "
    "for the root cause"
)

LOADS = [
    # (what, status, body, outcome)
    ("ok, every version", 200, b"Success: LoRA adapter 'a0' added successfully.", LoadOutcome.LOADED),
    (
        "already, 0.6.3-0.7.0 typo",
        400,
        flat("The lora adapter 'a0' has already beenloaded.", "InvalidUserInput", 400),
        LoadOutcome.ALREADY_LOADED,
    ),
    (
        "already, 0.7.3-0.10.0 flat",
        400,
        flat("The lora adapter 'a0' has already been loaded.", "InvalidUserInput", 400),
        LoadOutcome.ALREADY_LOADED,
    ),
    (
        "already, 0.15+ nested with the in-place hint",
        400,
        nested(
            "The lora adapter 'a0' has already been loaded. If you want to load the adapter in place, set "
            "'load_inplace' to True.",
            "InvalidUserInput",
            400,
        ),
        LoadOutcome.ALREADY_LOADED,
    ),
    (
        "already, Rust frontend, string code",
        400,
        nested("LoRA adapter `a0` is already loaded.", "invalid_request_error", "invalid_request_error"),
        LoadOutcome.ALREADY_LOADED,
    ),
    (
        "missing path, 0.7.x V1 answers 400",
        400,
        flat(
            "Call to add_lora method failed: Loading lora m failed: No adapter found for /x",
            "BadRequestError",
            400,
        ),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "missing path, 0.8.5-0.17 404",
        404,
        nested(
            "Call to add_lora method failed: Loading lora m failed: No adapter found for /x",
            "NotFoundError",
            404,
        ),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "missing path, 0.32 sanitised",
        404,
        nested("Loading lora missing failed: No adapter found for <path>", "NotFoundError", 404),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "rank too high, up to 0.17: 400",
        400,
        flat(f"Call to add_lora method failed: {RANK}", "BadRequestError", 400),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "rank too high, 0.18+: 500 (the seed would retry it on every replica)",
        500,
        nested(WORKER_RANK, "InternalServerError", 500),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "target modules",
        500,
        nested(
            "While loading /a, expected target modules in {'q'} but received {'z'}.",
            "InternalServerError",
            500,
        ),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "no tensors",
        500,
        nested("/a doesn't contain tensors", "InternalServerError", 500),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "DoRA",
        500,
        nested("vLLM does not yet support DoRA.", "InternalServerError", 500),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "bias",
        500,
        nested("Adapter bias is not supported.", "InternalServerError", 500),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "name clashes with the base model, 0.32+",
        400,
        nested("The lora adapter 'tiny' conflicts with a served base model.", "InvalidUserInput", 400),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "empty name or path",
        400,
        nested("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400),
        LoadOutcome.ADAPTER_FAULT,
    ),
    (
        "engine dead",
        500,
        nested("EngineCore encountered an issue.", "InternalServerError", 500),
        LoadOutcome.REPLICA_FAULT,
    ),
    ("other 5xx", 503, b"", LoadOutcome.REPLICA_FAULT),
    ("401 is not the adapter's fault", 401, b'{"error":"Unauthorized"}', LoadOutcome.REPLICA_FAULT),
    ("routes absent", 404, b'{"detail":"Not Found"}', LoadOutcome.REPLICA_FAULT),
    ("garbled error body", 400, b"<html>bad gateway</html>", LoadOutcome.REPLICA_FAULT),
    (
        "LoRA disabled is the replica's misconfiguration",
        500,
        nested("LoRA is not enabled. Use --enable-lora to enable LoRA.", "InternalServerError", 500),
        LoadOutcome.REPLICA_FAULT,
    ),
]


@pytest.mark.parametrize(("what", "status", "body", "outcome"), LOADS, ids=[c[0] for c in LOADS])
def test_load_answers(what: str, status: int, body: bytes, outcome: LoadOutcome) -> None:
    event = vllm.answer_event(LOAD, status, body)
    assert (event.load, event.outcome) == (7, outcome)
    if outcome is not LoadOutcome.LOADED:
        assert event.message


UNLOADS = [
    ("ok", 200, b"Success: LoRA adapter 'a0' removed successfully.", UnloadOutcome.UNLOADED),
    (
        "not found, 0.6.x: 400",
        400,
        flat("The lora adapter 'a5' cannot be found.", "InvalidUserInput", 400),
        UnloadOutcome.NOT_FOUND,
    ),
    (
        "not found, 0.7.0-0.10.0: 404 flat",
        404,
        flat("The lora adapter 'a5' cannot be found.", "NotFoundError", 404),
        UnloadOutcome.NOT_FOUND,
    ),
    (
        "not found, 0.10.1+: 404 nested",
        404,
        nested("The lora adapter 'a5' cannot be found.", "NotFoundError", 404),
        UnloadOutcome.NOT_FOUND,
    ),
    (
        "not found, Rust frontend",
        404,
        nested("The model `a5` does not exist.", "invalid_request_error", "model_not_found"),
        UnloadOutcome.NOT_FOUND,
    ),
    ("routes absent is no success", 404, b'{"detail":"Not Found"}', UnloadOutcome.FAILED),
    ("401", 401, b'{"error":"Unauthorized"}', UnloadOutcome.FAILED),
    ("500", 500, nested("Server shutting down", "InternalServerError", 500), UnloadOutcome.FAILED),
]


@pytest.mark.parametrize(("what", "status", "body", "outcome"), UNLOADS, ids=[c[0] for c in UNLOADS])
def test_unload_answers(what: str, status: int, body: bytes, outcome: UnloadOutcome) -> None:
    assert vllm.answer_event(UNLOAD, status, body).outcome is outcome


REAL_LISTING = (
    b'{"object":"list","data":[{"id":"tiny","object":"model","created":1796222311,"owned_by":"vllm",'
    b'"root":"/b/model","parent":null,"max_model_len":2048,"permission":[]},{"id":"a0","object":"model",'
    b'"created":1796222311,"owned_by":"vllm","root":"/b/adapters/lora-0","parent":"tiny","max_model_len":null,'
    b'"permission":[]},{"id":"a2","object":"model","created":1,"owned_by":"vllm","root":"/r","parent":"tiny"}]}'
)


def test_listing_keeps_the_cards_with_a_parent() -> None:
    assert vllm.answer_event(LISTING, 200, REAL_LISTING) == ListingReceived(listing=5, adapters=("a0", "a2"))


@pytest.mark.parametrize(
    ("body", "truncated", "words"),
    [
        (b"not json", False, "not JSON"),
        (b'{"object":"list"}', False, "no 'data' list"),
        (b'{"data":[{"object":"model"}]}', False, "without an id"),
        (b'{"data":[{"id":"a","parent":3}]}', False, "bad parent"),
        (b"[1, 2]", False, "no 'data' list"),
        (REAL_LISTING, True, "larger than"),
    ],
)
def test_a_bad_listing_is_a_failed_listing_never_a_partial_one(
    body: bytes, truncated: bool, words: str
) -> None:
    event = vllm.answer_event(LISTING, 200, body, truncated=truncated)
    assert isinstance(event, ListingFailed)
    assert words in event.message


def test_misconfigurations_name_their_fix() -> None:
    auth = vllm.answer_event(LISTING, 401, b'{"error":"Unauthorized"}')
    assert isinstance(auth, ListingFailed)
    assert "--api-key" in auth.message
    routes = vllm.answer_event(LOAD, 404, b'{"detail":"Not Found"}')
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in routes.message
    disabled = vllm.answer_event(LOAD, 400, flat("LoRA is not enabled.", "BadRequestError", 400))
    assert "--enable-lora" in disabled.message


def test_a_listing_404_means_a_wrong_url_not_the_runtime_routes() -> None:
    # /v1/models is never behind VLLM_ALLOW_RUNTIME_LORA_UPDATING: a 404 there is a URL with /v1 (the
    # form OpenAI clients take) or another path that is not the server's root.
    wrong = vllm.answer_event(LISTING, 404, b'{"detail":"Not Found"}')
    assert isinstance(wrong, ListingFailed)
    assert "give the server's root URL, without /v1" in wrong.message
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in wrong.message


def test_requests_follow_the_routes_and_hide_the_key() -> None:
    load = vllm.http_request(LOAD, api_key="s3cret")
    assert (load.method, load.path) == ("POST", "/v1/load_lora_adapter")
    assert json.loads(load.body or b"") == {"lora_name": "a0", "lora_path": "/adapters/a0"}
    assert ("Authorization", "Bearer s3cret") in load.headers
    assert ("Content-Type", "application/json") in load.headers
    assert "s3cret" not in repr(load)
    unload = vllm.http_request(UNLOAD)
    assert json.loads(unload.body or b"") == {"lora_name": "a0"}
    assert all(k != "Authorization" for k, _ in unload.headers)
    listing = vllm.http_request(LISTING)
    assert (listing.method, listing.path, listing.body) == ("GET", "/v1/models", None)
    assert listing.max_answer_bytes == vllm.MAX_LISTING_BYTES


def test_no_answer_is_the_replicas_fault() -> None:
    load = vllm.failure_event(LOAD, "no answer within 5 s")
    assert (load.outcome, load.message) == (LoadOutcome.REPLICA_FAULT, "no answer within 5 s")
    assert vllm.failure_event(UNLOAD, "refused").outcome is UnloadOutcome.FAILED
    assert isinstance(vllm.failure_event(LISTING, "reset"), ListingFailed)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, nested("gone", "InternalServerError", 500), "HTTP 500: gone"),
        (500, flat("gone", "InternalServerError", 500), "HTTP 500: gone"),
        (403, b'{"error":"Forbidden"}', "HTTP 403: Forbidden"),
        (415, b'{"detail":"Unsupported Media Type"}', "HTTP 415: Unsupported Media Type"),
        (422, b'{"detail":[{"loc":["body"]}]}', 'HTTP 422: [{"loc": ["body"]}]'),
        (502, b"<html>bad gateway</html>", "HTTP 502: <html>bad gateway</html>"),
        (502, b"", "HTTP 502 with an empty body"),
    ],
)
def test_error_messages_come_out_of_every_shape(status: int, body: bytes, message: str) -> None:
    assert vllm.answer_event(UNLOAD, status, body).message == message


# -- a forwarded request's "does not exist" (vllm.adapter_missing) ----------------------------------

MISSING = [
    # (what, status, body, adapter, missing)
    ("0.6.3-0.10.0 flat", 404, flat("The model `a5` does not exist.", "NotFoundError", 404), "a5", True),
    ("0.10.1-0.13 nested", 404, nested("The model `a5` does not exist.", "NotFoundError", 404), "a5", True),
    (
        "0.14-0.30 nested, param model",
        404,
        nested("The model `a5` does not exist.", "NotFoundError", 404, "model"),
        "a5",
        True,
    ),
    (
        "real vLLM 0.32 (completions, chat and streaming chat alike)",
        404,
        b'{"error":{"message":"The model `a5` does not exist. Valid aliases: tiny.","type":"NotFoundError",'
        b'"param":"model","code":404}}',
        "a5",
        True,
    ),
    (
        "Rust frontend",
        404,
        nested("The model `a5` does not exist.", "invalid_request_error", "model_not_found", "model"),
        "a5",
        True,
    ),
    (
        "cut short after the name",
        404,
        b'{"error":{"message":"The model `a5` does not exist. Valid aliases: ' + b"x, " * 3000,
        "a5",
        True,
    ),
    (
        "another model's name",
        404,
        nested("The model `a6` does not exist.", "NotFoundError", 404),
        "a5",
        False,
    ),
    (
        "a name that only starts alike",
        404,
        nested("The model `a55` does not exist.", "NotFoundError", 404),
        "a5",
        False,
    ),
    ("the route is absent", 404, b'{"detail":"Not Found"}', "a5", False),
    ("401", 401, b'{"error":"Unauthorized"}', "a5", False),
    (
        "a 400 that quotes the words",
        400,
        nested("The model `a5` does not exist.", "BadRequestError", 400),
        "a5",
        False,
    ),
    ("a 500", 500, nested("EngineCore encountered an issue.", "InternalServerError", 500), "a5", False),
    ("a success", 200, b'{"id":"cmpl-1","choices":[{"text":"The model `a5` does not exist."}]}', "a5", False),
    ("an empty 404", 404, b"", "a5", False),
]


@pytest.mark.parametrize(
    ("what", "status", "body", "adapter", "missing"), MISSING, ids=[c[0] for c in MISSING]
)
def test_adapter_missing(what: str, status: int, body: bytes, adapter: str, missing: bool) -> None:
    assert vllm.adapter_missing(status, body, adapter) is missing


@pytest.mark.parametrize(
    "version", ["0.6", "0.7.0", "0.10.0", "0.10.1", "0.15", "0.18", "0.30", "0.32", "0.34"]
)
def test_adapter_missing_knows_every_standin_family(version: str) -> None:
    from lorafleet_standin._family import Family

    family = Family.of(version)
    param = "model" if family.names_the_model_param else None
    body = json.dumps(
        family.error(404, family.unknown_model("sql-v2", "tiny"), "NotFoundError", param)
    ).encode()
    assert vllm.adapter_missing(404, body, "sql-v2")
    assert not vllm.adapter_missing(404, body, "sql")
