"""What the lessons show besides their exercises: pictures (nodes and GPUs, DDP's life
cycle, set_epoch's orders), and measurements with their plots (throughput on 1 and N
ranks, what an all_reduce costs)."""
