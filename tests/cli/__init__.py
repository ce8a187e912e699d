"""Tests of simstore.cli."""
