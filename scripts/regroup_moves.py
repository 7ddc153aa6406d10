"""Issue #26 item 4: the gateway grouped by noun, the CLI as a package. Re-runnable.

Run from the repository root: ``python scripts/regroup_moves.py``. Each move whose source still
exists is done with ``git mv``; then every reference to the moved modules (dotted import paths and
file paths) is rewritten in one pass across the tree, so a chain A -> B, B -> C cannot happen.
A move whose source is gone (already done) is skipped, so the script is idempotent.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# (source, destination), repository-relative. Sources are modules or test files.
MOVES: list[tuple[str, str]] = [
    # --- gateway/http/: the HTTP machinery every endpoint shares (no generation logic) ---
    ("blink/gateway/dispatch.py", "blink/gateway/http/dispatch.py"),
    ("blink/gateway/errors.py", "blink/gateway/http/errors.py"),
    ("blink/gateway/http_guard.py", "blink/gateway/http/guard.py"),
    ("blink/gateway/http_protocol.py", "blink/gateway/http/uvicorn_protocol.py"),
    ("blink/gateway/limits.py", "blink/gateway/http/edge_limits.py"),
    ("blink/gateway/gc_tuning.py", "blink/gateway/http/gc_tuning.py"),
    ("blink/gateway/request_parsing.py", "blink/gateway/http/request_parsing.py"),
    # --- gateway/rendering/: deltas -> bytes on the wire, the loop every API shares ---
    ("blink/gateway/generation_response.py", "blink/gateway/rendering/generation_response.py"),
    ("blink/gateway/wire.py", "blink/gateway/rendering/wire.py"),
    ("blink/gateway/streaming.py", "blink/gateway/rendering/streaming.py"),
    ("blink/gateway/aggregate.py", "blink/gateway/rendering/aggregate.py"),
    ("blink/gateway/logprobs_format.py", "blink/gateway/rendering/logprobs_format.py"),
    # --- gateway/chat/: the OpenAI chat and legacy completions API ---
    ("blink/gateway/routes.py", "blink/gateway/chat/routes.py"),
    ("blink/gateway/request_mapping.py", "blink/gateway/chat/request_mapping.py"),
    ("blink/gateway/structured_request.py", "blink/gateway/chat/structured_request.py"),
    # --- gateway/messages/: Anthropic's Messages API ---
    ("blink/gateway/routes_messages.py", "blink/gateway/messages/routes.py"),
    ("blink/gateway/messages_errors.py", "blink/gateway/messages/errors.py"),
    ("blink/gateway/messages_request.py", "blink/gateway/messages/request.py"),
    ("blink/gateway/messages_response.py", "blink/gateway/messages/response.py"),
    # --- gateway/model_endpoints/: embeddings, classify, moderations over the model server ---
    ("blink/gateway/routes_models.py", "blink/gateway/model_endpoints/routes.py"),
    ("blink/gateway/model_inputs.py", "blink/gateway/model_endpoints/inputs.py"),
    # --- gateway/auth/, gateway/ratelimit/, gateway/cost/ ---
    ("blink/gateway/auth.py", "blink/gateway/auth/keys.py"),
    ("blink/gateway/auth_postgres.py", "blink/gateway/auth/postgres.py"),
    ("blink/gateway/ratelimit.py", "blink/gateway/ratelimit/limiter.py"),
    ("blink/gateway/ratelimit_window.py", "blink/gateway/ratelimit/window.py"),
    ("blink/gateway/sequence_quota.py", "blink/gateway/ratelimit/sequence_quota.py"),
    ("blink/gateway/cost.py", "blink/gateway/cost/prices.py"),
    ("blink/gateway/cost_ledger.py", "blink/gateway/cost/ledger.py"),
    ("blink/gateway/cost_tracker.py", "blink/gateway/cost/tracker.py"),
    # --- gateway/storage/: what the durable stores share ---
    ("blink/gateway/sql_store.py", "blink/gateway/storage/sql.py"),
    ("blink/gateway/store_errors.py", "blink/gateway/storage/errors.py"),
    # --- the voice endpoint is a gateway service (it joins voice and the pipeline) ---
    ("blink/voice_gateway.py", "blink/gateway/voice_service.py"),
    # --- cycles: RouterCollector reads routed backends (router/), the ONNX embedder is a model ---
    ("blink/gateway/resilience/metrics.py", "blink/gateway/router/metrics.py"),
    ("blink/gateway/cache/embedder.py", "blink/modelserver/embedder.py"),
    # --- where replica URLs come from: a model-server concern (backends/) ---
    ("blink/gateway/router/discovery.py", "blink/backends/discovery.py"),
    # --- blink/cli/: one module per sub-command ---
    ("blink/cli.py", "blink/cli/main.py"),
    ("blink/gateway/cli_keys.py", "blink/cli/keys.py"),
    ("blink/gateway/cli_cache.py", "blink/cli/cache.py"),
    ("blink/gateway/cost_cli.py", "blink/cli/usage.py"),
    ("blink/gateway/batch/cli.py", "blink/cli/batch.py"),
    ("blink/voice/cli.py", "blink/cli/voice.py"),
    ("blink/bench/command.py", "blink/cli/bench.py"),
    ("blink/engine_serve.py", "blink/cli/engine.py"),
    # --- tests mirror blink/ ---
    ("tests/gateway/test_auth.py", "tests/gateway/auth/test_auth.py"),
    ("tests/gateway/test_auth_postgres.py", "tests/gateway/auth/test_auth_postgres.py"),
    ("tests/gateway/test_cost.py", "tests/gateway/cost/test_cost.py"),
    ("tests/gateway/test_dispatch.py", "tests/gateway/http/test_dispatch.py"),
    ("tests/gateway/test_gc_tuning.py", "tests/gateway/http/test_gc_tuning.py"),
    ("tests/gateway/test_http_guard.py", "tests/gateway/http/test_http_guard.py"),
    ("tests/gateway/test_http_protocol.py", "tests/gateway/http/test_uvicorn_protocol.py"),
    ("tests/gateway/test_limits.py", "tests/gateway/http/test_edge_limits.py"),
    ("tests/gateway/test_logprobs_format.py", "tests/gateway/rendering/test_logprobs_format.py"),
    ("tests/gateway/test_streaming.py", "tests/gateway/rendering/test_streaming.py"),
    ("tests/gateway/test_routes.py", "tests/gateway/chat/test_chat_routes.py"),
    ("tests/gateway/test_structured_request.py", "tests/gateway/chat/test_structured_request.py"),
    ("tests/gateway/test_routes_messages.py", "tests/gateway/messages/test_messages_routes.py"),
    ("tests/gateway/test_messages_errors.py", "tests/gateway/messages/test_messages_errors.py"),
    ("tests/gateway/test_messages_request.py", "tests/gateway/messages/test_messages_request.py"),
    ("tests/gateway/test_messages_response.py", "tests/gateway/messages/test_messages_response.py"),
    ("tests/gateway/test_ratelimit.py", "tests/gateway/ratelimit/test_ratelimit.py"),
    ("tests/gateway/test_ratelimit_store_down.py", "tests/gateway/ratelimit/test_ratelimit_store_down.py"),
    ("tests/gateway/test_ratelimit_window.py", "tests/gateway/ratelimit/test_ratelimit_window.py"),
    ("tests/gateway/test_sequence_quota.py", "tests/gateway/ratelimit/test_sequence_quota.py"),
    ("tests/gateway/test_dashboard.py", "tests/gateway/dashboard/test_dashboard.py"),
    ("tests/gateway/test_dashboard_breakers.py", "tests/gateway/dashboard/test_dashboard_breakers.py"),
    ("tests/gateway/test_dashboard_savings.py", "tests/gateway/dashboard/test_dashboard_savings.py"),
    ("tests/test_cli.py", "tests/cli/test_cli.py"),
    ("tests/test_engine_serve.py", "tests/cli/test_engine_serve.py"),
    ("tests/gateway/cache/test_cli_cache.py", "tests/cli/test_cli_cache.py"),
    ("tests/gateway/batch/test_batch_cli.py", "tests/cli/test_batch_cli.py"),
    ("tests/voice/test_voice_cli_mic.py", "tests/cli/test_voice_cli_mic.py"),
]

NEW_PACKAGES: dict[str, str] = {
    "blink/gateway/http": "The HTTP machinery every endpoint shares: dispatch, edge limits, errors, uvicorn's protocol.",
    "blink/gateway/rendering": "Deltas -> bytes on the wire: the one response loop and each API's wire format.",
    "blink/gateway/chat": "The OpenAI chat and legacy completions API: routes and request mapping.",
    "blink/gateway/messages": "Anthropic's Messages API: routes, request mapping, responses and errors.",
    "blink/gateway/model_endpoints": "The non-generative endpoints over the model server: embeddings, classify, moderations.",
    "blink/gateway/auth": "API keys: the stores (SQLite, PostgreSQL) and the middleware that checks them.",
    "blink/gateway/ratelimit": "Per-key and per-model rate limits and the per-key concurrent-sequence quota.",
    "blink/gateway/cost": "Cost accounting: prices, the spend ledger, and the budget check on the request path.",
    "blink/gateway/storage": "What the gateway's durable stores share: SQL plumbing and the store-error counter.",
    "blink/cli": "The ``blink`` command: one module per sub-command, assembled in ``main.py``.",
}

# Helpers the moved tests imported by bare name (their old folder was on sys.path).
TEST_HELPERS = ["gateway_helpers", "batch_helpers", "cache_helpers", "voice_helpers"]

SCAN_ROOTS = ["blink", "tests", "benchmarks", "docs", "deploy", "scripts", ".ci"]
SCAN_FILES = ["README.md", "pyproject.toml"]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".sh", ".json", ".tpl", ""}


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


def make_packages() -> None:
    for folder, doc in NEW_PACKAGES.items():
        init = Path(folder) / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}"""\n')
            git("add", str(init))


