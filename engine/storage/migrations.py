"""Numbered schema migrations, applied in order and recorded in the `migrations` table."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

# The sidebar search's index follows `messages` through these. Declared by 0007 and made again by
# 0008 and 0012, which rebuild the table (dropping it drops its triggers). Never edit this text: a
# database that ran those migrations keeps what they ran; a change is a new migration.
MESSAGES_FTS_TRIGGERS = """        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
        END;
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        END;
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
            INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
            INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
        END;
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_conversations_messages", """
        CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            model TEXT,
            system_prompt TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL,
            created TEXT NOT NULL,
            model TEXT,
            level TEXT,
            stats TEXT,                -- JSON TurnStats of the turn that produced it
            token_count INTEGER,
            status TEXT NOT NULL DEFAULT 'done' CHECK (status IN ('streaming', 'done')),
            token_ids BLOB,            -- content token ids, int32 little-endian, valid for token_model
            token_model TEXT,          -- backend identity the ids belong to
            logprobs BLOB              -- float32 per sampled token (assistant messages)
        );
        CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
    """),
    ("0002_superseded_answers", """
        -- A low-confidence answer re-asked on a stronger tier stays in the record, out of the context.
        ALTER TABLE messages ADD COLUMN superseded_by INTEGER REFERENCES messages(id) ON DELETE SET NULL;
    """),
    ("0003_conversation_route", """
        -- The user's per-conversation tier override: auto | L1 | L2 | L3.
        ALTER TABLE conversations ADD COLUMN route TEXT NOT NULL DEFAULT 'auto';
    """),
    ("0004_summaries", """
        -- The summary chain: each summary covers messages [first_message_id, last_message_id] and
        -- folds in the previous one, so the newest row stands for everything up to last_message_id.
        CREATE TABLE summaries (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            first_message_id INTEGER NOT NULL,
            last_message_id INTEGER NOT NULL,
            text TEXT NOT NULL,
            model TEXT,
            created TEXT NOT NULL,
            edited INTEGER NOT NULL DEFAULT 0,   -- 1 when the user rewrote it
            previous_id INTEGER REFERENCES summaries(id) ON DELETE SET NULL
        );
        CREATE INDEX summaries_by_conversation ON summaries (conversation_id, id);
    """),
    ("0005_memory", """
        -- Vector memory (engine/memory, docs/memory.md). Explicit memories ('pinned' ones go into
        -- every prompt, 'note' ones are only retrieved) and chunks of finished messages.
        -- No foreign keys to conversations/messages: a cascade would bypass the FTS index, so the
        -- memory store drops chunks of deleted or superseded messages itself.
        CREATE TABLE memories (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('pinned', 'note', 'message')),
            text TEXT NOT NULL,
            conversation_id INTEGER,
            message_id INTEGER,
            role TEXT,
            chunk INTEGER NOT NULL DEFAULT 0,   -- position of this chunk within its message
            created TEXT NOT NULL               -- the message's time, or when the memory was added
        );
        CREATE INDEX memories_by_message ON memories (message_id, chunk);
        CREATE INDEX memories_by_kind ON memories (kind, id);
        -- Keyword index over memories.text. Trigrams: substring search that needs no word breaks
        -- (Chinese, Japanese), but a query term shorter than 3 characters cannot use it.
        CREATE VIRTUAL TABLE memories_fts USING fts5(text, content='memories', content_rowid='id',
                                                     tokenize='trigram');
        -- One embedding per memory: float32 little-endian, L2-normalised, from `model`. The source of
        -- truth for both vector paths (sqlite-vec's vec0 index is rebuilt from it).
        CREATE TABLE memory_vectors (
            memory_id INTEGER PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            embedding BLOB NOT NULL
        );
        CREATE INDEX memory_vectors_by_model ON memory_vectors (model, memory_id);
        CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
    """),
    ("0006_message_model_text", """
        -- What the model read for a message when it differs from what the user typed: the new user
        -- turn with the memories retrieved for it (engine/memory/prompt.py). NULL: the content.
        ALTER TABLE messages ADD COLUMN model_text TEXT;
    """),
    ("0007_message_search", """
        -- Search over conversations (title + content) for the sidebar. Trigrams: substring matching
        -- that needs no word breaks (Chinese); queries under 3 characters use LIKE instead.
        CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id',
                                                     tokenize='trigram');
        INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages;
