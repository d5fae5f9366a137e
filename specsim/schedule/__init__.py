"""Width-to-depth schedules in the serving engines' formats: writing one for an engine or reading
theirs back (:mod:`specsim.schedule.formats`). Tuning one is :mod:`specsim.studies.tune`; specsim's
own schedule file is :mod:`specsim.studies.schedule_file`."""

from specsim.policy.schedule import canonical
from specsim.schedule.formats import ENGINES, EngineConfig, import_file, read_policy
from specsim.schedule.formats import export as export_schedule
from specsim.studies.schedule_file import ScheduleFile, load_schedule

__all__ = ["ENGINES", "EngineConfig", "ScheduleFile", "canonical", "export_schedule", "import_file", "load_schedule",
           "read_policy"]
