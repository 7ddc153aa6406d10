"""In-process server for small ONNX models (encoders, sequence classifiers) with dynamic batching."""