""" + MESSAGES_FTS_TRIGGERS),
    ("0008_autoincrement_ids", """
        -- Ids are never handed out twice. Without AUTOINCREMENT SQLite gives the largest id again
        -- once its row is deleted, and a stale reference (a queued memory job, a KV file named by
        -- conversation id, a chunk naming a deleted message) would point at the new row.
        -- A table cannot gain AUTOINCREMENT in place: each is rebuilt (new table, copy with ids,
        -- drop, rename: foreign keys are off meanwhile, see apply_migrations) and its indexes and
        -- triggers are made again. The FTS tables are keyed by the same ids and stay as they are.
        CREATE TABLE conversations_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            title TEXT NOT NULL DEFAULT '',
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            model TEXT,
            system_prompt TEXT NOT NULL DEFAULT '',
            route TEXT NOT NULL DEFAULT 'auto'
        );
        INSERT INTO conversations_new (id, title, created, updated, model, system_prompt, route)
            SELECT id, title, created, updated, model, system_prompt, route FROM conversations;
        DROP TABLE conversations;
        ALTER TABLE conversations_new RENAME TO conversations;

        CREATE TABLE messages_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL,
            created TEXT NOT NULL,
            model TEXT,
            level TEXT,
            stats TEXT,                -- JSON TurnStats of the turn that produced it
            token_count INTEGER,
            status TEXT NOT NULL DEFAULT 'done' CHECK (status IN ('streaming', 'done')),
            token_ids BLOB,            -- content token ids, int32 little-endian, valid for token_model
            token_model TEXT,          -- backend identity the ids belong to
            logprobs BLOB,             -- float32 per sampled token (assistant messages)
            superseded_by INTEGER REFERENCES messages(id) ON DELETE SET NULL,
            model_text TEXT            -- what the model read, when it differs from content
        );
        INSERT INTO messages_new (id, conversation_id, role, content, created, model, level, stats, token_count,
                                  status, token_ids, token_model, logprobs, superseded_by, model_text)
            SELECT id, conversation_id, role, content, created, model, level, stats, token_count,
                   status, token_ids, token_model, logprobs, superseded_by, model_text FROM messages;
        DROP TABLE messages;
        ALTER TABLE messages_new RENAME TO messages;
        CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
