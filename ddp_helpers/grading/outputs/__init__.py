"""What a batch writes: the CSV, the feedback files, the class report, an LMS gradebook
merge; and what reaches other programs, made inert."""
