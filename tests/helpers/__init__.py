"""Helpers shared by the test folders, imported as ``tests.helpers.<module>``.

``fake_engine``/``fake_trainer``/``fake_backend``/``fake_serve``: the real backend app over a deterministic
fake engine and trainer (in a thread, or as a server process of its own); ``capture_fakes``: scripted
LangChain chat models and agents; ``judge_server``: a scripted OpenAI-compatible judge;
``families_support``, ``tiny_models``, ``toy_sequences``, ``openai_tools``, ``sampled_groups``,
``phoenix_server``, ``phoenix_fixture``, ``third_party``, ``scripted_generator``: what their names say,
for the families, training, observability and MCP tests.
"""
