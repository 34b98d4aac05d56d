"""The three-level middleware onion (turn, step, toolCall), contexts, events and tracing."""
