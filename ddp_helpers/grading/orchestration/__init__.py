"""The grader's own process: a batch of submissions, N at a time, each in a worker it
starts and supervises, and where the submissions are found."""
