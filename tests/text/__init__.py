"""Tests of simstore.text."""
