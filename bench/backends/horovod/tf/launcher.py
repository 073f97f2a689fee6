"""horovod-tf's launcher: horovod's (horovodrun or mpirun; bench.backends.horovod.launcher), its ranks' environment
also TensorFlow's."""

from __future__ import annotations

from bench.backends.horovod.launcher import HorovodLauncher
from bench.backends.shared.tensorflow import TF_ENV


class HorovodTFLauncher(HorovodLauncher):
    def env(self, spec):
        return {**super().env(spec), **TF_ENV}
