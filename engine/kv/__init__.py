"""KV state tiers: hot (the live context), warm (RAM) and cold (disk)."""
