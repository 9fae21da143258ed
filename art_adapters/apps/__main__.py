"""``python -m art_adapters.apps``: the ``art-adapters`` command line."""

from art_adapters.apps._cli import app

if __name__ == "__main__":
    app(prog_name="art-adapters")
