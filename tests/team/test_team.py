"""The team server tests (issue 48), collected here so that a machine without PostgreSQL skips
them all in one line: the tables and checks through a group's servers (``group_servers``) and
the faults against them (``server_faults``). Run: ``python -m pytest -m slow tests/team``."""

import pytest

from tests.team.servers import NO_POSTGRES, PG_BIN

if not (PG_BIN / "initdb").exists():
    pytest.skip(NO_POSTGRES, allow_module_level=True)

from tests.team.group_servers import *  # noqa: E402,F403
from tests.team.server_faults import *  # noqa: E402,F403
