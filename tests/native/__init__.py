"""Tests of simstore.native."""
