"""The task store (SQLite by default): implements ports.TaskStore."""
