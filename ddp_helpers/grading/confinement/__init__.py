"""What a submission may do: the sandbox (bubblewrap, a clean environment) and its limits
(memory, processes, disk), held by cgroups or rlimits."""
