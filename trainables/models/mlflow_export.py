"""A trained student as an MLflow model of the sentence-transformers flavour, written by the
worker that trained it, so the driver only uploads a folder.

Layout (what ``mlflow.sentence_transformers.save_model`` writes, without importing
sentence-transformers in the worker or inferring requirements in a subprocess)::

    model/
      MLmodel                      flavours: python_function + sentence_transformers
      requirements.txt, python_env.yaml, conda.yaml
      model.sentence_transformer/  the student folder (HF + sentence-transformers, CLS pooling)

``mlflow.sentence_transformers.load_model("runs:/<run>/model")`` and
``SentenceTransformer("<folder>/model.sentence_transformer")`` both load it.
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

DATA = "model.sentence_transformer"
"""the student folder's name inside the MLflow model (the flavour's fixed data path)"""


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def requirement(pkg: str, version: str | None) -> str:
    """``pkg==version`` without a local build label: ``torch==2.13.0+cpu`` (or ``+cu121``) names
    a wheel that only its own index serves, so a default index could not rebuild the model's
    environment; ``torch==2.13.0`` resolves there, to whichever build it serves."""
    return f"{pkg}=={version.split('+', 1)[0]}" if version else pkg


def write_mlflow_model(root: Path) -> Path:
    """Turn ``root`` (which holds the student folder under ``DATA``) into an MLflow model."""
    from mlflow.models import Model
    from mlflow.pyfunc import add_to_model

    if not (root / DATA / "config.json").is_file():
        raise FileNotFoundError(f"{root / DATA} is not a saved student folder")
    reqs = [requirement(p, _version(p)) for p in ("sentence-transformers", "transformers", "torch")]
    (root / "requirements.txt").write_text("\n".join(reqs) + "\n")
    py = platform.python_version()
    (root / "python_env.yaml").write_text(
        f"python: {py}\nbuild_dependencies:\n- pip\ndependencies:\n- -r requirements.txt\n")
    (root / "conda.yaml").write_text(
        f"channels:\n- conda-forge\ndependencies:\n- python={py}\n- pip\n- pip:\n"
        + "".join(f"  - {r}\n" for r in reqs) + "name: mlflow-env\n")
    m = Model()
    add_to_model(m, loader_module="mlflow.sentence_transformers", data=DATA,
                 conda_env="conda.yaml", python_env="python_env.yaml")
    m.add_flavor("sentence_transformers",
                 sentence_transformers_version=_version("sentence-transformers"), code=None)
    m.save(str(root / "MLmodel"))
    return root
