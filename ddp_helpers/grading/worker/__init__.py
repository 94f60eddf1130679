"""One submission, in a process of its own: its notebook run in a fresh kernel, its answers
scored by the grader's own checks in separate processes."""
