"""The asyncio gateway: admission, the task book, one driver per task, dispatch.

No sockets, no SQL: agents are reached through ports.AgentLink, tasks kept through ports.TaskStore.
"""
