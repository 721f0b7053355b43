"""The two SDKs: Agent (serves capabilities) and Client (calls them), and Context."""
