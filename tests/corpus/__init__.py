"""Tests of simstore.corpus."""