""" + MESSAGES_FTS_TRIGGERS + """
        CREATE TABLE summaries_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            first_message_id INTEGER NOT NULL,
            last_message_id INTEGER NOT NULL,
            text TEXT NOT NULL,
            model TEXT,
            created TEXT NOT NULL,
            edited INTEGER NOT NULL DEFAULT 0,   -- 1 when the user rewrote it
            previous_id INTEGER REFERENCES summaries(id) ON DELETE SET NULL
        );
        INSERT INTO summaries_new (id, conversation_id, first_message_id, last_message_id, text, model, created,
                                   edited, previous_id)
            SELECT id, conversation_id, first_message_id, last_message_id, text, model, created, edited, previous_id
            FROM summaries;
        DROP TABLE summaries;
        ALTER TABLE summaries_new RENAME TO summaries;
        CREATE INDEX summaries_by_conversation ON summaries (conversation_id, id);

        CREATE TABLE memories_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL CHECK (kind IN ('pinned', 'note', 'message')),
            text TEXT NOT NULL,
            conversation_id INTEGER,
            message_id INTEGER,
            role TEXT,
            chunk INTEGER NOT NULL DEFAULT 0,   -- position of this chunk within its message
            created TEXT NOT NULL               -- the message's time, or when the memory was added
        );
        INSERT INTO memories_new (id, kind, text, conversation_id, message_id, role, chunk, created)
            SELECT id, kind, text, conversation_id, message_id, role, chunk, created FROM memories;
        DROP TABLE memories;
        ALTER TABLE memories_new RENAME TO memories;
        CREATE INDEX memories_by_message ON memories (message_id, chunk);
        CREATE INDEX memories_by_kind ON memories (kind, id);

        -- Counting goes on above every id still named in the file, not only the largest left: a
        -- deleted newest message may live on in a memory chunk or a summary's range.
        DELETE FROM sqlite_sequence WHERE name IN ('conversations', 'messages', 'summaries', 'memories');
        INSERT INTO sqlite_sequence (name, seq) VALUES
            ('conversations', max(coalesce((SELECT max(id) FROM conversations), 0),
                                  coalesce((SELECT max(conversation_id) FROM memories), 0))),
            ('messages', max(coalesce((SELECT max(id) FROM messages), 0),
                             coalesce((SELECT max(message_id) FROM memories), 0),
                             coalesce((SELECT max(last_message_id) FROM summaries), 0))),
            ('summaries', coalesce((SELECT max(id) FROM summaries), 0)),
            ('memories', max(coalesce((SELECT max(id) FROM memories), 0),
                             coalesce((SELECT max(memory_id) FROM memory_vectors), 0)));
    """),
    ("0009_documents", """
        -- Local documents (engine/docs, docs/documents.md). doc_roots: what the user added (a folder
        -- or a file) and its collection; the scan of a root finds files added, changed and gone.
        CREATE TABLE doc_roots (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            path TEXT NOT NULL UNIQUE,          -- absolute, as added
            collection TEXT NOT NULL,
            added TEXT NOT NULL,
            scanned TEXT,                       -- end of the last complete scan (NULL: never finished)
            stopped INTEGER NOT NULL DEFAULT 0  -- 1: the user cancelled its indexing (not resumed at start)
        );
        -- One row per file met under a root, indexed or skipped. A file's row, chunks, keyword
        -- entries and vectors are written in one transaction: the index never holds half a file.
        CREATE TABLE doc_files (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            root_id INTEGER NOT NULL REFERENCES doc_roots(id) ON DELETE CASCADE,
            path TEXT NOT NULL UNIQUE,
            kind TEXT,                          -- pdf | docx | html | markdown | text | code
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT,
            status TEXT NOT NULL CHECK (status IN ('indexed', 'skipped')),
            reason TEXT,                        -- why it was skipped (engine/docs/parse.py's fixed reasons)
            detail TEXT,
            pages INTEGER,
            chunks INTEGER NOT NULL DEFAULT 0,
            indexed TEXT NOT NULL
        );
        CREATE INDEX doc_files_by_root ON doc_files (root_id);
        CREATE TABLE doc_chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            file_id INTEGER NOT NULL,           -- no FK cascade: deleting goes through the FTS index too
            idx INTEGER NOT NULL,               -- position in the file
            text TEXT NOT NULL,
            page INTEGER,                       -- 1-based PDF page
            heading TEXT,
            line INTEGER                        -- 1-based first line (text, Markdown, code)
        );
        CREATE INDEX doc_chunks_by_file ON doc_chunks (file_id, idx);
        CREATE VIRTUAL TABLE doc_chunks_fts USING fts5(text, content='doc_chunks', content_rowid='id',
                                                       tokenize='trigram');
        -- float32 little-endian, L2-normalised, from `model` (chunks of a file indexed while the
        -- embedder was unavailable get theirs later).
        CREATE TABLE doc_vectors (
            chunk_id INTEGER PRIMARY KEY,
            model TEXT NOT NULL,
            embedding BLOB NOT NULL
        );
        CREATE INDEX doc_vectors_by_model ON doc_vectors (model, chunk_id);
        -- Chinese/Japanese keywords: the chunk's CJK runs as overlapping character pairs ("团建 建定 …"),
        -- one word each for unicode61. Most Chinese words are two characters, which the trigram
        -- index above cannot match; BM25 over pairs weighs rare pairs up and filler ("在哪") down.
        CREATE VIRTUAL TABLE doc_chunks_cjk USING fts5(grams, tokenize='unicode61');
        -- A conversation's "Use my documents": NULL off, '*' every collection, else one collection.
        ALTER TABLE conversations ADD COLUMN docs TEXT;
    """),
    ("0010_fts_automerge", """
        -- Keyword indexes of rows that come and go (the API server deletes a conversation per
        -- request): FTS5 keeps a deleted row's entries, and its delete marker, until a merge brings
        -- them together. Merging segments two at a time (the default waits for four) keeps about
        -- half as much of them, for about the same time per write (tests/test_server_soak.py).
        INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 2);
        INSERT INTO memories_fts (memories_fts, rank) VALUES ('automerge', 2);
    """),
    ("0011_message_reasoning", """
        -- A reasoning model's thinking, apart from the answer in `content`: shown folded, never
        -- indexed for search or summarised. reasoning_ids: the ids sampled before the answer's
        -- (int32 little-endian, valid for token_model), so the KV state it left is rebuilt exactly.
        ALTER TABLE messages ADD COLUMN reasoning TEXT;
        ALTER TABLE messages ADD COLUMN reasoning_ids BLOB;
        -- A chat's Think switch: 1 on, 0 off, NULL the setting reasoning.think.
        ALTER TABLE conversations ADD COLUMN think INTEGER;
    """),
    ("0012_tool_messages", """
        -- Tool calls (issue 26). An answer's calls go in tool_calls (a JSON list of OpenAI-shaped
        -- calls; its token_ids hold their markup as sampled); a tool's result is a message of the
        -- new role 'tool', naming the call it answers in tool_call_id. The role's CHECK cannot
        -- change in place, so the table is rebuilt as in 0008: same ids, the sequence carried over.
        CREATE TABLE messages_new (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content TEXT NOT NULL,
            created TEXT NOT NULL,
            model TEXT,
            level TEXT,
            stats TEXT,                -- JSON TurnStats of the turn that produced it
            token_count INTEGER,
            status TEXT NOT NULL DEFAULT 'done' CHECK (status IN ('streaming', 'done')),
            token_ids BLOB,            -- content token ids, int32 little-endian, valid for token_model
            token_model TEXT,          -- backend identity the ids belong to
            logprobs BLOB,             -- float32 per sampled token (assistant messages)
            superseded_by INTEGER REFERENCES messages(id) ON DELETE SET NULL,
            model_text TEXT,           -- what the model read, when it differs from content
            reasoning TEXT,
            reasoning_ids BLOB,
            tool_calls TEXT,           -- an answer's calls: [{"id", "type", "function": {"name", "arguments"}}]
            tool_call_id TEXT          -- a tool result: the call it answers
        );
        INSERT INTO messages_new (id, conversation_id, role, content, created, model, level, stats, token_count,
                                  status, token_ids, token_model, logprobs, superseded_by, model_text,
                                  reasoning, reasoning_ids)
            SELECT id, conversation_id, role, content, created, model, level, stats, token_count,
                   status, token_ids, token_model, logprobs, superseded_by, model_text,
                   reasoning, reasoning_ids FROM messages;
        UPDATE sqlite_sequence SET seq = max(seq, (SELECT coalesce(max(seq), 0) FROM sqlite_sequence
                                                   WHERE name = 'messages')) WHERE name = 'messages_new';
        DELETE FROM sqlite_sequence WHERE name = 'messages';
        DROP TABLE messages;
        ALTER TABLE messages_new RENAME TO messages;
        CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
