"""Horovod elastic's worker state (hvd.elastic.run, a State committed every C steps), over the Horovod module of the
rank's framework (horovod.torch, horovod.tensorflow), which the group gives: framework-neutral, so a TensorFlow
rank never loads torch."""

from __future__ import annotations

from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

from bench.backends.base import ElasticState, Position


class HorovodElasticState(ElasticState):
    """hvd.elastic.run over a TorchState committed every C steps: after a failure the survivors restore the last
    commit and go on at the new size; a joining worker receives the state by broadcast. `hvd` is the framework's
    Horovod module (horovod.torch here), whose hvd.elastic.run and State a subclass of another framework's takes
    (tracked)."""

    def __init__(self, hvd, model, optimizer, on_reset):
        self.hvd = hvd
        self.failures = (HorovodInternalError,)
        self.model, self.optimizer, self.state = self.tracked(hvd, model, optimizer)
        self.state.register_reset_callbacks([lambda: on_reset(hvd.rank(), hvd.size())])

    @staticmethod
    def tracked(hvd, model, optimizer):
        """(the model and optimizer as trained, the hvd.elastic State that commits, restores and syncs them and the
        step): hvd.DistributedOptimizer's gradients averaged, in a TorchState."""
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        return model, optimizer, hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    def run(self, train) -> int:
        return self.hvd.elastic.run(lambda state: train(self))(self.state)

    def resume(self) -> Position:
        hvd = self.hvd
        return Position(self.state.step, hvd.rank(), hvd.size(), hvd.local_rank(), 0, hvd.cross_rank())

    def commit(self, step, committed, detected) -> None:
        self.state.step = step
        committed()
        self.state.save()
        try:
            self.state.check_host_updates()
        except HostsUpdatedInterrupt:
            detected("hosts updated")
            raise
