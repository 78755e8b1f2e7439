"""The semantics of one env step: config, state layout, the reference step, shared constants."""
