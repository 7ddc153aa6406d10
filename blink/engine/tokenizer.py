"""The checkpoint's tokenizer, its chat template and its end-of-sequence ids.

Loading goes through ``transformers.AutoTokenizer`` (it knows every file layout: tokenizer.json,
SentencePiece models, chat_template.jinja, templates inside tokenizer_config.json) and so does chat
rendering (HF's sandboxed Jinja environment with the helpers templates rely on). Encoding and
decoding go straight to the Rust ``tokenizers`` object when there is one: decoding a short
window, the incremental detokenizer's hot path, is several times cheaper there than through
``PreTrainedTokenizerFast.decode``; encoding costs the same either way, so it stays on the HF path,
which owns the BOS / special-token rules. ``clean_up_tokenization_spaces`` is deliberately not
applied: it cannot be applied to a stream, and full and streamed text must agree. A ``.gguf`` file's
tokenizer is rebuilt from its metadata (:mod:`blink.engine.gguf_tokenizer`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blink.engine.chat_literals import ChatLiterals, RenderedChat
from blink.engine.errors import InvalidParameterError

if TYPE_CHECKING:
    from tokenizers import Tokenizer as RustTokenizer

# Exceptions a chat template raises on a message list it cannot render: jinja2's TemplateError
# (raise_exception(), undefined fields) and plain Python errors from expressions such as
# ``'<|im_start|>' + message['content']`` when content is a list.
_TEMPLATE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError)

# How far each normalizer can shrink text in UTF-8 bytes (for ``max_bytes_per_token``). Unicode
# composition is the worst case: three Hangul jamo (3 bytes each) compose into one 3-byte syllable.
# Unicode lowercasing shrinks at most 3 bytes to 2 (U+1E9E -> U+00DF). A normalizer not listed
# (Replace, Strip, BertNormalizer's control-character removal...) may delete text: no bound then.
_NORMALIZER_SHRINK = {"NFC": 3.0, "NFKC": 3.0, "NFD": 3.0, "NFKD": 3.0, "Lowercase": 1.5, "Prepend": 1.0}
# Pre-tokenizers that keep every byte of the text (a Split that removes its matches does not).
_LOSSLESS_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Split", "Digits", "Punctuation", "UnicodeScripts"}


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte: printable bytes stand for themselves, the
    others for 256 + n in order (the table ``tokenizers``' ByteLevel pre-tokenizer and decoder use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(others)}}


_BYTE_LEVEL = _byte_level_alphabet()


def _byte_form(backend: RustTokenizer | None) -> str | None:
    """How the vocabulary spells bytes: ``byte_level`` (GPT-2, Llama 3, Qwen, SmolLM), ``byte_fallback``
    (SentencePiece ``<0xAB>`` pieces with ``▁`` for spaces: Llama 2, Mistral), else None."""
    decoder = getattr(backend, "decoder", None) if backend is not None else None
    if decoder is None:
        return None
    try:
        state = json.loads(decoder.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return None
    kinds = {d.get("type") for d in state.get("decoders", [state])} if isinstance(state, dict) else set()
    if "ByteLevel" in kinds:
        return "byte_level"
    if "ByteFallback" in kinds:
        return "byte_fallback"
    return None


# Bound on the single-token decode cache: past any real vocabulary, so only ids no model has
# (a client's raw token prompt) could reach it.
_ONE_TOKEN_CACHE = 1 << 19


class Tokenizer:
    def __init__(self, hf_tokenizer: Any, extra_eos_token_ids: Sequence[int] = ()) -> None:
        self.hf = hf_tokenizer
        self._backend: RustTokenizer | None = getattr(hf_tokenizer, "backend_tokenizer", None)
        eos = {int(t) for t in extra_eos_token_ids}
        if hf_tokenizer.eos_token_id is not None:
            eos.add(int(hf_tokenizer.eos_token_id))
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self.vocab_size: int = len(hf_tokenizer)
        self.all_special_ids: frozenset[int] = frozenset(hf_tokenizer.all_special_ids)
        # Single-token decodes, by (id, skip_special_tokens): the incremental detokenizer decodes
        # its one-token window once per generated token, and decode is a pure function of the ids.
        self._one_token: dict[tuple[int, bool], str] = {}
        self._byte_form = _byte_form(self._backend)
        self._literals = ChatLiterals(_special_strings(hf_tokenizer))

    @classmethod
    def from_pretrained(cls, path: str | Path, trust_remote_code: bool = False) -> Tokenizer:
        from blink.engine.gguf_loader import is_gguf

        if is_gguf(Path(path)):
            from blink.engine.gguf_tokenizer import load_gguf_tokenizer

            gguf_hf, extra_eos = load_gguf_tokenizer(Path(path))
            return cls(gguf_hf, extra_eos)
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        return cls(hf, _generation_config_eos(Path(path)))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        if len(ids) == 1:
            key = (int(ids[0]), skip_special_tokens)
            text = self._one_token.get(key)
            if text is None:
                text = self._decode(ids, skip_special_tokens)
                if len(self._one_token) < _ONE_TOKEN_CACHE:
                    self._one_token[key] = text
            return text
        return self._decode(ids, skip_special_tokens)

    def _decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        if self._backend is not None:
            return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return str(self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def frame_special(self, ids: list[int]) -> list[int]:
        """``ids`` inside the special tokens ``encode(text, add_special_tokens=True)`` puts around a
        text (a BOS before, an EOS after: whatever the tokenizer's post-processor adds)."""
        plain = self.encode("a", add_special_tokens=False)
        framed = self.encode("a", add_special_tokens=True)
        for start in range(len(framed) - len(plain) + 1):
            if framed[start:start + len(plain)] == plain:
                return framed[:start] + ids + framed[start + len(plain):]
        return ids  # a post-processor that rewrites the text's own ids: no frame to take apart

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry (e.g. ``'Ġhello'``), not its text; None for an unknown id."""
        if self._backend is not None:
            return self._backend.id_to_token(token_id)
        token = self.hf.convert_ids_to_tokens(token_id)
        return token if isinstance(token, str) else None

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes one token stands for (OpenAI's logprobs ``bytes``); None when the vocabulary has no
        byte spelling for it (a special token, another tokenizer kind): use its decoded text then.

        A token that ends inside a UTF-8 character decodes alone to U+FFFD, but its bytes are what a
        client joins across tokens to rebuild the text, so they come from the vocabulary entry.
        """
        if token_id in self.all_special_ids:
            return None
        piece = self.id_to_token(token_id)
        if piece is None:
            return None
        if self._byte_form == "byte_level":
            raw = [_BYTE_LEVEL.get(ch) for ch in piece]
            return None if None in raw else bytes(raw)  # type: ignore[arg-type]  # checked: no None
        if self._byte_form == "byte_fallback":
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                return bytes([int(piece[3:5], 16)])
            return piece.replace("\u2581", " ").encode()
        return None

    def max_bytes_per_token(self) -> float | None:
        """An upper bound on the UTF-8 bytes of text one token can stand for; None if there is none.

        With it, a text of ``b`` bytes needs at least ``b / bound`` tokens, so a prompt far over
        the context can be refused before it is tokenised. The bound must never be too small (it
        would refuse a prompt that fits), so it holds only for BPE vocabularies whose unknown
        characters do not merge into one token, under normalizers and pre-tokenizers that cannot
        delete text; anything else returns None. Costs one decode per vocabulary entry: call it
        once, off the event loop.
        """
        if self._backend is None:
            return None
        spec = json.loads(self._backend.to_str())
        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            return None
        if model.get("unk_token") is not None and model.get("fuse_unk") and not model.get("byte_fallback"):
            return None
        shrink = _shrink_factor(spec.get("normalizer"))
        if shrink is None or not _lossless(spec.get("pre_tokenizer")):
            return None
        longest = 1
        for token_id in range(len(self.hf)):
            text = self._backend.decode([token_id], skip_special_tokens=False)
            piece = self._backend.id_to_token(token_id) or ""
            longest = max(longest, len(text.encode()), len(piece.encode()))
        # +1: a decoder may drop a token's leading space (SentencePiece at the start of a text).
        return shrink * (longest + 1)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for ``messages``; InvalidParameterError(param='messages') if rejected."""
        return self.render_chat_prompt(messages, add_generation_prompt, tools, **template_kwargs).text

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> list[int]:
        """Token ids of the rendered chat (``encode_chat``)."""
        return self.encode_chat(self.render_chat_prompt(messages, add_generation_prompt, tools, **template_kwargs))

    def render_chat_prompt(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> RenderedChat:
        """The rendered chat, its text checkable (length) before ``encode_chat`` pays to encode it;
        InvalidParameterError(param='messages') if the template rejects the messages."""
        from jinja2 import TemplateError

        if not self.has_chat_template:
            raise InvalidParameterError("this model has no chat template", param="messages")
        (messages, tools, template_kwargs), nonce = self._literals.mark((messages, tools, template_kwargs))
        try:
            marked = self.hf.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **template_kwargs,
            )
        except TemplateError as e:
            raise InvalidParameterError(f"chat template rejected the messages: {e}", param="messages") from e
        except _TEMPLATE_ERRORS as e:
            raise InvalidParameterError(
                f"chat template could not render the messages ({type(e).__name__}: {e})", param="messages"
            ) from e
        if not isinstance(marked, str):
            raise InvalidParameterError("chat template did not produce text", param="messages")
        return RenderedChat(self._literals.unmark(marked, nonce), marked, nonce)

    def encode_chat(self, rendered: RenderedChat) -> list[int]:
        """Token ids of a rendered chat. The template places any BOS itself, so none is added; a
        special-token string a client put inside the messages is encoded as text (chat_literals.py)."""
        return self._literals.encode(rendered.marked, rendered.nonce,
                                     lambda t: self.encode(t, add_special_tokens=False), self._encode_literal)

    def _encode_literal(self, special: str) -> list[int]:
        """A control token's string as ordinary text: cut after its first character, neither half
        is a control token; one character at a time if a vocabulary still finds one."""
        ids = self.encode(special[:1], add_special_tokens=False) + self.encode(special[1:], add_special_tokens=False)
        if self.all_special_ids.isdisjoint(ids):
            return ids
        return [i for ch in special for i in self.encode(ch, add_special_tokens=False)]


def _special_strings(hf_tokenizer: Any) -> list[str]:
    """The strings encoding turns into control tokens: the named special tokens and every added
    token flagged special (Llama 3's reserved ones, ChatML's turn markers)."""
    strings = {str(t) for t in getattr(hf_tokenizer, "all_special_tokens", []) or []}
    for token in (getattr(hf_tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            strings.add(str(getattr(token, "content", token)))
    return sorted(strings)


def _components(spec: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """A normalizer / pre-tokenizer spec flattened (``Sequence`` holds the others)."""
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [c for sub in spec.get(key) or [] for c in _components(sub, key)]
    return [spec]


def _shrink_factor(normalizer: dict[str, Any] | None) -> float | None:
    factor = 1.0
    for part in _components(normalizer, "normalizers"):
        shrink = _NORMALIZER_SHRINK.get(str(part.get("type")))
        if shrink is None:
            return None
        factor *= shrink
    return factor


def _lossless(pre_tokenizer: dict[str, Any] | None) -> bool:
    for part in _components(pre_tokenizer, "pretokenizers"):
        if part.get("type") not in _LOSSLESS_PRE_TOKENIZERS:
            return False
        if part.get("type") == "Split" and str(part.get("behavior", "")).lower() == "removed":
            return False
    return True


def _generation_config_eos(path: Path) -> list[int]:
    """eos_token_id from generation_config.json (an int or a list); [] if absent."""
    file = path / "generation_config.json"
    if not file.is_file():
        return []
    try:
        value = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return []
