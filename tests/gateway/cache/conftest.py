"""Cache-test fixtures: ``onnx_dir`` (the exported embedder) lives in tests/conftest.py, shared with tests/scaleout."""
