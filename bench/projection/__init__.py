"""The scaling model: step time, throughput and scaling efficiency at N workers, from measured parts, projected to
clusters that are not here and checked against runs it was not fitted on (docs/method.md, "Projection").

- `clusters`: a cluster as the model sees it (workers per node, nodes, each level's bandwidth and latency, the
  NCCL era), the named profiles with their sources and eras, CPU and GPU descriptions, and the test hosts' links;
- `model`: one step replayed: compute, the backend's communication schedule against the backward pass
  (bench.backends.base.CommSchedule), each collective's cost (the backend's alpha-beta fit plus the link), the
  compute the communication slows, and the backend's per-step overhead; with intervals drawn from the inputs' spread;
- `fit`: the model's inputs read from stored runs, each kept with the runs it came from;
- `validate`: predictions for stored runs across test hosts that the fit never saw, against what they measured;
- `shapes`: any model's gradients by name (`bench predict --model`), profiled in a child process and cached;
- `published`: the model against published GPU scaling tables (published/cases.json): its track record, on the
  fit set (whose tables set the spread of a GPU worker's step and NCCL's share of a TCP link before 2.4.8) and on
  the held-out tables apart;
- `study`: docs/studies/projection.md's tables, made from its store.

Every figure this layer gives is a projection, never a measurement; its callers say so. It may import the layers
below it (core; the backends, for their rules: CommSchedule, exchanges, cost_model; the harness, for the workload
check and its child runner; results); the page
(bench/report/scale.py) and `bench predict` (bench/cli/predict.py) show it.
"""
