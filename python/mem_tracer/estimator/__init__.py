"""The estimator's Python front end: a model's peak predicted before it runs (docs/estimator.md).
`estimate` exports the forward (TorchScript, `torchscript_export`) or records a training step
or a forward on fake tensors (`step_graph`, with the step's recorder, loop and fake copies, the
device's kernels and optimizer, and one rank of a parallel job: `parallel`), and hands the file
to memtrace-estimate; `plan` sweeps the batch and the checkpointed blocks over it. The package's
top level (`mem_tracer.estimate`, `mem_tracer.plan`, `mem_tracer.TrainingStep`, ...) is the
public API; these modules are how it is built."""
