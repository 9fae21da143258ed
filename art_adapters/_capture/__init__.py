"""Capture: agent runs -> :class:`~art_adapters._trajectory.Trajectory`.

* :mod:`.langchain` — ``TrajectoryCallbackHandler``, a LangChain callback handler;
* :mod:`.otel` — ``TrajectorySpanProcessor``, an OpenTelemetry span processor;
* :mod:`.recorder` and :mod:`.assembly` — the LangChain-free bookkeeping and the
  assembly into trajectories that both share.

Import the public names from :mod:`art_adapters` (``aa.TrajectoryCallbackHandler``);
this package imports nothing on its own, so each path only loads what it needs.
"""
