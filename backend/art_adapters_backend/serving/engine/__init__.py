"""Inference engines behind one interface (see :mod:`.base`)."""
