"""OpenAI Batch API: uploaded JSONL files run line by line at priority ``batch``, persisted."""
