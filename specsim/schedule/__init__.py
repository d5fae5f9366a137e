"""Width-to-depth schedules: the schedule as a value and its file (:mod:`specsim.schedule.formats`),
and tuning one on a trace (:mod:`specsim.schedule.tune`). The engines' formats of a schedule live
with each engine in :mod:`specsim.interop`."""

from specsim.schedule.formats import ScheduleFile, canonical, load_schedule

__all__ = ["ScheduleFile", "canonical", "load_schedule"]
