"""An engine replica's launch on a node: its argument list, and the checks before it.

The node agent gets a profile (engine kind, model, port, GPUs, extra arguments) and,
before it starts anything, `check` says everything that would make the engine fail
later — an engine that refuses a profile after minutes of loading weights is the
expensive way to find out. `command` builds the real argument list and environment.
"""

from fairgate.launch.check import check
from fairgate.launch.command import Command, ProfileError, command
from fairgate.launch.profile import Profile

__all__ = ["Command", "Profile", "ProfileError", "check", "command"]
