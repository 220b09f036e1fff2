"""What vLLM says of a completion's body before it runs it: wrong types (FastAPI's 400 of pydantic's
errors) and values out of range, word for word as vLLM 0.32 answers them (tests/test_standin_conformance.py).

The fields checked are the ones clients get wrong and routers forward as sent: ``model``, ``prompt``
or ``messages``, ``max_tokens``, ``stream`` and ``temperature``; any other field is taken as it comes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ._family import Family

_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}

Error = dict[str, Any]
"""One of pydantic's errors: ``type``, ``loc``, ``msg``, ``input``."""


def refusal(route: str, body: Any, family: Family) -> dict[str, Any] | None:
    """vLLM's 400 for a body it turns away before looking at the model, or None.

    Args:
        route: "completions" or "chat".
    """
    if not isinstance(body, dict):
        error = _error(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
            body,
        )
        return _validation(family, [error])
    if body.get("stream_options") and not body.get("stream"):
        # A validator that runs before pydantic looks at the fields, on the body as sent.
        message = "Stream options can only be defined when `stream=True`. (parameter=stream_options)"
        return family.error(400, message, "BadRequestError", "stream_options")
    if route == "chat" and "messages" in body:
        messages = body["messages"]
        if messages is None or isinstance(messages, bool | int | float):
            # vLLM walks the messages before pydantic looks at them: a str or a dict goes on to be
            # refused as no list, a number or null fails there, in Python's words.
            return family.error(400, f"'{type(messages).__name__}' object is not iterable", "BadRequestError")
    errors: list[Error] = []
    fields: list[tuple[str, Callable[[Any], list[Error]]]] = [("model", _string), ("prompt", _prompt)]
    if route == "chat":
        fields = [("messages", _messages), ("model", _string)]
    fields += [
        ("max_tokens", _whole),
        ("stream", _boolean),
        ("temperature", _number),
        ("stream_options", _object),
    ]
    for name, check in fields:
        if name in body:
            errors += [{**e, "loc": f"body.{name}"} for e in check(body[name])]
        elif name == "messages":
            errors.append(_error("missing", "body.messages", "Field required", body))
    if errors:
        return _validation(family, errors)
    if route == "completions":
        prompt = body.get("prompt")
        if prompt == []:
            return family.error(400, "You must pass at least one prompt", "BadRequestError")
        if not prompt:
            message = "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)"
            return family.error(400, message, "BadRequestError", "prompt")
    elif body["messages"] == []:
        message = "Cannot apply chat template to an empty conversation. Provide at least one message."
        return family.error(400, message, "BadRequestError")
    return None


def out_of_range(body: dict[str, Any], family: Family, max_model_len: int) -> dict[str, Any] | None:
    """vLLM's 400 for a value of the right type it will not run with, or None; asked once the model
    is known to be served."""
    temperature = body.get("temperature")
    if temperature is not None:
        value = float(_as_number(temperature))
        if value < 0:
            return _parameter(family, f"temperature must be non-negative, got {value}.", "temperature", value)
        if value > 2:
            return _parameter(family, f"temperature must be in [0, 2], got {value}.", "temperature", value)
    tokens = body.get("max_tokens")
    if tokens is not None:
        count = max_tokens(body)
        if count < 1:
            return _parameter(family, f"max_tokens must be at least 1, got {count}.", "max_tokens", count)
        if count > max_model_len:
            message = (
                f"max_tokens={count} cannot be greater than max_model_len={max_model_len}. "
                "Please request fewer output tokens."
            )
            return _parameter(family, message, "max_tokens", count)
    return None


def max_tokens(body: dict[str, Any]) -> int:
    """The ``max_tokens`` a checked body asks for (16 when it names none, as vLLM's completions do)."""
    value = body.get("max_tokens")
    return 16 if value is None else int(_as_number(value))


def wants_stream(body: dict[str, Any]) -> bool:
    """Whether a checked body asks for a stream (pydantic's lax reading: "yes", 1, "on"...)."""
    value = body.get("stream")
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return bool(value)


# -- pydantic's lax checks, field by field ---------------------------------------------------------


def _string(value: Any) -> list[Error]:
    if value is None or isinstance(value, str):
        return []
    return [_error("string_type", "", "Input should be a valid string", value)]


def _prompt(value: Any) -> list[Error]:
    # list[int] | list[list[int]] | str | list[str]: every branch says why it does not fit.
    if value is None or isinstance(value, str | list):
        return []
    listed = _error("list_type", "", "Input should be a valid list", value)
    return [listed, listed, _error("string_type", "", "Input should be a valid string", value), listed]


