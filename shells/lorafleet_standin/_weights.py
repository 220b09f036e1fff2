"""What an adapter's weights are, as the stand-in tells one version of an adapter from another.

vLLM's output under an adapter depends on its weights; the stand-in has no model, so its text depends on
a hash of the weights files it read instead (``generated``): a test can see which version of an adapter
answered a request, and that a retrained adapter was loaded anew.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

WEIGHTS = "adapter_model.*"
"""The files PEFT writes an adapter's weights to (``adapter_model.safetensors``, or ``.bin``)."""


def weights_digest(folder: str | Path) -> str:
    """A short hash of the weights files in ``folder`` as they are now ("" when it has none, or they
    cannot be read): what the stand-in's answers under the adapter depend on.

    The files are read whole, in name order: a stand-in's adapters are small.
    """
    digest = hashlib.sha256()
    try:
        files = sorted(p for p in Path(folder).expanduser().glob(WEIGHTS) if p.is_file())
        for path in files:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return ""
    return digest.hexdigest()[:16] if files else ""
