"""The backend's public surface, pinned: what the package and each wing export.

Each wing's package (``http``, ``serving``, ``serving.engine``, ``training``) names in ``__all__``
what the rest of the project (the process modules, the applications, ``bench/``) uses of it, and
loads each name on first use; the wings import one another's modules directly. A name added to or
dropped from a surface fails here until this list changes on purpose.
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import pytest

#: Each package's ``__all__``, in order (a string per package: one change here is one deliberate edit).
SURFACES: dict[str, list[str]] = {
    "art_adapters_backend": "APIError ServeConfig ServeLimits ServerState run_server".split(),
    "art_adapters_backend.http": "AdmissionGate create_app error_response install_error_handlers".split(),
    "art_adapters_backend.serving": (
        "AdapterCache CHAT_TEMPLATE_FILE ChatTemplate EXPORT_MANIFEST ModelFamily RecordStore "
        "Registry TokenTexts bundled_chat_template_path export_checkpoint parse_model_ref "
        "resolve_model_family write_serving_settings"
    ).split(),
    "art_adapters_backend.serving.engine": (
        "GenerationRequest InferenceEngine SamplingParams TorchEngine VllmEngine"
    ).split(),
    "art_adapters_backend.training": (
        "CheckpointLeases CheckpointStore LoraTrainer PeftTrainer TrainingSequence TrainingService "
        "UnslothTrainer"
    ).split(),
}


@pytest.mark.parametrize("name", SURFACES)
def test_each_package_exports_exactly_its_pinned_names(name: str) -> None:
    package = importlib.import_module(name)
    assert (package.__doc__ or "").strip(), f"{name} has no docstring"
    assert package.__all__ == SURFACES[name]
    assert package.__all__ == sorted(package.__all__), "keep __all__ sorted"
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("name", SURFACES)
def test_each_exported_name_imports_from_inside_its_package(name: str) -> None:
    package = importlib.import_module(name)
    for exported in package.__all__:
        value = getattr(package, exported)
        assert importlib.import_module(name).__dict__[exported] is value  # kept after the first use
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith(name + "."), f"{name}.{exported} comes from {value.__module__}"
            assert (value.__doc__ or "").strip(), f"{name}.{exported} has no docstring"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        package.nothing_here  # noqa: B018


def test_importing_the_packages_loads_no_framework_and_no_model_library() -> None:
    code = (
        "import json, sys\n"
        + "".join(f"import {name}\n" for name in SURFACES)
        + "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'fastapi', 'starlette', 'uvicorn', 'torch', 'transformers', 'jinja2', 'pydantic'} "
        "or (m.startswith('art_adapters_backend.') and m.rpartition('.')[2] != '_lazy'"
        f" and m not in {sorted(SURFACES)!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
