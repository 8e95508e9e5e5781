"""`assistant chat --docs` with a real model: the answer's `done` event lists the excerpts it was
given (the CLI shapes themselves: tests/test_cli_docs.py)."""

import json
import subprocess

from tests.test_docs_index import write_corpus
from tests.util import cli, cli_env


def test_chat_docs_done_event_lists_the_sources(assistant_home, tmp_path, model_paths):
    folder = write_corpus(tmp_path / "corpus")
    env = cli_env(assistant_home)
    added = subprocess.run(cli("docs", "add", str(folder), "--json"), capture_output=True, env=env, timeout=300)
    assert added.returncode == 0 and json.loads(added.stdout)["indexed"] == 3, added.stderr.decode()
    proc = subprocess.run(cli("chat", "--docs", "--json", "--model", "demo-small", "--temperature", "0",
                              "--seed", "1", "--max-tokens", "16", "--n-ctx", "2048", "--no-memory"),
                          input=b"How long does the warranty of the Zephyr kettle last?\n",
                          capture_output=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    (done,) = [e for e in map(json.loads, proc.stdout.decode().splitlines()) if e["event"] == "done"]
    first = done["sources"][0]
    assert first["path"] == str(folder / "manual.pdf") and first["page"] == 3
    assert "three years" in first["text"] and type(first["score"]) is float
    assert done["stats"]["documents"] == "ok" and done["stats"]["retrieval"]["document_tokens"] > 0
    assert "Traceback" not in proc.stderr.decode()
