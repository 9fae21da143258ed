"""Capture: agent runs -> :class:`~art_adapters._trajectory.Trajectory`.

Two paths, :mod:`.langchain` (``TrajectoryCallbackHandler``) and :mod:`.otel` (``TrajectorySpanProcessor``),
share the bookkeeping of :mod:`.recorder` and :mod:`.assembly`. Import the public names from
:mod:`art_adapters`; this package imports nothing on its own, so each path only loads what it needs.
"""
