# Type stub of the cffi-compiled C core (csrc/simstore.h); see simstore/native/core.py.
from typing import Any

ffi: Any
lib: Any
