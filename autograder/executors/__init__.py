"""Where :func:`autograder.pipeline.grade_task` runs: local worker processes, or a Dask cluster. Every executor
takes the same tasks and hands each result to the same ``deliver`` callback in the main process, which stays
the gradebook's only writer."""
