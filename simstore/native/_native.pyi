# Type stub of the cffi-compiled C core (csrc/simstore.h); see simstore/_core.py.
from typing import Any

ffi: Any
lib: Any
