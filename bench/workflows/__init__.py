"""Work made of many runs: sweep planning and running, the regression gate's matrix, the self-check against
bare loops (and the bare loops themselves, bench.workflows.bare_loops). It imports the layers below.
"""