def _object(value: Any) -> list[Error]:
    if value is None or isinstance(value, dict):
        return []
    return [
        _error(
            "model_attributes_type",
            "",
            "Input should be a valid dictionary or object to extract fields from",
            value,
        )
    ]


def _messages(value: Any) -> list[Error]:
    if isinstance(value, list):
        return []
    return [_error("list_type", "", "Input should be a valid list", value)]


def _whole(value: Any) -> list[Error]:
    if value is None or isinstance(value, int):
        return []
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return []
        return [
            _error(
                "int_from_float",
                "",
                "Input should be a valid integer, got a number with a fractional part",
                value,
            )
        ]
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number.is_integer():
            return []
        return [
            _error(
                "int_parsing",
                "",
                "Input should be a valid integer, unable to parse string as an integer",
                value,
            )
        ]
    return [_error("int_type", "", "Input should be a valid integer", value)]


def _number(value: Any) -> list[Error]:
    if value is None or isinstance(value, int | float):
        return []
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            return [
                _error(
                    "float_parsing",
                    "",
                    "Input should be a valid number, unable to parse string as a number",
                    value,
                )
            ]
        return []
    return [_error("float_type", "", "Input should be a valid number", value)]


def _boolean(value: Any) -> list[Error]:
    if value is None or isinstance(value, bool) or value in (0, 1):
        return []
    if isinstance(value, str):
        if value.strip().lower() in _TRUE | _FALSE:
            return []
        return [
            _error("bool_parsing", "", "Input should be a valid boolean, unable to interpret input", value)
        ]
    if isinstance(value, int | float):
        return [
            _error("bool_parsing", "", "Input should be a valid boolean, unable to interpret input", value)
        ]
    return [_error("bool_type", "", "Input should be a valid boolean", value)]


def _as_number(value: Any) -> float:
    return float(value.strip()) if isinstance(value, str) else float(value)


# -- vLLM's wording --------------------------------------------------------------------------------


def _error(kind: str, loc: str, msg: str, value: Any) -> Error:
    return {"type": kind, "loc": loc, "msg": msg, "input": _shown(value)}


def _shown(value: Any) -> str:
    """A value as vLLM's message shows it: a container by its size, anything else as text."""
    if isinstance(value, dict | list):
        return f"<{type(value).__name__} of {len(value)} items>"
    return str(value)


def _validation(family: Family, errors: list[Error]) -> dict[str, Any]:
    count = len(errors)
    lines = "".join(f"\n  {error!r}" for error in errors)
    message = f"{count} validation error{'s' if count != 1 else ''}:{lines}"
    param = errors[0]["loc"] if family.names_the_invalid_field else None
    return family.error(400, message, "Bad Request", param)


def _parameter(family: Family, message: str, name: str, value: object) -> dict[str, Any]:
    return family.error(400, f"{message} (parameter={name}, value={value})", "BadRequestError", name)


# -- the other routes ------------------------------------------------------------------------------


def refusal_of(route: str, body: Any, family: Family) -> dict[str, Any] | None:
    """vLLM's 400 for a body of ``route`` it turns away before looking at the model, or None.

    Completions and chat as ``refusal`` says; the other routes for the fields a client gets wrong,
    with pydantic's errors for each shape vLLM tries (a route whose body is a union of request shapes
    says why each does not fit, in vLLM's order).
    """
    if route in ("completions", "chat"):
        return refusal(route, body, family)
    if not isinstance(body, dict):
        return refusal(route, body, family)
    errors = _others(route, body)
    return _validation(family, errors) if errors else None


def _field(
    body: dict[str, Any], name: str, check: Callable[[Any], list[Error]], required: bool
) -> list[Error]:
    if name not in body:
        return [_error("missing", f"body.{name}", "Field required", body)] if required else []
    return [{**e, "loc": e["loc"] or f"body.{name}"} for e in check(body[name])]


def _fields(
    body: dict[str, Any], fields: list[tuple[str, Callable[[Any], list[Error]], bool]]
) -> list[Error]:
    return [e for name, check, required in fields for e in _field(body, name, check, required)]


def _text(value: Any) -> list[Error]:
    if isinstance(value, str):
        return []
    return [_error("string_type", "", "Input should be a valid string", value)]


def _text_or_list(value: Any) -> list[Error]:
    if isinstance(value, str | list):
        return []
    return [
        _error("string_type", "", "Input should be a valid string", value),
        _error("list_type", "", "Input should be a valid list", value),
    ]


