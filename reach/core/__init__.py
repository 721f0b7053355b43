"""The pure core: decisions that take `now`, touch no socket, file or event loop."""
