"""The measurement collector: plans, workload runners, meters and the GPU-time loop.

It stands above the estimator (a plan's dry run uses estimates), and nothing but the CLI imports it.
"""
