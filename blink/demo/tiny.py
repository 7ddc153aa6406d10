"""Tiny random Hugging Face checkpoints built offline.

No weights can be downloaded here, yet the engine must be tested against real checkpoints and
``blink serve`` must start without a network. These builders produce genuine HF folders
(config.json, model.safetensors, tokenizer files, generation_config.json) from random weights and
a byte-level BPE tokenizer trained on the Python standard library's own sources.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

Arch = Literal["llama", "qwen2", "qwen3", "mistral"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"

# ChatML, as used by Qwen and SmolLM2 instruct models, with Qwen2.5's Hermes-style tools: given
# ``tools``, a system turn lists them in <tools></tools> and asks for <tool_call> JSON; assistant
# turns with ``tool_calls`` write them in that form; consecutive ``tool`` messages become one user
# turn of <tool_response> blocks. Without tools, every message renders exactly as plain ChatML
# (``'<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'``), which exactness tests rely on.
CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if tools and loop.first and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' and message['tool_calls'] %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}"
    "{%- for call in message['tool_calls'] %}"
    "{%- set fn = call['function'] if call['function'] is defined else call %}"
    "{{- '\\n<tool_call>\\n{\\\"name\\\": \\\"' + fn['name'] + '\\\", \\\"arguments\\\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Training corpus: enough text for a few hundred merges, small enough to train in well under a second.
_CORPUS_MAX_FILES = 40
_CORPUS_MAX_BYTES = 2_000_000

# Std of the random matrices. HF's default init (0.02) makes greedy decoding collapse into one repeated
# token; at 0.2 tiny Qwen3 (unit q/k norms) still loops after a few tokens for some seeds, while 0.3
# gives 14-31 distinct tokens out of 32 for every arch and seed 0-3 (measured on 3 prompts).
_MATRIX_STD = 0.3


def _stdlib_corpus() -> list[str]:
    """A deterministic, bounded list of standard-library source texts."""
    root = Path(os.path.dirname(os.__file__))
    texts: list[str] = []
    total = 0
    for path in sorted(root.glob("*.py"))[:_CORPUS_MAX_FILES]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        total += len(text)
        if total >= _CORPUS_MAX_BYTES:
            break
    return texts


@functools.lru_cache(maxsize=8)
def _trained_tokenizer_json(vocab_size: int) -> str:
    """Train once per process and vocabulary size; later builds reuse the serialized tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_stdlib_corpus(), trainer=trainer)
    return tokenizer.to_str()


def build_tokenizer(out_dir: Path, vocab_size: int = 512) -> Path:
    """Write a ``PreTrainedTokenizerFast`` folder with a ChatML template and ``<|im_end|>`` as eos."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json(vocab_size)),
        bos_token=None,
        eos_token=EOS_TOKEN,
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(out_dir))
    # transformers 5 writes the template to chat_template.jinja and names its own backend class;
    # also keep the template and the portable class name in tokenizer_config.json so other readers
    # (older transformers, our own tokenizer wrapper) find them where checkpoints usually keep them.
    config_path = out_dir / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_config["chat_template"] = CHATML_TEMPLATE
    config_path.write_text(json.dumps(tok_config, indent=2) + "\n")
    return out_dir


def _perturb(model: object, std: float, seed: int) -> None:
    """Random matrices and biases; norm weights stay 1 so activations keep a sane scale."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():  # type: ignore[attr-defined]
            if param.ndim >= 2 or name.endswith(".bias"):
                noise = torch.randn(param.shape, generator=generator, dtype=torch.float32) * std
                param.copy_(noise.to(param.dtype))


def build_tiny_checkpoint(
    out_dir: Path,
    arch: Arch = "llama",
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    tie_word_embeddings: bool | None = None,
    seed: int = 0,
    tokenizer_dir: Path | None = None,
    dtype: str = "float32",
    vocab_size: int = 512,
    rope_scaling: dict[str, object] | None = None,
    head_dim: int | None = None,
    extra_config: dict[str, object] | None = None,
) -> Path:
    """Build a random ``arch`` checkpoint + tokenizer in ``out_dir`` and return it.

    ``tie_word_embeddings`` defaults to False for Llama/Mistral and True for Qwen2/Qwen3 (as their small
    releases do). ``tokenizer_dir`` reuses an existing tokenizer folder instead of writing a new one.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    if arch not in ("llama", "qwen2", "qwen3", "mistral"):
        raise ValueError(f"unknown tiny architecture {arch!r}; expected llama, qwen2, qwen3 or mistral")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer_dir is not None:
        for item in Path(tokenizer_dir).iterdir():
            if item.is_file():
                shutil.copy2(item, out_dir / item.name)
    else:
        build_tokenizer(out_dir, vocab_size=vocab_size)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out_dir))
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if tie_word_embeddings is None:
        tie_word_embeddings = arch in ("qwen2", "qwen3")

    kwargs: dict[str, object] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": tie_word_embeddings,
        "rms_norm_eps": 1e-6,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
    }
    if rope_scaling is not None:
        kwargs["rope_scaling"] = rope_scaling
    if head_dim is not None:
        kwargs["head_dim"] = head_dim
    if extra_config:
        kwargs.update(extra_config)
    config = AutoConfig.for_model(arch, **kwargs)

    torch_dtype = getattr(torch, dtype)
    previous_seed_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(previous_seed_state)
    _perturb(model, _MATRIX_STD, seed)
    if tie_word_embeddings:
        model.tie_weights()
    model = model.to(torch_dtype)
    model.config.dtype = torch_dtype
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return out_dir


def _default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "blink"


def demo_model_dir(cache_root: Path | None = None) -> Path:
    """The labelled demo model ``blink serve`` uses offline; built once, then reused.

    The folder appears atomically (built in a sibling temp dir, then renamed) so a concurrent
    server start never sees a half-written checkpoint.
    """
    root = Path(cache_root) if cache_root is not None else _default_cache_root()
    target = root / "demo-model"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-model-", dir=root))
    try:
        build_tiny_checkpoint(
            tmp,
            "llama",
            hidden_size=256,
            num_layers=4,
            num_heads=8,
            num_kv_heads=4,
            intermediate_size=512,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
            seed=1234,
            vocab_size=2048,
        )
        config_path = tmp / "config.json"
        config = json.loads(config_path.read_text())
        config["blink_demo"] = True
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process won the race; its folder is complete by construction.
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
