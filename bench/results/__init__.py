"""What stored runs say: the frame of records, comparable conditions, the regression gate's figures,
verdicts and baselines, agreement between sweeps, the terminal table of runs. It imports the layers below
(core to tasks).
"""
