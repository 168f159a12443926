"""The only place dspy-for touches private APIs of other libraries: one small module per library.

Each function names the private API it wraps; ``check_supported()`` in each module fails loudly (with the
supported range and the install command) when the installed version no longer has what it needs.
"""

from __future__ import annotations
