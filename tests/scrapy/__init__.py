"""Tests of simstore.scrapy."""
