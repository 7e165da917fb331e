"""Helpers for running a real control plane locally (tests, demo)."""
