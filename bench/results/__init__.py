"""What stored runs say: the frame of records and comparable conditions (frame), the regression gate's figures
(figures), its verdicts and A/A rates (gate), its baseline files and host matching (baselines), the harness's own
hot paths against their saved figures (hot_paths), agreement between sweeps (agreement), the terminal table of
runs (listing), a sweep's stored plan and state against its runs (sweeps). It imports the layers below (core to
tasks).
"""
