"""The wire protocol: every frame as a model, in and out (docs/protocol.md)."""
