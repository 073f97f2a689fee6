"""Timing of the input pipeline: a batch stream wrapped so that the training loop's wait for each batch is added up
(TimedBatches, the run's input wait), used only where a DataLoader feeds the run. It imports no framework."""

from __future__ import annotations


class TimedBatches:
    """A batch stream that adds up how long the training loop waited for its batches (input wait): two clock
    readings per step, only where a DataLoader feeds the run."""

    def __init__(self, inner):
        import time

        self.inner, self.wait_s, self._clock = inner, 0.0, time.perf_counter

    def __iter__(self):
        return self

    def __next__(self):
        t0 = self._clock()
        out = next(self.inner)
        self.wait_s += self._clock() - t0
        return out
