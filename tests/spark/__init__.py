"""Tests of simstore.spark."""