def do_moves() -> list[tuple[str, str]]:
    done: list[tuple[str, str]] = []
    for src, dst in MOVES:
        if src == dst or not Path(src).exists():
            continue
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        git("mv", src, dst)
        done.append((src, dst))
    return done


def rewrite(done: list[tuple[str, str]]) -> None:
    table: dict[str, str] = {}
    extra: list[tuple[str, str]] = []
    for src, dst in done:
        if src == "blink/cli.py":
            # ``python -m blink.cli`` keeps working (cli/__main__.py); only imports and the entry point move.
            extra += [(r"from blink\.cli import", "from blink.cli.main import"), (r"blink\.cli:main", "blink.cli.main:main")]
        elif src.startswith("blink/"):
            table[dotted(src)] = dotted(dst)
        table[src] = dst
        if src.startswith("blink/"):  # short path forms in docs: gateway/auth.py
            table[src.removeprefix("blink/")] = dst.removeprefix("blink/")
    if not table:
        return
    # Longest first; a name must not continue with a word character (auth vs auth_postgres).
    keys = sorted(table, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(k) for k in keys) + r")(?!\w)")
    files = [Path(f) for f in SCAN_FILES]
    for root in SCAN_ROOTS:
        if Path(root).exists():
            files += [p for p in Path(root).rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
    for path in files:
        if "__pycache__" in path.parts or path.name == "regroup_moves.py":
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        new = pattern.sub(lambda m: table[m.group(1)], text)
        for old, repl in extra:
            new = re.sub(old, repl, new)
        if new != text:
            path.write_text(new)


def fix_test_helper_imports(done: list[tuple[str, str]]) -> None:
    """A moved test no longer has its helper's folder on sys.path: import it by package path."""
    helpers = {p.stem: dotted(str(p)) for p in Path("tests").rglob("*_helpers.py") if p.stem in TEST_HELPERS}
    for _, dst in done:
        if not dst.startswith("tests/"):
            continue
        path = Path(dst)
        text = path.read_text()
        for stem, module in helpers.items():
            text = re.sub(rf"^from {stem} import", f"from {module} import", text, flags=re.M)
        path.write_text(text)


def make_cli_main() -> None:
    main_py = Path("blink/cli/__main__.py")
    if not main_py.exists():
        main_py.write_text('"""``python -m blink.cli``: the same as the ``blink`` console script."""\n\n'
                           "from blink.cli.main import main\n\nmain()\n")
        git("add", str(main_py))


def main() -> int:
    make_packages()
    done = do_moves()
    make_cli_main()
    rewrite(done)
    fix_test_helper_imports(done)
    print(f"{len(done)} moves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
