"""What the engine keeps per conversation, counted: the gauges of a soak (bench/soak_api.py) and of
the tests that hold a long-running server to a flat footprint (tests/test_server_soak.py).

Every map keyed by conversation is listed here. A conversation's entries go when it is deleted
(`Assistant.delete_conversation`); a map that is not back to its size after N conversations were
made and deleted grows without bound in a server that makes and deletes one per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.api.assistant import Assistant

# Tables whose rows belong to conversations (memories: chunks of their messages).
ROWS = {"db conversations": "SELECT count(*) FROM conversations",
        "db messages": "SELECT count(*) FROM messages",
        "db summaries": "SELECT count(*) FROM summaries",
        "db message memories": "SELECT count(*) FROM memories WHERE kind = 'message'",
        # FTS5's blocks of the messages' keyword index: deleted messages' entries stay in them
        # until a merge meets their delete markers (migration 0010_fts_automerge)
        "db message index blocks": "SELECT count(*) FROM messages_fts_data"}


def footprint(assistant: "Assistant") -> dict[str, int]:
    """Entry counts of every per-conversation map and table row count (any thread; a map read
    while the engine changes it may be one entry off).

    Keys: the Assistant's maps (water levels, summary handles, conversations rebuilt from SQLite,
    the level each last ran on), the KV tiers' (conversations hot in a context, warm snapshots,
    cold files, cached cold headers, runs of deleted ids), the database's read connections (one
    per thread that read) and the rows of ROWS.
    """
    a = assistant
    out = {"water": len(a.water)} | a.map_sizes()
    kv = a.kv
    if kv is not None:
        out |= {"kv hot": sum(cid is not None for cid in list(kv.hot.values())), "kv warm": len(kv.warm.entries()),
                "kv cold files": len(kv.cold.files()), "kv cold headers": len(kv.cold._counts),
                "kv deleted runs": len(kv._forgotten)}
    for name, sql in ROWS.items():
        out[name] = a.db.read(sql)[0][0]
    out["db readers"] = len(a.db._readers)  # after this thread's own reads: it counts from the first call
    return out
