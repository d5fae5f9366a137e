"""Questions answered by many simulations: :mod:`~specsim.studies.sweep` (a grid of what-ifs),
:mod:`~specsim.studies.capacity` (the smallest fleet that meets an SLO), :mod:`~specsim.studies.tune`
(a width-to-depth schedule tuned on a trace), :mod:`~specsim.studies.schedule_file` (the file
a tuned schedule is written to) and :mod:`~specsim.studies.windows` (a trace's time windows, and
traces resampled from them)."""
