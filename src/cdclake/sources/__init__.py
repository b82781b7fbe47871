"""Inputs at the edges: files (and Kafka)."""
