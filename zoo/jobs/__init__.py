"""Running many jobs: where they run, what they leave behind, how a sweep resumes.

* :mod:`zoo.jobs.backends`: local processes or Ray tasks, interruption and watchdogs;
* :mod:`zoo.jobs.sweep`: a cached sweep of jobs (one JSON record per job, resumable);
* :mod:`zoo.jobs.results`: summaries, result JSON, figures and markdown tables;
* :mod:`zoo.jobs.runtime`: process settings for long-running workers.
"""
