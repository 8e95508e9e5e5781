"""Settings (defaults, persisted JSON, validated reads) and where files live."""
