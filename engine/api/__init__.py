"""The engine's one front door. Front-ends (the window, the terminal, the local API server) import
from here and nothing else from `engine`.

    from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone

    assistant = Assistant.from_settings()          # the only place settings become an engine
    cid = assistant.new_conversation()
    for event in assistant.send(cid, "hello", GenerateParams(max_tokens=64)):
        ...                                        # Chunk … (ReasoningChunk …), then TurnDone
    assistant.close()

Names resolve on first use (PEP 562): a front-end's first screen can import settings and paths
from here without paying for llama.cpp, which loads with the first engine name it asks for.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    # the engine and its events
    "Assistant": "engine.api.assistant",
    "LIVE_SETTINGS": "engine.api.assistant",
    "TurnDone": "engine.chat.conversation",
    "MessageRecord": "engine.chat.message_record",  # a stored message, typed (Assistant.messages)
    "Chunk": "engine.inference.events",
    "ReasoningChunk": "engine.inference.events",  # a reasoning model's thinking, beside the answer's Chunks
    # structured output: OpenAI's response_format as a grammar, and what it cannot enforce
    "response_grammar": "engine.inference.structured",
    "reasoning_options": "engine.api.engine_config",  # a turn's think/budget/history from the settings
    "SchemaUnsupported": "engine.inference.structured",
    # tools (issue 26): what a turn may call, the calls an answer makes, and what is refused
    "Tool": "engine.inference.tool_calls",
    "ToolUse": "engine.inference.tool_calls",
    "ToolCall": "engine.inference.tool_calls",
    "ToolError": "engine.inference.tool_calls",
    "parse_tools": "engine.inference.tool_calls",
    "parse_tool_choice": "engine.inference.tool_calls",
    "call_grammar": "engine.inference.tool_calls",
    "ToolRunner": "engine.tools.runner",  # the window's tools: sources, approval, timeouts (issue 26)
    "TurnTools": "engine.tools.runner",  # a turn's `tools=`: the engine runs the calls on every entry point
    "TurnEvent": "engine.chat.events",  # what a turn streams: chunks, answers, tool calls and results
    "Retracted": "engine.chat.events",  # the cascade takes an answer back; the next one follows
    "TurnFold": "engine.chat.events",  # what a front-end keeps of a turn, the retraction applied
    "UnknownEvent": "engine.chat.events",
    "unknown_event": "engine.chat.events",  # every front-end's last case over a turn's events
    "Approval": "engine.tools.runner",
    "ToolCallEvent": "engine.tools.runner",
    "ToolResultEvent": "engine.tools.runner",
    "BuiltinTools": "engine.tools.builtin",
    "ToolSource": "engine.tools.base",
    "ToolResult": "engine.tools.base",
    "ToolFailed": "engine.tools.base",
    # MCP servers and the window's toolbox (mcp.json, tools.json, the Tools panel's snapshot)
    "Toolbox": "engine.tools.toolbox",
    "McpConfigError": "engine.tools.mcp_config",
    "ImportReport": "engine.tools.mcp_config",
    "known_mcp_configs": "engine.tools.mcp_config",
    "mcp_config_path": "engine.tools.mcp_config",
    "mcp_self_check": "engine.tools.mcp_server",  # the bundle's selftest: the SDK imports and runs
    "GenerateParams": "engine.inference.events",
    "SamplingParams": "engine.inference.backend",
    "LoadParams": "engine.inference.backend",
    "cpu_threads_report": "engine.api.cpu",  # `assistant devices`: CPUs, other programs' load, calibrations
    "MAX_MESSAGE_CHARS": "engine.storage",
    "MAX_IMAGE_BYTES": "engine.inference.images",  # an image's file, before it is decoded
    "MAX_IMAGES": "engine.chat.request",  # per message
    "EngineConfig": "engine.chat.config",  # what shapes an engine (tests and tools build one by hand)
    "TurnRequest": "engine.chat.request",
    "TurnStats": "engine.chat.stats",
    # errors a front-end reports to the user
    "InputError": "engine.chat.targets",
    "MessageTooLong": "engine.chat.targets",
    "ConversationNotFound": "engine.chat.conversation",
    "ModelNotFound": "engine.models.catalog",
    "ModelLoadError": "engine.inference.errors",
    "StorageError": "engine.storage",
    "RemoteError": "engine.inference.remote",
    "PlanError": "engine.models.planner",
    "GGUFError": "engine.models.gguf_info",
    "DownloadError": "engine.models.downloads",
    "DownloadCancelled": "engine.models.downloads",
    # settings and where files live
    "Settings": "engine.config.settings",
    "Preset": "engine.config.presets",  # presets ("assistants"): presets.json, a chat's preset
    "Presets": "engine.config.presets",
    "PresetError": "engine.config.presets",
    "user_dir": "engine.config.paths",
    "install_dir": "engine.config.paths",
    "__version__": "engine.config.version",  # for `assistant --version`
    "db_path": "engine.config.paths",
    "locked": "engine.config.locked_file",  # a file other processes write too: read-merge-write under it
    "write_atomic": "engine.config.locked_file",
    # which thread owns what (engine/config/ownership.py): a front-end's engine thread adopts what it drives
    "WrongThread": "engine.config.ownership",
    "adopt": "engine.config.ownership",
    "hand_over": "engine.config.ownership",
    "owner_of": "engine.config.ownership",
    "check_owner": "engine.config.ownership",
    # stateless helpers: catalog, plans, devices, downloads, model files, the L3 connection test
    "ModelEntry": "engine.models.catalog",
    "load_catalog": "engine.models.catalog",
    "plan": "engine.models.planner",
    "ram_bytes": "engine.models.planner",
    "device_snapshot": "engine.models.devices",
    "default_vram_budget_mb": "engine.models.devices",
    "download": "engine.models.downloads",
    "part_path": "engine.models.downloads",
    "read_gguf": "engine.models.gguf_info",
    "check_remote": "engine.api.helpers",
    "database_check": "engine.api.helpers",
    "footprint": "engine.api.footprint",  # what the engine keeps per conversation (a soak's gauges)
    # hubs, hub search and the first-start recommendation (issue 14)
    "HubError": "engine.models.hubs",
    "hubs": "engine.models.hubs",
    "default_hub": "engine.models.hubs",
    "search_hub": "engine.models.hubs",
    "entry_for": "engine.models.hubs",
    "recommend_models": "engine.models.recommend",
    "plan_fit": "engine.models.fit",
    "size_fit": "engine.models.fit",
    # local documents (issue 15): the index without a chat engine, its errors and default collection
    "Documents": "engine.api.documents",
    "DocumentsError": "engine.docs.service",
    "DEFAULT_COLLECTION": "engine.docs.store",
    "pdf_bytes": "engine.docs.pdf_writer",  # a tiny text PDF: the selftest's document to index
    # attachments (issue 27): a file dropped or pasted into the message box
    "Attachment": "engine.docs.attach",
    "AttachmentError": "engine.docs.attach",
    "read_attachment": "engine.docs.attach",
    # images (issue 41): kept by the digest of their pixels, shown back as previews; any thread
    "keep_image": "engine.api.images",
    "kept_image_file": "engine.api.images",
    "image_preview": "engine.api.images",
    "is_image_file": "engine.api.images",
    # the update check (issue 43): opt-in, one signed manifest read, never a download
    "update_channel": "engine.api.updates",
    "update_due": "engine.api.updates",
    "check_for_update": "engine.api.updates",
    "update_self_check": "engine.api.updates",  # the bundle's selftest: Ed25519 works in this install
    "UpdateOffer": "engine.update.check",
    # the embedding model through Assistant.embed (the local API's /v1/embeddings)
    "EmbedderNotReady": "engine.memory.embedder",
    # what the terminal's tools need without a chat engine (issue 23): the memory on its own, what
    # earlier runs left on disk, the router alone, and the model facts `plan`, `devices` and `models` show
    "Memories": "engine.api.memory",
    "MemoryInputError": "engine.memory.service",
    "MemoryNotFound": "engine.memory.service",
    "summary_chain": "engine.api.records",
    "kv_on_disk": "engine.api.records",
    "route_message": "engine.api.routing",
    "score_router": "engine.api.routing",
    "RouteDecision": "engine.routing.router",
    "EvalFileError": "engine.routing.router_eval",
    "Plan": "engine.models.planner",
    "DEFAULT_N_CTX": "engine.models.planner",
    "DeviceSnapshot": "engine.models.devices",
    "DEFAULT_MARGIN_MB": "engine.models.devices",
    "HubFile": "engine.models.hubs",
    "repo_files": "engine.models.hubs",
    "size_text": "engine.models.downloads",
    "fetch_demo_models": "engine.models.fetch",
    "FetchError": "engine.models.fetch",
}
_RENAMED = {"device_snapshot": "snapshot", "search_hub": "search", "known_mcp_configs": "known_configs",
            "mcp_config_path": "config_path", "mcp_self_check": "self_check", "UpdateOffer": "Offer"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return __all__
