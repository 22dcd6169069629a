"""Bridges to other libraries: torch autograd and compile (:mod:`pytapp.interop.torch_op`).

Nothing here is imported by ``import pytapp``; each module imports its library on first use.
"""
