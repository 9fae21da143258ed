"""The applications built on the library: the ``art-adapters`` command line, the demo and MCP-RL.

They sit on top of both :mod:`art_adapters` (the core) and :mod:`mcp_tools`, and are the only
code that imports both; neither library imports them.
"""

from art_adapters.apps._cli import app
from art_adapters.apps._demo import DemoConfig, DemoResult, run_demo
from art_adapters.apps._demo_config import default_demo_loop
from art_adapters.apps._train_mcp import TrainMcpConfig, TrainMcpResult, run_train_mcp

__all__ = [
    "DemoConfig",
    "DemoResult",
    "TrainMcpConfig",
    "TrainMcpResult",
    "app",
    "default_demo_loop",
    "run_demo",
    "run_train_mcp",
]