def _whole_numbers(value: Any) -> list[Error]:
    if not isinstance(value, list):
        return [_error("list_type", "", "Input should be a valid list", value)]
    return [{**e, "loc": f"body.tokens.{i}"} for i, item in enumerate(value) for e in _whole(item)]


def _others(route: str, body: dict[str, Any]) -> list[Error]:
    if route == "responses":
        if "input" not in body:
            # A validator that runs first adds a field to the body pydantic then shows.
            return [_error("missing", "body.input", "Field required", {**body, "": None})]
        return _fields(
            body,
            [
                ("input", _text_or_list, True),
                ("model", _string, False),
                ("max_output_tokens", _whole, False),
                ("stream", _boolean, False),
                ("temperature", _number, False),
            ],
        )
    if route in ("messages", "count_tokens"):
        fields: list[tuple[str, Callable[[Any], list[Error]], bool]] = [
            ("model", _text, True),
            ("messages", _messages, True),
        ]
        if route == "messages":
            fields += [("max_tokens", _whole, True), ("stream", _boolean, False)]
        return _fields(body, fields)
    if route == "chat_batch":
        return _fields(
            body, [("messages", _messages, True), ("model", _string, False), ("max_tokens", _whole, False)]
        )
    if route == "tokenize":
        # TokenizeCompletionRequest | TokenizeChatRequest: each says why it does not fit.
        as_prompt = _fields(body, [("model", _string, False), ("prompt", _text, True)])
        as_chat = _fields(body, [("model", _string, False), ("messages", _messages, True)])
        return as_prompt + as_chat if as_prompt and as_chat else []
    if route == "detokenize":
        return _fields(body, [("model", _string, False), ("tokens", _whole_numbers, True)])
    if route in ("embeddings", "pooling"):
        return _pooling_input(route, body)
    if route in ("score", "score_v1"):
        if isinstance(body.get("text_1"), str) and isinstance(body.get("text_2"), str | list):
            return []
        missing = [
            _error("missing", f"body.{name}", "Field required", body)
            for name in ("queries", "documents", "queries", "items", "data_1", "data_2")
        ]
        wrong = body.get("text_1")
        return [
            *missing,
            _error("string_type", "body.text_1", "Input should be a valid string", wrong),
            _error(
                "dict_type", "body.text_1.ScoreMultiModalParam", "Input should be a valid dictionary", wrong
            ),
            _error("list_type", "body.text_1", "Input should be a valid list", wrong),
        ]
    if route in ("rerank", "rerank_v1", "rerank_v2"):
        query = body.get("query")
        if "query" in body and not isinstance(query, str):
            return [
                _error("string_type", "body.query", "Input should be a valid string", query),
                _error(
                    "dict_type",
                    "body.query.ScoreMultiModalParam",
                    "Input should be a valid dictionary",
                    query,
                ),
            ]
        return _fields(body, [("query", _text, True), ("documents", _messages, True)])
    if route == "embed_v2":
        return _fields(body, [("model", _string, False), ("texts", _messages, False)])
    return []


def _pooling_input(route: str, body: dict[str, Any]) -> list[Error]:
    """The union of request shapes ``/v1/embeddings`` and ``/pooling`` take, as pydantic walks it:
    an ``input`` (token ids, texts...), or chat ``messages`` (one conversation, or a batch of them), and
    for ``/pooling`` a plugin's ``data``."""
    value = body.get("input")
    if "input" in body and (isinstance(value, str) or _is_ids_or_texts(value)):
        return []
    listed = _error("list_type", "body.input", "Input should be a valid list", value)
    stringed = _error("string_type", "body.input", "Input should be a valid string", value)
    chat = _error("missing", "body.messages", "Field required", body)
    absent = _error("missing", "body.input", "Field required", body)
    if route == "pooling":
        data = _error("missing", "body.data", "Field required", body)
        if "input" not in body:
            return [absent, chat, data]
        return [listed, listed, stringed, listed, chat, data]
    if "input" not in body:
        return [absent, chat, chat, chat, absent, chat, absent]
    sequence = {**_error("is_instance_of", "body.input", "Input should be an instance of Sequence", value)}
    sequence["ctx"] = {"class": "Sequence"}
    return [listed, listed, stringed, listed, chat, chat, chat, listed, chat, sequence]


def _is_ids_or_texts(value: Any) -> bool:
    return isinstance(value, list)
