"""vLLM release lines: how each answers the routes the stand-in serves (the differences a router reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

SANITISED_ROOTS = ("/home", "/usr", "/opt", "/var", "/tmp", "/root", "/lib", "/mnt", "/srv")


def parse_version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")]
    if not 2 <= len(parts) <= 3:
        raise ValueError(f"a vLLM version looks like 0.32 or 0.10.1, not {text!r}")
    return (parts[0], parts[1], parts[2] if len(parts) == 3 else 0)


@attrs.frozen
class Family:
    """How one vLLM release line answers (the differences lorafleet has to read through)."""

    version: tuple[int, int, int]

    @classmethod
    def of(cls, version: str) -> Family:
        return cls(parse_version(version))

    @property
    def nested_errors(self) -> bool:
        return self.version >= (0, 10, 1)

    @property
    def unload_not_found_status(self) -> int:
        return 400 if self.version < (0, 7, 0) else 404

    @property
    def rejection_status(self) -> int:
        """An adapter the engine found but refused (rank too high, ...)."""
        return 400 if self.version < (0, 18, 0) else 500

    @property
    def checks_at_load(self) -> bool:
        """0.6.x registers the name and reads the files at the first request."""
        return self.version >= (0, 7, 0)

    @property
    def missing_status(self) -> int:
        return 400 if self.version < (0, 8, 0) else 404

    @property
    def checks_content_type(self) -> bool:
        return self.version >= (0, 7, 3)

    @property
    def refuses_the_base_models_name(self) -> bool:
        return self.version >= (0, 32, 0)

    @property
    def names_the_model_param(self) -> bool:
        """A 404 for an unknown model names ``model`` as its ``param``."""
        return self.version >= (0, 14, 0)

    @property
    def names_the_invalid_field(self) -> bool:
        """A 400 for a body pydantic refused names the first field at fault (``body.max_tokens``)."""
        return self.version >= (0, 25, 0)

    def error(self, status: int, message: str, type_: str, param: str | None = None) -> dict[str, Any]:
        """An error body, flat (up to 0.10.0) or nested (0.10.1 on)."""
        error = {"message": message, "type": type_, "param": param, "code": status}
        return {"error": error} if self.nested_errors else {"object": "error", **error}

    def already_loaded(self, name: str) -> str:
        if self.version < (0, 7, 3):
            return f"The lora adapter '{name}' has already beenloaded."
        if self.version < (0, 15, 0):
            return f"The lora adapter '{name}' has already been loaded."
        return (
            f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, "
            "set 'load_inplace' to True."
        )

    def missing(self, name: str, path: str) -> str:
        shown = self.sanitise(path)
        if self.version >= (0, 18, 0):
            return f"Loading lora {name} failed: No adapter found for {shown}"
        return f"Call to add_lora method failed: Loading lora {name} failed: No adapter found for {shown}"

    def rejected(self, reason: str) -> str:
        if self.version >= (0, 18, 0):
            # The CPU build always runs a separate worker process, which wraps the engine's words once more.
            return (
                f"Call to add_lora method failed: Worker failed with error '{reason}', please check the "
                "stack trace above for the root cause"
            )
        return f"Call to add_lora method failed: {reason}"

    def unload_without_name(self) -> str:
        if self.version >= (0, 10, 0):
            return "'lora_name' needs to be provided to unload a LoRA adapter."
        return "either 'lora_name' and 'lora_int_id' needs to be provided."

    def sanitise(self, path: str) -> str:
        if self.version < (0, 27, 0):
            return path
        if path.startswith(SANITISED_ROOTS) or "." in Path(path).name:
            return "<path>"
        return path

    def unknown_model(self, name: str, base: str) -> str:
        text = f"The model `{name}` does not exist."
        return f"{text} Valid aliases: {base}." if self.version >= (0, 32, 0) else text

    @property
    def fingerprint(self) -> str:
        return "vllm-{}.{}.{}".format(*self.version)


def rejection_type(status: int) -> str:
    return "InternalServerError" if status >= 500 else "BadRequestError"
