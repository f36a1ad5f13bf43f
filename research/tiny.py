"""The smoke configuration: a tiny Llama built from a config and a tokenizer trained here.

Nothing is downloaded. The tokenizer is a byte-level BPE trained with ``tokenizers`` on the
texts the run will see (so any text still encodes: unknown words fall back to bytes), the model a
2-layer Llama of hidden size 64 with random weights. Both are saved as an ordinary Hugging Face
checkpoint directory, so every later step (SFT, GRPO, the loopback server) loads the tiny model
exactly as it would load a real one: the smoke path and the real path are one code path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "TinySpec", "build_tiny"]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>")
"""The same chat markers as SmolLM2's (ChatML), so prompts look alike for both models."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class TinySpec:
    """The shape of the tiny model; the defaults are the smoke configuration of the tests."""

    def __init__(
        self,
        *,
        hidden_size: int = 64,
        layers: int = 2,
        heads: int = 4,
        intermediate_size: int = 128,
        vocab_size: int = 1024,
        max_positions: int = 8192,
        seed: int = 0,
    ) -> None:
        self.hidden_size = hidden_size
        self.layers = layers
        self.heads = heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.max_positions = max_positions
        self.seed = seed

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> object:
    """A byte-level BPE tokenizer over ``texts``, wrapped for ``transformers`` with ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
        pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny(texts: Iterable[str], out: Path, spec: TinySpec | None = None) -> Path:
    """Train the tokenizer on ``texts``, build the model, save both to ``out``; return ``out``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    spec = spec or TinySpec()
    corpus = [text for text in texts if text]
    if not corpus:
        corpus = ["<think></think><patch>{}</patch>"]
    tokenizer = train_tokenizer(corpus, spec.vocab_size)
    vocab = len(tokenizer)  # type: ignore[arg-type]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=spec.max_positions,
        pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
        bos_token_id=tokenizer.bos_token_id,  # type: ignore[attr-defined]
        eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
        tie_word_embeddings=True,
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)  # type: ignore[attr-defined]
    return out
