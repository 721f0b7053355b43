"""The dashboard's widgets: one view per tab, the live table under them, the status line."""
