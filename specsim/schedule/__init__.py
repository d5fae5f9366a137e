"""Width-to-depth schedules: tuning one on a trace (:func:`tune`), and writing it for the serving
engines or reading theirs back (:mod:`specsim.schedule.formats`)."""

from specsim.schedule.formats import ENGINES, EngineConfig, ScheduleFile, canonical, import_file, load_schedule
from specsim.schedule.formats import export as export_schedule
from specsim.schedule.tune import Score, TuneResult, tune

__all__ = ["ENGINES", "EngineConfig", "ScheduleFile", "Score", "TuneResult", "canonical", "export_schedule",
           "import_file", "load_schedule", "tune"]
