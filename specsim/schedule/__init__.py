"""Width-to-depth schedules: the schedule as a value and its file (:mod:`specsim.schedule.formats`),
and tuning one on a trace (:func:`tune`). The engines' formats of a schedule live with each engine
in :mod:`specsim.interop`."""

from specsim.schedule.formats import ScheduleFile, canonical, load_schedule
from specsim.schedule.tune import Score, TuneResult, tune

__all__ = ["ScheduleFile", "Score", "TuneResult", "canonical", "load_schedule", "tune"]
