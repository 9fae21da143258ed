"""Helpers shared by the test folders, imported as ``tests.helpers.<module>``.

``fake_engine``/``fake_trainer``/``fake_backend``/``fake_serve``: the real backend app over a deterministic
fake engine and trainer; ``capture_fakes``: scripted LangChain chat models and agents; ``json_server``,
``judge_server``, ``langfuse_api``: stand-in HTTP services; ``models``, ``sampled_groups``, ``engines``,
``observers``, ``conversations``, ``health_poll``, ``processes``, ``marks`` and the rest: what their names
say, for the families, training, observability and MCP tests.
"""
