"""Tests of simstore.store."""
