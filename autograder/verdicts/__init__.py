"""Stage 4: verdicts. Hidden tests cut in two at grading time (the kernel reports values, the grader decides),
and the template gradebook that holds the cut tests."""
