"""Built-in pickers: each chooses one replica from (replica, total score) pairs."""

from __future__ import annotations

from fairgate.routing.pickers.max_score import MaxScorePicker
from fairgate.routing.pickers.power_of_two import PowerOfTwoPicker
from fairgate.routing.pickers.round_robin import RoundRobinPicker
from fairgate.routing.pickers.softmax import SoftmaxPicker

__all__ = ["MaxScorePicker", "PowerOfTwoPicker", "RoundRobinPicker", "SoftmaxPicker"]
