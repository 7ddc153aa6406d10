"""Settings -> a ``ModelServer`` (called by the composition root), or None when nothing needs one."""

from __future__ import annotations

from blink.config import Settings
from blink.modelserver.batcher import BatchConfig
from blink.modelserver.server import ModelServer
from blink.safety_config import BatchingSettings


def batch_config(s: BatchingSettings) -> BatchConfig:
    return BatchConfig(max_batch_size=s.max_batch_size, window_s=s.batch_window_ms / 1000.0, timeout_s=s.timeout_s,
                       max_queue=s.max_queue)  # fmt: skip


def needs_encoder(settings: Settings) -> bool:
    """The shared encoder serves /v1/embeddings, the semantic cache and classifier routing."""
    classifier_routes = any("classifier" in r.policies and r.classifier is not None for r in settings.routes)
    return settings.model_server.embeddings or settings.cache.semantic.enabled or classifier_routes


def build_model_server(settings: Settings) -> ModelServer | None:
    ms, sem = settings.model_server, settings.cache.semantic
    if not (needs_encoder(settings) or ms.models):
        return None
    server = ModelServer()
    if needs_encoder(settings):
        from blink.modelserver.encoder import OnnxEncoder

        server.add_encoder(sem.model, OnnxEncoder(sem.model, sem.onnx_dir, sem.quantize), batch_config(ms))
    for m in ms.models:
        if m.kind == "encoder":
            from blink.modelserver.encoder import OnnxEncoder

            server.add_encoder(m.name, OnnxEncoder(m.path, sem.onnx_dir, m.quantize), batch_config(m))
        else:
            from blink.modelserver.sequence_classifier import OnnxSequenceClassifier

            runner = OnnxSequenceClassifier(m.path, sem.onnx_dir, m.labels or None, m.multi_label)
            server.add_classifier(m.name, runner, batch_config(m))
    return server
