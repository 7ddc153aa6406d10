"""A lone text takes the encoder's unpadded path: its row must equal the padded batch path's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blink.modelserver.encoder import OnnxEncoder


def test_a_lone_text_gets_the_row_and_count_it_gets_in_a_padded_batch(onnx_dir: Path) -> None:
    # fp32: the int8 graph quantises activations per call, so a batch's company moves its rows a little.
    enc = OnnxEncoder("all-MiniLM-L6-v2", onnx_dir, quantize=False)
    texts = ["Is there parking near the venue?", "ok", "a much longer question about the opening hours of the museum"]
    batch, counts = enc.counted(texts)
    for i, text in enumerate(texts):
        row, count = enc.counted([text])
        assert row.shape == (1, enc.dim) and row.dtype == np.float32 and count == [counts[i]]
        np.testing.assert_allclose(row[0], batch[i], atol=2e-5)
        assert abs(float(np.linalg.norm(row[0])) - 1.0) < 1e-5
