"""A real tokenizer for tests that check the router's token estimate, read offline.

litellm ships tiktoken's cl100k_base file (`litellm_core_utils/tokenizers`, named by the SHA-1 of
its download address, as tiktoken caches it): pointed at it, tiktoken reads it and downloads
nothing. Any address tiktoken would fetch is routed to a closed port, so a missing file fails
at once instead of reaching the network. Tests and offline calibration only: the router never
tokenizes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CL100K_FILE = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # tiktoken's cache name for cl100k_base


def cl100k_encoding() -> Any:
    """tiktoken's cl100k_base `Encoding`; skips the test if the file is not there. The
    environment is changed only while the file is read (the proxies would reach the test's own
    clients)."""
    spec = importlib.util.find_spec("litellm")
    directory = (Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
                 if spec is not None and spec.origin is not None else None)
    if directory is None or not (directory / CL100K_FILE).exists():
        pytest.skip("litellm's bundled cl100k_base file is not installed")
    tiktoken = pytest.importorskip("tiktoken")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIKTOKEN_CACHE_DIR", str(directory))
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            env.setenv(proxy, "http://127.0.0.1:9")
        return tiktoken.get_encoding("cl100k_base")


def cl100k_counter() -> Callable[[str], int]:
    """A function text -> cl100k_base token count; skips the test if the file is not there."""
    encoding = cl100k_encoding()
    return lambda text: len(encoding.encode(text, disallowed_special=()))
