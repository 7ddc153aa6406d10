"""A stand-in for ``python -m vllm.entrypoints.openai.api_server --model M ...`` (found through
PYTHONPATH): the same fake as tests/backends/fake_vllm/vllm, given ``serve M ...``."""

import runpy
import sys
from pathlib import Path

args = sys.argv[1:]
at = args.index("--model")
model = args[at + 1]
del args[at : at + 2]
sys.argv = [sys.argv[0], "serve", model, *args]
runpy.run_path(str(Path(__file__).resolve().parents[4] / "fake_vllm" / "vllm"), run_name="__main__")
