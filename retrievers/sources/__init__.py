"""Knowledge sources, registered by name (the spec strings' source tokens)."""
