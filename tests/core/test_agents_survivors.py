"""Tests that pin behaviour of reach/core/agents.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed.
"""
