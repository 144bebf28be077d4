"""An embedded Ray for the tests of a module that talk to Ray's GCS or run Tune."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from trainables.runtime.ray_env import init_ray

    started = not ray.is_initialized()
    init_ray(num_cpus=2, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