""" + MESSAGES_FTS_TRIGGERS),
    ("0013_conversation_preset", """
        -- The preset ("assistant", engine/config/presets.py) a chat was given: its id in
        -- presets.json; NULL for chats made before presets, which read as the default one.
        ALTER TABLE conversations ADD COLUMN preset TEXT;
    """),
    ("0014_conversation_pinned", """
        -- A chat the user pinned to the top of the list; pinning is not activity, so it leaves
        -- `updated` (the list's date groups) alone.
        ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
    """),
    ("0015_message_tree", """
        -- Branches: each message follows its parent (NULL: a chat's first message). Siblings are
        -- the answers given again and the messages edited and sent again; superseded_by still
        -- marks what is off the chat's current path (engine/chat/branches.py).
        ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE;
        -- Earlier chats were one path with superseded rows beside it: a message followed the latest
        -- one before it that had not been replaced by then (a replacement always has the larger id).
        UPDATE messages SET parent_id = (
            SELECT p.id FROM messages p WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id
               AND (p.superseded_by IS NULL OR p.superseded_by > messages.id)
             ORDER BY p.id DESC LIMIT 1);
        CREATE INDEX messages_parent ON messages (parent_id);
    """),
    ("0016_message_images", """
        -- Images sent with a message (issue 41): a JSON list of {"digest", "at"}, in order: the
        -- sha256 of the image's decoded pixels (its file: images/<digest>.<ext> in the data
        -- directory, engine/chat/image_store.py) and the character offset in `content` it stands
        -- at. token_ids then hold each image as its media ids (engine/inference/media.py).
        ALTER TABLE messages ADD COLUMN images TEXT;
    """),
]


def statements(sql: str) -> list[str]:
    """`sql` split into complete statements (a ';' inside a comment or string does not split)."""
    out, current = [], ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current)
            current = ""
    if current.strip() and not all(l.strip().startswith("--") or not l.strip() for l in current.splitlines()):
        out.append(current)  # the last statement may omit its ';'
    return out


def apply_migrations(conn: sqlite3.Connection) -> list[str]:
    """Apply pending migrations; return the names applied now.

    Foreign keys are off while they run (rebuilding a table drops the old one, which would
    otherwise cascade to its children) and checked before each commits: a migration that leaves
    a reference dangling is rolled back.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied TEXT NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    pending = [(name, sql) for name, sql in MIGRATIONS if name not in done]
    if not pending:
        return []
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")  # ignored inside a transaction: set before BEGIN
    applied = []
    try:
        for name, sql in pending:
            # One transaction per migration, all of it or none (the connection is in autocommit mode).
            conn.execute("BEGIN IMMEDIATE")
            try:
                broken = set(conn.execute("PRAGMA foreign_key_check").fetchall())  # only new ones count
                for statement in statements(sql):
                    conn.execute(statement)
                dangling = set(conn.execute("PRAGMA foreign_key_check").fetchall()) - broken
                if dangling:
                    raise sqlite3.IntegrityError(f"migration {name} would leave {len(dangling)} references "
                                                 f"dangling, e.g. {sorted(dangling)[:3]}")
                conn.execute("INSERT INTO migrations (name, applied) VALUES (?, ?)",
                             (name, datetime.now(timezone.utc).isoformat()))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            applied.append(name)
    finally:
        if enforced:
            conn.execute("PRAGMA foreign_keys = ON")
    return applied
