"""Settings -> a ``ServedModels`` (called by the composition root), or None when nothing needs one.

A served encoder's name says what it computes: ``all-MiniLM-L6-v2`` is the fp32 export, whose rows
equal sentence-transformers' own (so they can sit next to reference vectors in a vector database);
the per-channel int8 export is served as ``all-MiniLM-L6-v2-int8``. ``/v1/embeddings`` defaults to
the exact one; the semantic cache and the router keep the int8 one unless ``quantize: false``,
since they only compare Blink's vectors with Blink's vectors.
"""

from __future__ import annotations

from blink.config.gateway import SemanticCacheSettings
from blink.config.model_server import BatchingSettings
from blink.config.settings import Settings
from blink.modelserver.batcher import BatchConfig
from blink.modelserver.server import ServedModels

# Suffix of the quantized export's served name.
INT8_SUFFIX = "-int8"


def batch_config(s: BatchingSettings) -> BatchConfig:
    return BatchConfig(max_batch_size=s.max_batch_size, window_s=s.batch_window_ms / 1000.0, timeout_s=s.timeout_s,
                       max_queue=s.max_queue)  # fmt: skip


def cache_needs_encoder(settings: Settings) -> bool:
    """The semantic cache and classifier routing embed every request with the shared encoder."""
    classifier_routes = any("classifier" in r.policies and r.classifier is not None for r in settings.routes)
    return settings.cache.semantic.enabled or classifier_routes


def needs_encoder(settings: Settings) -> bool:
    """The shared encoder serves /v1/embeddings, the semantic cache and classifier routing."""
    return settings.model_server.embeddings or cache_needs_encoder(settings)


def cache_encoder_name(sem: SemanticCacheSettings) -> str:
    """The served name of the cache's (and router's) encoder: the int8 name unless ``quantize`` is off."""
    return f"{sem.model}{INT8_SUFFIX}" if sem.quantize else sem.model


def build_model_server(settings: Settings) -> ServedModels | None:
    ms, sem = settings.model_server, settings.cache.semantic
    if not (needs_encoder(settings) or ms.models):
        return None
    from blink.modelserver.encoder import OnnxEncoder

    server = ServedModels()
    # (served name, int8?): the exact model first, so it is /v1/embeddings' default encoder.
    encoders: dict[str, bool] = {}
    if ms.embeddings:
        encoders |= {sem.model: False, f"{sem.model}{INT8_SUFFIX}": True}
    if cache_needs_encoder(settings):
        encoders[cache_encoder_name(sem)] = sem.quantize
    for name, quantize in encoders.items():
        server.add_encoder(name, OnnxEncoder(sem.model, sem.onnx_dir, quantize), batch_config(ms))
    for m in ms.models:
        if m.kind == "encoder":
            server.add_encoder(m.name, OnnxEncoder(m.path, sem.onnx_dir, m.quantize), batch_config(m))
        else:
            from blink.modelserver.sequence_classifier import OnnxSequenceClassifier

            runner = OnnxSequenceClassifier(m.path, sem.onnx_dir, m.labels or None, m.multi_label)
            server.add_classifier(m.name, runner, batch_config(m))
    return server
