"""Outputs at the edges: lake tables."""
