"""The websocket and HTTP edge: sessions of agents, callers and operators."""
