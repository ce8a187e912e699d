"""Build hook: compiles the C core through cffi. Metadata is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["csrc/build_native.py:ffibuilder"])
