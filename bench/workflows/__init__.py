"""Work made of many runs: sweep planning and running, the regression gate's matrix, the self-check against
bare loops (and the bare loops themselves, bench.workflows.reference). It imports the layers below.
"""
