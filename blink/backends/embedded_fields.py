"""Request fields the embedded engine refuses by name: they can change the output and it has no
implementation for them (README, compatibility). Upstream backends get them as sent."""

from __future__ import annotations

from blink.backends.base import GenerationRequest
from blink.protocol.errors import InvalidRequestError

# Set to anything but an empty value, each is a 400 naming it.
# vLLM's ``guided_decoding_backend`` values this engine takes: the grammar libraries it has (vLLM
# calls llguidance "guidance"); a request naming one gets it, "auto" gets the model's setting.
GRAMMAR_BACKENDS = ("auto", "xgrammar", "guidance", "llguidance")
# vLLM's name -> the engine's (``EngineConfig.structured_engine``); "auto" = the model's setting.
_GRAMMAR_ENGINES = {"xgrammar": "xgrammar", "guidance": "llguidance", "llguidance": "llguidance"}
_UNSUPPORTED_FIELDS = ("suffix", "reasoning_effort", "verbosity", "audio", "web_search_options", "functions",
                       "function_call")


def refuse_unsupported(req: GenerationRequest) -> None:
    extra = req.extra
    best_of = extra.get("best_of")
    if best_of is not None and best_of != req.options.n:
        _unsupported("best_of", "'best_of' other than 'n'")
    for name in _UNSUPPORTED_FIELDS:
        if extra.get(name) not in (None, "", [], {}):
            _unsupported(name, f"'{name}'")
    if extra.get("web_search_options") is not None:  # {} too: every option is optional, so {} turns search on
        _unsupported("web_search_options", "'web_search_options'")
    modalities = extra.get("modalities")
    if modalities is not None and list(modalities) != ["text"]:
        _unsupported("modalities", "output 'modalities' other than [\"text\"]")
    backend = extra.get("guided_decoding_backend")
    if backend is not None and backend not in GRAMMAR_BACKENDS:
        raise InvalidRequestError(
            f"'guided_decoding_backend' {backend!r} is not available; this engine's grammar backends are "
            f"{', '.join(repr(b) for b in GRAMMAR_BACKENDS)}.",
            param="guided_decoding_backend", code="unsupported_parameter")
    if extra.get("spaces_between_special_tokens") is False:
        _unsupported("spaces_between_special_tokens", "'spaces_between_special_tokens': false")


def grammar_engine_of(req: GenerationRequest) -> str | None:
    """The grammar engine a request names (``guided_decoding_backend``, checked by
    ``refuse_unsupported``), or None for the model's setting."""
    return _GRAMMAR_ENGINES.get(str(req.extra.get("guided_decoding_backend") or "auto"))


def _unsupported(param: str, what: str) -> None:
    raise InvalidRequestError(f"{what} is not supported by this model's engine.", param=param,
                              code="unsupported_parameter")
