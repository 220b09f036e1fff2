"""Build a tiny random Llama with a tokenizer and LoRA adapters, offline and deterministically.

Usage: python build_model.py OUT

Writes OUT/model (tokenizer, config, bf16 weights), OUT/adapters/lora-0..5 (r=8 on q_proj and v_proj),
OUT/adapters/rank64 (over vLLM's --max-lora-rank 16) and OUT/adapters/broken (no adapter_config.json).
The tokenizer is trained on text made from a fixed word list with a seeded RNG and the weights come
from fixed seeds, so every build is the same and each adapter's greedy output is its own.
Runs inside the engine venv (torch, transformers, tokenizers, peft); skips work already done.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

RECIPE: dict[str, Any] = {
    "recipe": 1,
    "hidden": 256,
    "intermediate": 512,
    "layers": 2,
    "heads": 4,
    "head_dim": 64,  # a head size vLLM's CPU attention supports
    "positions": 4096,
    "vocab": 1024,
    "adapters": 6,
    "rank": 8,
    "big_rank": 64,
    "seed": 1234,
}
WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "and",
    "or",
    "but",
    "is",
    "are",
    "was",
    "be",
    "router",
    "replica",
    "adapter",
    "load",
    "unload",
    "model",
    "base",
    "request",
    "stream",
    "token",
    "cache",
    "evict",
    "least",
    "recently",
    "used",
    "queue",
    "wait",
    "ready",
    "cold",
    "warm",
    "hello",
    "world",
    "answer",
    "question",
    "weather",
    "river",
    "mountain",
    "city",
    "music",
    "one",
    "two",
    "three",
    "four",
    "five",
    "red",
    "green",
    "blue",
    "small",
    "large",
    "fast",
    "slow",
    "good",
    "today",
    "because",
    "when",
    "where",
    "why",
    "how",
    "what",
    "who",
    "which",
    "this",
    "that",
    "system",
    "user",
    "assistant",
    "chat",
    "reply",
    "ok",
]
SPECIAL = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tokenizer(model_dir: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(RECIPE["seed"])
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 18))) + "." for _ in range(4000)]
    text += [json.dumps({"n": i, "ok": i % 2 == 0}) for i in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=RECIPE["vocab"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=RECIPE["positions"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(model_dir)
    return fast


def build_model(model_dir: Path, tokenizer: Any) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=(len(tokenizer) + 63) // 64 * 64,
        hidden_size=RECIPE["hidden"],
        intermediate_size=RECIPE["intermediate"],
        num_hidden_layers=RECIPE["layers"],
        num_attention_heads=RECIPE["heads"],
        num_key_value_heads=RECIPE["heads"],
        head_dim=RECIPE["head_dim"],
        max_position_embeddings=RECIPE["positions"],
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(RECIPE["seed"])
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(model_dir)


def build_adapter(model_dir: Path, out: Path, rank: int, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,  # random A and B, so each adapter changes the output
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, lora)
    with torch.no_grad():  # a stronger B, so the change shows in greedy output of a random base
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(4.0)
    model.save_pretrained(out, safe_serialization=True)
    config = out / "adapter_config.json"
    data = json.loads(config.read_text())
    data["base_model_name_or_path"] = "../../model"  # peft writes an absolute path; vLLM ignores it
    config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    marker = out / ".complete"
    want = json.dumps(RECIPE, sort_keys=True)
    if marker.exists() and marker.read_text() == want:
        print(f"already built: {out}")
        return 0
    for sub in ("model", "adapters"):
        shutil.rmtree(out / sub, ignore_errors=True)
    model_dir = out / "model"
    model_dir.mkdir(parents=True)
    tokenizer = build_tokenizer(model_dir)
    build_model(model_dir, tokenizer)
    adapters = out / "adapters"
    for i in range(RECIPE["adapters"]):
        build_adapter(model_dir, adapters / f"lora-{i}", RECIPE["rank"], RECIPE["seed"] + 1 + i)
    build_adapter(model_dir, adapters / "rank64", RECIPE["big_rank"], RECIPE["seed"] + 100)
    shutil.copytree(adapters / "lora-0", adapters / "broken")
    (adapters / "broken" / "adapter_config.json").unlink()
    marker.write_text(want)
    print(f"built: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
