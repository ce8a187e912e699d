"""Tests of simstore.search."""
