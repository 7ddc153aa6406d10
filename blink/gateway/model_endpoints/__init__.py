"""The non-generative endpoints over the model server: embeddings, classify, moderations."""
