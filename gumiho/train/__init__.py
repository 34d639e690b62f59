"""Drafter training: data pipeline and trainer."""
